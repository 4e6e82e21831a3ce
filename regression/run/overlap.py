"""What the check run and the recording beside it share while both run: each process notes
the files and ports it reads and writes outside its own folders (an audit hook, PEP 578).
What one read that the other wrote, or a file both read that changed while they ran, is
shared: a case that may have taken the other run's value is never stored as the reference,
nor passed (references/beside.py, plugin/held_reports.py).

Noted: every file Python opens (builtin open, pathlib, `os.open`, `torch.load`, numpy's
`fromfile` and `tofile`), and those that safetensors' loaders, `torch.from_file` and sqlite
open, by its real path, as read or written by its flags (a file that is not there reads
nothing); a port bound (written) or connected to (read); a Unix socket's path likewise.
Native code that writes a file (`torch.save`, safetensors' `save_file`) raises no event, but
reading the file back does, hence the rule for files both read; and native code that reads
one (HDF5) likewise, hence the rule for files both wrote. Not noted: the tool's own folders
and code (the cache, its scratch and worktree folders), the Python installation and
installed packages, /proc, /sys, /dev (but /dev/shm), and caches whose files are named by
their content (compiled bytecode, torch.compile's and Triton's kernels). A file that native
code both writes and reads is not seen (docs/limits.md).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from regression.environment.origins import THIS_PACKAGE

READ, WROTE, REPLACED = "read", "wrote", "replaced"
"""What a run touched: read, wrote, and (of what it wrote) replaced: wrote from the start,
not appending."""
_LOCKS = (".lock", ".lck")
_SYSTEM = ("/proc/", "/sys/", "/dev/")
_SHARED_MEMORY = "/dev/shm/"


def _installation() -> tuple[str, ...]:
    """The Python installation and its packages: read by both runs, written by neither."""
    paths = {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib",
                                                       "platlib")}
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(os.path.realpath(p) + os.sep for p in paths if p)


def tool_folders(cache_dir: Path) -> list[Path]:
    """The tool's own folders, which neither run's cases use: the cache and the scratch
    and worktree folders in the temporary folder."""
    temporary = Path(tempfile.gettempdir())
    return [cache_dir, temporary / "torch-regression-worktrees",
            *temporary.glob("torch-regression-*")]


class Touches:
    """The files and ports this process read and wrote outside `own` folders and files,
    while `on`."""

    def __init__(self, own: Iterable[Path]) -> None:
        real = [os.path.realpath(p) for p in own]
        self.own_files = frozenset(real)
        self.own = tuple(p + os.sep for p in real) + _installation() + \
            (str(THIS_PACKAGE) + os.sep,)
        self.read: set[str] = set()
        self.wrote: set[str] = set()
        self.replaced: set[str] = set()
        self.on = True
        self._real: dict[str, str] = {}

    def saw_open(self, path: object, flags: object) -> None:
        """A file opened: read, written, or both, as its flags say."""
        name = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else path
        if not isinstance(name, str) or not name:
            return
        absolute = name if os.path.isabs(name) else os.path.join(os.getcwd(), name)
        real = self._real.get(absolute)
        if real is None:
            real = self._real[absolute] = os.path.realpath(absolute)
        if real in self.own_files or real.startswith(self.own) or _ignored(real):
            return
        access = flags & os.O_ACCMODE if isinstance(flags, int) else os.O_RDONLY
        truncates = isinstance(flags, int) and bool(flags & (os.O_TRUNC | os.O_EXCL))
        if access != os.O_WRONLY and not truncates and os.path.exists(real):
            self.read.add(real)  # one that is not there reads nothing (a probe that fails)
        if access != os.O_RDONLY:
            self.wrote.add(real)
            if not (isinstance(flags, int) and flags & os.O_APPEND):
                self.replaced.add(real)

    def saw_socket(self, address: object, how: str) -> None:
        """A port bound (`WROTE`) or connected to (`READ`); a Unix socket by its path."""
        if isinstance(address, (str, bytes)) and address:
            name = os.fsdecode(address)
            if not name.startswith("\0"):  # an abstract socket has no path
                self.saw_open(name, os.O_RDWR if how == WROTE else os.O_RDONLY)
            return
        if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int) \
                and address[1] != 0:  # port 0: the system picks a free one
            (self.wrote if how == WROTE else self.read).add(f"port {address[1]}")

    def data(self) -> dict[str, list[str]]:
        return {READ: sorted(self.read), WROTE: sorted(self.wrote),
                REPLACED: sorted(self.replaced)}


_CONTENT_ADDRESSED = (f"{os.sep}__pycache__{os.sep}", f"{os.sep}torchinductor_",
                      f"{os.sep}.triton{os.sep}")
"""Caches whose files are named by what they hold (compiled bytecode, torch.compile's and
Triton's kernels): two runs that share one share no value a case depends on."""


_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
"""Installed packages, of this interpreter or another's reached through a .pth file."""


def _ignored(real: str) -> bool:
    """System files, installed packages, and caches named by their content."""
    if real.startswith(_SYSTEM) and not real.startswith(_SHARED_MEMORY) or \
            any(i in real for i in _INSTALLED):
        return True
    return real.endswith((".pyc", ".pyo")) or any(c in real for c in _CONTENT_ADDRESSED)


def taken_from(touched: Mapping[str, Iterable[str]], other: Mapping[str, Iterable[str]],
               since: float) -> list[str]:
    """What a run that `touched` files and ports may have taken from the `other` run, both
    running since `since` (a time.time()):
    - what it read that the other wrote;
    - a file both read that changed since (native code writes unseen: `torch.save`);
    - a file both wrote from its start that changed since (native code reads unseen:
      safetensors' and HDF5's loaders); but not a lock file (`x.lock`), which holds none.
    Two runs that append to one file (a log) or bind one port share no value; nor do two
    that read one file nobody changed (a data set, a hub's cache)."""
    read = set(touched.get(READ, ()))
    flowed = read & set(other.get(WROTE, ()))
    both_read = read & set(other.get(READ, ()))
    both_replaced = {p for p in set(touched.get(REPLACED, ())) & set(other.get(REPLACED, ()))
                     if not p.endswith(_LOCKS)}
    unseen = (both_read | both_replaced) - flowed
    return sorted(flowed | {p for p in unseen if _changed_since(p, since)})


def _changed_since(path: str, since: float) -> bool:
    """Whether the file changed after `since`, or is gone; 50 ms of leeway for the file
    system's coarse clock. A port is no file: read by both, it changed nothing."""
    if path.startswith("port "):
        return False
    try:
        return os.stat(path).st_ctime >= since - 0.05
    except OSError:
        return True


SHARED = "this recording and the check run beside it used "
"""The start of why a case recorded beside the check run is recorded again alone."""


def shared_reason(shared: list[str]) -> str:
    """Why the cases recorded beside the check run are not stored: what both runs used."""
    more = f" and {len(shared) - 3} more" if len(shared) > 3 else ""
    return f"{SHARED}{', '.join(shared[:3])}{more}, one of them writing it"


_ACTIVE: list[Touches] = []
_HOOKED: list[bool] = []


def watch(touches: Touches) -> None:
    """Note what this process touches in `touches` from now on (until `stop`)."""
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(True)
    _ACTIVE[:] = [touches]
    note_native_readers()


_WRAPPED: set[str] = set()


def note_native_readers() -> None:
    """Readers whose native code opens files itself, raising no audit event, raise one
    first: safetensors' `safe_open` (its `load_file` calls it) and `torch.from_file`, once
    torch is loaded (call again once it is). The event reaches every hook: this watch's
    and the recording's watch of the user's tree. Idempotent."""
    if "safe_open" not in _WRAPPED and importlib.util.find_spec("safetensors") is not None:
        import safetensors  # loads no torch: its framework modules take the wrapper

        _wrap_reader(safetensors, "safe_open", "safetensors.")
        _WRAPPED.add("safe_open")
    torch = sys.modules.get("torch")
    if torch is not None and "from_file" not in _WRAPPED and hasattr(torch, "from_file"):
        _wrap_reader(torch, "from_file", "\0")  # no module re-exports it
        _WRAPPED.add("from_file")


def _wrap_reader(module: Any, name: str, prefix: str) -> None:
    """`module.name` (and the same function in the modules under `prefix`) first raises an
    "open" audit event for its first argument, as read."""
    original = getattr(module, name)

    def opened(filename: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(filename, (str, bytes, os.PathLike)):
            sys.audit("open", filename, "r", os.O_RDONLY)
        return original(filename, *args, **kwargs)

    setattr(module, name, opened)
    for each in list(sys.modules.values()):
        if getattr(each, "__name__", "").startswith(prefix) and \
                getattr(each, name, None) is original:
            setattr(each, name, opened)


def stop(touches: Touches) -> None:
    """Stop noting in `touches` (an audit hook cannot be removed: it idles)."""
    touches.on = False
    if _ACTIVE and _ACTIVE[0] is touches:
        _ACTIVE.clear()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: cheap for every other event, and never raises."""
    if not _ACTIVE:
        return
    try:
        if event == "open":
            if not isinstance(args[0], int):  # a descriptor is open already
                _ACTIVE[0].saw_open(args[0], args[2])
        elif event == "sqlite3.connect":
            if args and args[0] not in (":memory:", b":memory:", ""):
                _ACTIVE[0].saw_open(args[0], os.O_RDWR)
        elif event == "socket.bind":
            _ACTIVE[0].saw_socket(args[1], WROTE)
        elif event == "socket.connect":
            _ACTIVE[0].saw_socket(args[1], READ)
    except Exception:  # noqa: BLE001 - an audit hook that raises would break the user's call
        return
