"""Which files of the user's repository a recording reads or runs, seen by an audit hook."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from regression.run.overlap import note_native_readers
from regression.environment.origins import THIS_PACKAGE, is_package_above, library_folders, \
    resolved


class TreeWatch:
    """Every file of the user's repository that this process reads, runs or maps while
    recording at the reference, sorted at the end into free, hashed (test code) and refused.

    Why an audit hook (PEP 578, `sys.addaudithook`): every way Python reads or runs a file
    raises the "open" event (builtin open, `Path.read_text`, `os.open`, `io.open_code` under
    every loader: import by any name, `spec_from_file_location`, `SourceFileLoader`,
    `runpy.run_path`, `exec(open(...).read())`, `torch.load`, numpy's loaders) or the "exec"
    event, whose code object names its file; whatever name a module gets, and whether or not
    it stays in `sys.modules`. An import hook sees only imports by name, and `sys.modules`
    only modules that stay there. Native code that opens files itself raises no event:
    safetensors' `safe_open` and `torch.from_file` are wrapped to raise the event (numpy's
    `fromfile` raises it itself), and files still mapped into memory are read from
    /proc/self/maps after each case; another native reader that keeps no mapping (a C++
    extension's own reads, HDF5) is not seen, but a relative path it is given names the
    reference's file, the worktree being the working folder. Events are only noted here;
    the verdict comes at the end, so user code that catches an error cannot hide a read.
    """

    def __init__(self, project: Path, free: Sequence[Path], free_files: Sequence[Path],
                 subject: Sequence[Path], tests: Sequence[Path],
                 reference: Path | None = None, keyed: Sequence[Path] = ()) -> None:
        self.project = project.resolve()
        self.prefix = str(self.project) + os.sep
        self.reference = reference.resolve() if reference is not None else None
        """The reference's project folder (in its worktree), whose files are watched too:
        the key holds only its subject's code (`keyed`: folders and files), so any other
        file of the reference the recording reads is refused (reference_reads)."""
        self.reference_prefix = str(self.reference) + os.sep if self.reference else "\0"
        self.keyed = tuple(p.resolve() for p in keyed)
        self.started = time.time_ns()
        """A file of the reference changed since is the recording's own (it wrote it)."""
        self.free = tuple(p.resolve() for p in free) + library_folders() + (THIS_PACKAGE,)
        self.free_files = frozenset(p.resolve() for p in free_files)
        self.subject = tuple(p.resolve() for p in subject)
        self.tests = tuple(p.resolve() for p in tests)
        self.seen: dict[str, str] = {}
        """Real path -> "run" or "read", for files inside the project."""
        self.asked: dict[str, str] = {}
        """Real path -> "asked about" or "listed": paths of the reference the user's code
        (the subject's, the tests') stat-ed or listed. Only those there count (reference_
        reads): libraries try a model's name as a local path first, and nearly every such
        name is no file."""
        self.imported: set[str] = set()
        """Real paths of project modules named by an import statement (pytest imports test
        modules with importlib, so a test module here was imported by other code)."""
        self.variable_sites: dict[tuple[str, int], set[str]] = {}
        """The environment variables the subject's code read, by where it read them."""
        self.keyed_code = tuple(str(p) + (os.sep if p.is_dir() else "") for p in self.keyed)
        self._markers = frozenset(str(self.reference / p.relative_to(self.project))
                                  for p in self.free_files if p.is_relative_to(self.project)
                                  ) | frozenset(str(self.reference / n) for n in _MARKERS) \
            if self.reference else frozenset()
        """The project's own files at the reference (config.yaml, pytest's settings, setup.py,
        .git): asked about to find the project's top, never a setting of the outputs."""
        self._libraries = tuple(str(p) + os.sep for p in (*library_folders(), THIS_PACKAGE))
        """Installed packages (a virtual environment inside the project too) and this tool:
        what they ask about is no question of the user's code."""
        self._real: dict[str, str] = {}

    def saw(self, path: object, how: str) -> None:
        """Note `path` (relative to the working folder) if it lies inside the project; `how`
        is "read", "run", or "import" (named by an import statement)."""
        name = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else path
        if not isinstance(name, str):
            return
        absolute = name if os.path.isabs(name) else os.path.join(os.getcwd(), name)
        real = self._real.get(absolute)
        if real is None:
            real = self._real[absolute] = resolved(absolute, self._real)
        if not real.startswith(self.prefix) and not real.startswith(self.reference_prefix):
            return
        if how == "import":
            self.imported.add(real)
        if how != "read" or real not in self.seen:
            self.seen[real] = "read" if how == "read" else "run"

    def saw_question(self, path: object, how: str, filename: str) -> None:
        """A path of the reference that the code of `filename` asked about (stat, exists,
        isfile) or listed: noted where that code is the user's (not pytest's, nor an
        installed package's) and the path is the reference's, outside the subject's code."""
        if not os.path.isabs(filename) or self.reference is None:
            return
        real = self._real.get(filename)
        if real is None:
            real = self._real[filename] = resolved(filename, self._real)
        if not real.startswith((self.prefix, self.reference_prefix)) or \
                real.startswith(self._libraries):
            return
        name = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else path
        if not isinstance(name, str):
            return
        absolute = os.path.join(os.getcwd(), name) if not os.path.isabs(name) else name
        asked = resolved(os.path.normpath(absolute), self._real)
        inside = asked.startswith(self.reference_prefix) or \
            (how == "listed" and asked == str(self.reference))
        above = how == "asked about" and any(k.startswith(asked + os.sep)
                                             for k in self.keyed_code)  # realpath's steps
        if inside and not above and asked not in self._markers and \
                not any(asked == k.rstrip(os.sep) or asked.startswith(k) for k in self.keyed_code):
            self.asked.setdefault(asked, how)

    def saw_variable(self, name: str, filename: str, line: int) -> None:
        """An environment variable read by the code of `filename`: noted if that is the
        subject's at the reference (the test code's own switches, log paths and the like
        are the harness's business, and an installed package's are not the subject's)."""
        if not os.path.isabs(filename):
            return
        real = self._real.get(filename)
        if real is None:
            real = self._real[filename] = resolved(filename, self._real)
        if any(real == k or real.startswith(k) for k in self.keyed_code):
            self.variable_sites.setdefault((real, line), set()).add(name)

    def variables_read(self) -> list[str]:
        """The environment variables the subject's code read, one by one: a line that read
        more than BULK of them copied the environment (`dict(os.environ)` for a child
        process), which makes no value depend on each."""
        return sorted({name for names in self.variable_sites.values() if len(names) <= BULK
                       for name in names})

    def saw_mappings(self, maps: Path = Path("/proc/self/maps")) -> None:
        """Note the project's files mapped into this process (safetensors maps its files).

        Read after every case, so only the lines that hold the project's path are parsed
        (a torch process maps some 350 regions): a line names a file of the project only
        if it holds the project's path, and each such line is then parsed in full.
        """
        try:
            data = maps.read_bytes()
        except OSError:
            return  # no /proc (macOS): only the audit events count
        prefix = os.fsencode(self.prefix)
        found = data.find(prefix)
        while found != -1:
            end = data.find(b"\n", found)
            end = len(data) if end == -1 else end
            fields = data[data.rfind(b"\n", 0, found) + 1:end].split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(prefix):
                self.saw(os.fsdecode(fields[5].removesuffix(b" (deleted)")), "read")
            found = data.find(prefix, end)

    def saw_modules(self) -> None:
        """Note the files of modules loaded before the watch began (plugins, pytest's own)."""
        for module in list(sys.modules.values()):
            origin = getattr(module, "__file__", None) if module is not None else None
            if isinstance(origin, str) and os.path.isabs(origin):
                self.saw(origin, "run")

    def sorted_out(self, test_modules: Iterable[Path]) -> tuple[dict[str, str], list[Path]]:
        """The files refused (relative name -> why) and the helpers to hash: what was seen
        outside the free places, the test modules and conftest.py files."""
        modules = {p.resolve() for p in test_modules} - {Path(p) for p in self.imported}
        refused: dict[str, str] = {}
        helpers: set[Path] = set()
        for real, how in sorted(self.seen.items()):
            path = _source_of(Path(real))
            if not path.is_relative_to(self.project) or (
                    self.reference is not None and path.is_relative_to(self.reference)):
                continue  # the reference's (reference_reads)
            if path in modules or path.name == "conftest.py" or path in self.free_files \
                    or path.is_dir():
                continue  # hashed into the cases' harness already, or a folder
            test, subject = _deepest(path, self.tests), _deepest(path, self.subject)
            if len(test.parts) > len(subject.parts):  # tests: [.] holds the subject's folder
                helpers.add(path)
            elif not self._is_free(path):
                how = "run" if path.suffix in _CODE else how
                where = "; the subject's" if subject.parts else ""
                refused[path.relative_to(self.project).as_posix()] = f"{how}{where}"
        return refused, sorted(helpers)

    def reference_reads(self) -> dict[str, str]:
        """The files of the reference (relative name -> "read" or "run") that the recording
        took outside the subject's code, the only part of the reference the key holds; a
        file written since the recording began is its own, not the reference's."""
        if self.reference is None:
            return {}
        found: dict[str, str] = {}
        for real, how in sorted(self.seen.items()):
            path = _source_of(Path(real))
            if not path.is_relative_to(self.reference) or path.is_dir() \
                    or any(path == k or path.is_relative_to(k) for k in self.keyed):
                continue
            try:
                if os.stat(path).st_mtime_ns >= self.started:
                    continue
            except OSError:
                continue  # gone: made and removed by the recording
            found[path.relative_to(self.reference).as_posix()] = \
                "run" if path.suffix in _CODE else how
        asked = {Path(real).relative_to(self.reference).as_posix(): how
                 for real, how in self.asked.items()}
        for name in sorted(_committed(self.reference, asked)):
            found.setdefault(name, asked[name])
        return found

    def _is_free(self, path: Path) -> bool:
        """Package metadata, inside a free folder (worktree, cache, .git, libraries), or the
        `__init__.py` of a package that holds the tests."""
        return (any(part.endswith((".egg-info", ".dist-info")) for part in path.parts)
                or any(path.is_relative_to(f) for f in self.free)
                or is_package_above(path, self.tests + self.free))


def _committed(worktree: Path, names: Iterable[str]) -> set[str]:
    """Those of `names` (relative to the reference's project folder in its worktree) that
    the reference's commit holds: a file, or a folder with one in it. What the recording
    made (a folder of checkpoints, pytest's --basetemp) is not, nor a name no file has (a
    model's name tried as a path). All of them where git cannot tell."""
    from regression.repository.gitcmd import git_process

    names = sorted(names)
    if not names:
        return set()
    done = git_process(worktree, "ls-files", "-z", "--", *(f":(literal){n}" for n in names))
    if done.returncode != 0:
        return set(names)
    listed = [entry for entry in done.stdout.split("\0") if entry]
    return {n for n in names if n == "." and listed or
            any(entry == n or entry.startswith(f"{n}/") for entry in listed)}


_MARKERS = ("setup.py", ".git", ".gitignore", "pyproject.toml", "setup.cfg", "tox.ini",
            "pytest.ini", ".pytest.ini")
"""Files that mark a project's top, which code asks about to find it."""
_CODE = (".py", ".pyc", ".so", ".pyd")
BULK = 3
"""More variables than this read on one line: a copy of the environment, not a setting."""


def _deepest(path: Path, folders: Sequence[Path]) -> Path:
    """The deepest of `folders` that holds `path`; Path() when none does."""
    return max((f for f in folders if path.is_relative_to(f)), key=lambda f: len(f.parts),
               default=Path())


def _source_of(path: Path) -> Path:
    """A cached module's source: `x/__pycache__/m.cpython-311.pyc` -> `x/m.py`."""
    if path.parent.name == "__pycache__" and path.suffix == ".pyc":
        return path.parent.parent / f"{path.name.split('.', 1)[0]}.py"
    return path


_WATCHES: list[TreeWatch] = []
"""The active watch, if any: an audit hook cannot be removed, only left idle."""
_HOOKED: list[bool] = []


def watch_tree(watch: TreeWatch) -> None:
    """Make `watch` the active one, installing the audit hook (and the watch of the
    environment's reads) once per process."""
    if not _HOOKED:
        sys.addaudithook(_audit)
        _note_import_statements()
        _note_environment_reads()
        _note_questions()
        _HOOKED.append(True)
    note_native_readers()  # their files raise an audit event too (torch's: once it is loaded)
    _WATCHES[:] = [watch]


def _note_import_statements() -> None:
    """A test module imported by another (`from test_a import make_model`) is a helper of
    the cases that use it: every import statement goes through `builtins.__import__`, also
    when the module is loaded already, while pytest loads test modules with importlib."""
    import builtins

    original = builtins.__import__

    def __import__(name: str, globals: Mapping[str, object] | None = None,  # noqa: A002
                   locals: Mapping[str, object] | None = None,  # noqa: A002
                   fromlist: Sequence[str] | None = (), level: int = 0) -> ModuleType:
        module = original(name, globals, locals, fromlist, level)
        if _WATCHES:
            _note_imported(module, name, fromlist, level)
        return module

    builtins.__import__ = __import__


def _note_imported(module: ModuleType, name: str, fromlist: Sequence[str] | None,
                   level: int) -> None:
    """Note the file of each module an import statement named; never raises."""
    try:
        named = module if fromlist or level else sys.modules.get(name, module)
        found = [named] + [getattr(named, item, None) for item in fromlist or ()]
        for each in found:
            origin = getattr(each, "__file__", None) if isinstance(each, ModuleType) else None
            if isinstance(origin, str) and os.path.isabs(origin):
                _WATCHES[0].saw(origin, "import")
    except Exception:  # noqa: BLE001 - the user's import must not fail here
        return


def _note_environment_reads() -> None:
    """Every read of `os.environ` (`os.environ[...]`, `.get`, `in`, `os.getenv` all read an
    item) is noted with the first frame outside the standard library: who asked. Reads by
    native code (`getenv` in C) are not seen: torch's own are in the key (KERNEL_VARIABLES)."""
    environ: Any = os.environ

    class WatchedEnviron(type(environ)):  # type: ignore[misc]
        def __getitem__(self, key: str) -> str:
            if _WATCHES and not getattr(_OWN, "reading", False):
                _note_variable(key)
            return super().__getitem__(key)  # type: ignore[no-any-return]

    environ.__class__ = WatchedEnviron


def _note_variable(key: object) -> None:
    """Note who read the variable `key`: the code that asked os.environ itself (past the
    mapping's own methods and os.getenv); a read the standard library makes on its caller's
    behalf (tempfile's TMPDIR, shutil's COLUMNS, expanduser's HOME) is no setting of
    theirs. Never raises."""
    try:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.endswith(_ENVIRON_CODE):
            frame = frame.f_back
        if frame is not None and isinstance(key, str) and _WATCHES:
            _WATCHES[0].saw_variable(key, frame.f_code.co_filename, frame.f_lineno)
    except Exception:  # noqa: BLE001 - the user's read must not fail here
        return


_ENVIRON_CODE = (f"{os.sep}os.py", f"{os.sep}_collections_abc.py", "<frozen os>",
                 "<frozen _collections_abc>")
"""Where os.environ's own methods (get, setdefault, in) and os.getenv are defined."""


def _note_questions() -> None:
    """Every `os.stat`, `os.lstat` and `os.access` (`os.path.exists`, `isfile`,
    `Path.exists`...) is noted with the code that asked, past os.path and pathlib
    (importlib's own stats go to posix directly); listings raise audit events."""
    for name in ("stat", "lstat", "access"):
        original = getattr(os, name)

        def asked(path: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if _WATCHES and not getattr(_OWN, "reading", False):
                _note_question(path, "asked about", 2)
            return _original(path, *args, **kwargs)

        setattr(os, name, asked)


def _note_question(path: object, how: str, depth: int) -> None:
    """Note `path` with who asked about it (`depth` frames up): the first caller past os,
    os.path, pathlib and glob, which ask on their caller's behalf. What the noting itself
    stats is not noted. Never raises."""
    _OWN.reading = True
    try:
        frame: FrameType | None = sys._getframe(depth)
        while frame is not None and (frame.f_code.co_filename.endswith(_PATH_CODE) or
                                     _PATHLIB in frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None and _WATCHES:
            _WATCHES[0].saw_question(path, how, frame.f_code.co_filename)
    except Exception:  # noqa: BLE001 - the user's call must not fail here
        return
    finally:
        _OWN.reading = False


_PATH_CODE = (f"{os.sep}os.py", f"{os.sep}genericpath.py", f"{os.sep}posixpath.py",
              f"{os.sep}pathlib.py", f"{os.sep}glob.py", "<frozen os>", "<frozen posixpath>",
              "<frozen genericpath>")
"""Where os.path, pathlib and glob, which stat and list on their caller's behalf, live."""
_PATHLIB = f"{os.sep}pathlib{os.sep}"
"""pathlib as a package (Python 3.13 on)."""


def stop_watching() -> None:
    _WATCHES.clear()


_OWN = threading.local()
"""`reading` is set while this thread runs the tool's own reads (own_reads)."""


@contextmanager
def own_reads() -> Iterator[None]:
    """The tool's own reads, in this thread, for the length of the block: not the user's,
    so never noted (the user's code runs in none of these blocks)."""
    before = getattr(_OWN, "reading", False)
    _OWN.reading = True
    try:
        yield
    finally:
        _OWN.reading = before


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: cheap for every other event, and never raises."""
    if not _WATCHES or event not in _EVENTS or getattr(_OWN, "reading", False):
        return
    if event == "os.listdir" or event == "os.scandir":
        _note_question(args[0] if args[0] is not None else ".", "listed", 2)
        return
    _OWN.reading = True  # what noting stats (realpath) is no question of the user's
    try:
        if event == "open":
            path, flags = args[0], args[2]
            if isinstance(path, int) or (isinstance(flags, int) and _writes_only(flags)):
                return  # a descriptor already open, or a write
            _WATCHES[0].saw(path, "read")
        else:
            name = getattr(args[0], "co_filename", None)
            if isinstance(name, str) and os.path.isabs(name):
                _WATCHES[0].saw(name, "run")
    except Exception:  # noqa: BLE001 - an audit hook that raises would break the user's call
        return
    finally:
        _OWN.reading = False


_EVENTS = frozenset({"open", "exec", "os.listdir", "os.scandir"})


def _writes_only(flags: int) -> bool:
    """Whether an open with `flags` cannot read what the file held: write-only, or a file
    emptied (O_TRUNC) or made new (O_EXCL)."""
    return flags & os.O_ACCMODE == os.O_WRONLY or bool(flags & (os.O_TRUNC | os.O_EXCL))
