"""A child process that ends with its parent: a cancelled CI job kills the invoke process
(TERM or KILL), and neither its check run nor the recording may outlive it, holding the
cache entry's lock. Linux's parent-death signal (prctl PR_SET_PDEATHSIG); nothing elsewhere.

The signal comes when the *thread* that started the child ends, so children are started
from the main thread only (pytest's hooks and the invoke tasks run there).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any, Callable

PR_SET_PDEATHSIG = 1
"""prctl's option (linux/prctl.h): the signal this process gets when its parent dies."""

_PRCTL: list[Any] = []
"""libc's prctl, looked up once in the parent: a lookup after fork could wait forever on a
loader lock another thread held at the fork."""


def _prctl() -> Any | None:
    """libc's prctl on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    if not _PRCTL:
        try:
            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        except (OSError, AttributeError):
            _PRCTL.append(None)
    return _PRCTL[0]


def end_with(parent: int, prctl: Any | None, sig: int = signal.SIGTERM) -> None:
    """Have this process (a child of `parent`) get `sig` when its parent dies; `sig` at once
    if the parent is gone already (it died before this call). `prctl`: from `_prctl()`."""
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def ending_with_this_process() -> Callable[[], None] | None:
    """What a child of this process calls first (a subprocess's `preexec_fn`, or a fork's
    first step) to end (TERM) when this process does; None where there is no parent-death
    signal, or off the main thread (whose end would end the child)."""
    prctl = _prctl()
    if prctl is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    return lambda: end_with(parent, prctl)
