"""The environment a pytest run started with, before any conftest, fixture or subject code
ran: what the recordings a check run starts are given, and where the value of a variable
the subject read is taken (environment/harness.py). A leaf: a plain pytest run loads it.

The run's first process takes it and hands it on in REGRESSION_START_ENVIRON: its xdist
workers (started once conftests have run in it) and the recordings it starts take that,
not their own, so every process of one run counts from the same environment. Only a
descendant of the process that handed it on takes it, and a run the launcher starts on its
own (a check run, a collection) is handed none: a nested or leftover one is never taken."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

HANDED = "REGRESSION_START_ENVIRON"
"""The start environment of the run that started this process, and that run's process id,
as JSON."""
_LARGEST = 120 << 10
"""An environment larger than this (bytes of JSON) is not handed on: one variable must stay
under the system's limit for it (128 KiB on Linux); each process then takes its own."""
_RUNS: list[tuple[int, dict[str, str], str | None]] = []
"""The runs under way in this process, innermost last (pytester's runs nest): each one's
process id, start environment, and the hand-on it found (put back when it ends)."""
_TAKEN: set[int] = set()
"""The processes whose run took a start environment: a later run in one of them (pytester's,
in-process) is a run of its own, and takes its own."""


def keep_start_environment() -> None:
    """Keep this process's environment as its pytest run starts (run/entry.py, before any
    conftest loads), or the one an ancestor's run handed on to it, so that what the user's
    code sets as it runs (a default, a fixture's `HF_HUB_OFFLINE`) is neither handed to the
    reference's recording nor taken for a change. A process's first run takes what was
    handed on to it; a later run in the same process (pytester's) takes its own."""
    found = os.environ.get(HANDED)
    handed = _handed(found) if os.getpid() not in _TAKEN else None
    _TAKEN.add(os.getpid())
    if handed is None:
        handed = {k: v for k, v in os.environ.items() if k != HANDED}
        text = json.dumps({"pid": os.getpid(), "environ": handed}, ensure_ascii=False)
        if len(text.encode(errors="surrogateescape")) <= _LARGEST:
            os.environ[HANDED] = text
        else:
            os.environ.pop(HANDED, None)
    _RUNS.append((os.getpid(), handed, found))


def _handed(text: str | None) -> dict[str, str] | None:
    """The start environment an ancestor's run handed on to this process; None where none
    was, or it is another's (a leftover, a run this one does not belong to)."""
    try:
        found = json.loads(text or "null")
    except ValueError:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("pid"), int) \
            or not _is_ancestor(found["pid"]):
        return None
    environ = found.get("environ")
    if isinstance(environ, dict) and all(isinstance(k, str) and isinstance(v, str)
                                         for k, v in environ.items()):
        return environ
    return None


def _is_ancestor(pid: int) -> bool:
    """Whether process `pid` is this one's parent, or its parent's, and so on (Linux: from
    /proc; elsewhere only the parent is known)."""
    current = os.getpid()
    for _ in range(64):
        parent = _parent_of(current)
        if parent is None or parent <= 1:
            return False
        if parent == pid:
            return True
        current = parent
    return False


def _parent_of(pid: int) -> int | None:
    if pid == os.getpid():
        return os.getppid()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def forget_start_environment() -> None:
    """The run has ended (run/entry.py): the run around it in this process, if any, is
    the one under way again, with the hand-on it found; outside any, what this process
    starts gets its environment as it is."""
    if not _RUNS:
        return
    pid, _, found = _RUNS.pop()
    if pid == os.getpid():
        if found is None:
            os.environ.pop(HANDED, None)
        else:
            os.environ[HANDED] = found


def start_environment() -> Mapping[str, str]:
    """The environment the innermost run of this process started with; as it is now outside
    a run (the invoke process)."""
    if _RUNS and _RUNS[-1][0] == os.getpid():
        return _RUNS[-1][1]
    return os.environ


def without_hand_on(environ: dict[str, str]) -> dict[str, str]:
    """`environ` for a run started on its own (a check run, a collection), or by a process
    that is in no run (the invoke process: what it holds is a leftover): the run takes its
    own start environment."""
    return {k: v for k, v in environ.items() if k != HANDED}


def in_run() -> bool:
    """Whether a pytest run of this process is under way (it may hand its start on)."""
    return bool(_RUNS) and _RUNS[-1][0] == os.getpid()
