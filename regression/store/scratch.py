"""The temporary folders of a run: marked as ours, removed when the run ends; those that
killed runs left are removed by the next run, and nothing that is not provably ours."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from regression.errors import StoreError
from regression.store.regular import RUN, read_regular

PREFIX = "torch-regression-"
MARKER = ".torch-regression-run"
_MARKED = re.compile(r"torch-regression run of process (\d+)\n")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (another user's counts: it may not be signalled). A zombie
    does not: a killed run's forked check run stays one where nothing reaps it (a container
    whose first process reaps no orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether Linux's /proc says `pid` has ended and waits to be reaped; False elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return fields.rpartition(")")[2].split()[:1] == ["Z"]


@contextmanager
def scratch_folder(kind: str) -> Iterator[Path]:
    """A new folder in the system's temporary folder for one run's files (a job, its result,
    traces), marked with this process's id and removed afterwards. Folders that killed runs
    left are removed first."""
    remove_stale()
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-"))
    try:
        (folder / MARKER).write_text(f"torch-regression run of process {os.getpid()}\n",
                                     encoding="ascii")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_stale(parent: Path | None = None) -> list[Path]:
    """Remove the scratch folders of runs that ended without removing them (killed): those
    in `parent` (the temporary folder) whose marker names a process that no longer exists."""
    parent = parent or Path(tempfile.gettempdir())
    try:
        names = [entry.name for entry in os.scandir(parent) if entry.name.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        owner = run_owner(parent / name)
        if owner is not None and not pid_alive(owner):
            shutil.rmtree(parent / name, ignore_errors=True)
            removed.append(parent / name)
    return removed


def run_owner(folder: Path) -> int | None:
    """The process id that `folder`'s marker names; None unless it is provably one of our
    scratch folders: a real folder (no link) of this user, holding our marker as we write it."""
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None
        text = _small_regular_file(folder / MARKER)
    except OSError:
        return None
    match = _MARKED.fullmatch(text or "")
    return int(match.group(1)) if match else None


def _small_regular_file(path: Path) -> str | None:
    """The ASCII text of a small regular file; None when it is no such file."""
    try:
        return read_regular(path, 200, RUN).decode("ascii")
    except (StoreError, UnicodeDecodeError):
        return None
