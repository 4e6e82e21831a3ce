"""The environment a pytest run started with, before any conftest, fixture or subject code
ran: what the recordings a check run starts are given, and where the value of a variable
the subject read is taken (environment/harness.py). A leaf: a plain pytest run loads it.

The run's first process takes it and hands it on in REGRESSION_START_ENVIRON: its xdist
workers (started once conftests have run in it) and the recordings it starts take that,
not their own, so every process of one run counts from the same environment."""

from __future__ import annotations

import json
import os
from typing import Mapping

HANDED = "REGRESSION_START_ENVIRON"
"""The start environment of the run that started this process, and that run's process id,
as JSON."""
_LARGEST = 64 << 10
"""An environment larger than this (bytes of JSON) is not handed on: a variable must stay
well under the system's limit for one (128 KiB on Linux)."""
_START: list[tuple[int, dict[str, str]]] = []
_TAKEN: set[int] = set()
"""The processes whose run took a start environment: a later run in one of them (pytester's,
in-process) is a run of its own, and takes its own."""


def keep_start_environment() -> None:
    """Keep this process's environment as its pytest run starts (run/entry.py, before any
    conftest loads), or the one another process's run handed on to it, so that what the
    user's code sets as it runs (a default, a fixture's `HF_HUB_OFFLINE`) is neither handed
    to the reference's recording nor taken for a change. A process's first run takes what
    was handed on to it; a later run in the same process (pytester's) takes its own."""
    handed = _handed() if os.getpid() not in _TAKEN else None
    _TAKEN.add(os.getpid())
    if handed is None:
        handed = {k: v for k, v in os.environ.items() if k != HANDED}
        text = json.dumps({"pid": os.getpid(), "environ": handed})
        if len(text) <= _LARGEST:
            os.environ[HANDED] = text
    _START[:] = [(os.getpid(), handed)]


def _handed() -> dict[str, str] | None:
    """The start environment another process's run handed on to this process; None where
    none was (or it does not read as one)."""
    try:
        found = json.loads(os.environ.get(HANDED, "null"))
    except ValueError:
        return None
    if not isinstance(found, dict) or found.get("pid") == os.getpid():
        return None
    environ = found.get("environ")
    if isinstance(environ, dict) and all(isinstance(k, str) and isinstance(v, str)
                                         for k, v in environ.items()):
        return environ
    return None


def forget_start_environment() -> None:
    """The run has ended (run/entry.py): what this process starts from now on gets its
    environment as it is."""
    try:
        mine = json.loads(os.environ.get(HANDED, "null")).get("pid") == os.getpid()
    except (ValueError, AttributeError):
        mine = False
    if mine:
        os.environ.pop(HANDED, None)
    _START.clear()


def start_environment() -> Mapping[str, str]:
    """This process's environment as its pytest run started; as it is now outside a run
    (the invoke process)."""
    return _START[0][1] if _START and _START[0][0] == os.getpid() else os.environ
