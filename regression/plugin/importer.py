"""Import the subject packages from the reference worktree, and prove that it happened.

pytest puts the rootdir at the front of sys.path when a rootdir conftest.py exists, and an
editable install adds its own finder, so path order alone would import the candidate. A
finder at the front of sys.meta_path answers for the subject packages before anything else.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping, Sequence

from regression.errors import ImportRedirectError, StrayImportError


def _is_subject(name: str, packages: Sequence[str]) -> bool:
    return name.partition(".")[0] in packages


class SubjectRedirect(importlib.abc.MetaPathFinder):
    """Finds the subject packages, and only them, under `root`."""

    def __init__(self, packages: Sequence[str], root: Path) -> None:
        self.packages = tuple(packages)
        self.root = root.resolve()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not _is_subject(fullname, self.packages):
            return None
        parent, _, _ = fullname.rpartition(".")
        if parent:
            search = list(getattr(sys.modules.get(parent), "__path__", None) or [])
        else:
            search = [str(self.root)]
        spec = importlib.machinery.PathFinder.find_spec(fullname, search)
        if spec is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} in the reference worktree {self.root}",
                name=fullname,
            )
        return spec


def install_redirect(packages: Sequence[str], root: Path, strict: bool = False) -> SubjectRedirect:
    """Put the redirect first on sys.meta_path, dropping any subject module already loaded.

    With `strict`, an already loaded subject module is an error instead: whatever imported it
    (a plugin loaded before this one) keeps the other copy, where no check can see it.
    """
    loaded = sorted(n for n in sys.modules if _is_subject(n, packages))
    if loaded and strict:
        raise ImportRedirectError(
            f"the subject was imported before the import redirect could be installed "
            f"({', '.join(loaded)}); a pytest plugin or a .pth file imports it at start-up. "
            "Nothing was stored. Make that plugin import the subject lazily, or leave it "
            "out of the regression run (-p no:NAME in addopts)."
        )
    for name in loaded:
        del sys.modules[name]
    finder = SubjectRedirect(packages, root)
    sys.meta_path.insert(0, finder)
    importlib.invalidate_caches()
    return finder


def module_locations(module: ModuleType) -> list[str]:
    """The files or folders a module was loaded from."""
    origin = getattr(module, "__file__", None)
    if origin:
        return [origin]
    return [str(p) for p in (getattr(module, "__path__", None) or [])]


def foreign_modules(packages: Sequence[str], root: Path) -> dict[str, list[str]]:
    """Subject modules in sys.modules that were not loaded from under `root`."""
    root = root.resolve()
    foreign: dict[str, list[str]] = {}
    for name, module in sorted(sys.modules.items()):
        if module is None or not _is_subject(name, packages):
            continue
        locations = module_locations(module)
        outside = [loc for loc in locations if not Path(loc).resolve().is_relative_to(root)]
        if outside or not locations:
            foreign[name] = outside or ["<no file>"]
    return foreign


def verify_origins(packages: Sequence[str], root: Path) -> None:
    """Raise unless every imported subject module came from under `root`."""
    foreign = foreign_modules(packages, root)
    if foreign:
        lines = "\n".join(f"  {name}: {', '.join(locs)}" for name, locs in foreign.items())
        raise ImportRedirectError(
            f"subject modules were imported from outside the reference worktree {root}:\n"
            f"{lines}\nNothing was stored. Something imported them before the redirect "
            "or bypassed it (importlib.util.spec_from_file_location, a .pth file); "
            "import the subject by its package name."
        )


def library_folders() -> tuple[Path, ...]:
    """The standard library and site-packages of this interpreter (a venv may sit in the
    project folder: what is installed there is not the user's working tree)."""
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib",
                                                       "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    return tuple(Path(p).resolve() for p in paths if p)


def stray_modules(project: Path, allowed: Sequence[Path], allowed_files: Sequence[Path] = ()
                  ) -> dict[str, str]:
    """Modules loaded from inside `project` but outside `allowed` folders and files.

    conftest.py files and the `__init__.py` of folders that hold an allowed folder are
    harness, and so is this package itself (it may be developed inside the project).
    """
    project = project.resolve()
    folders = tuple(p.resolve() for p in allowed) + library_folders() + (_THIS_PACKAGE,)
    files = {p.resolve() for p in allowed_files}
    stray = {}
    for name, module in sorted(sys.modules.items()):
        origin = getattr(module, "__file__", None) if module is not None else None
        if not isinstance(origin, str) or not Path(origin).is_absolute():
            continue  # built in, namespace, or a name only (torch.ops: "_ops.py")
        path = Path(origin).resolve()
        if not path.is_relative_to(project) or path in files or path.name == "conftest.py":
            continue
        if any(path.is_relative_to(f) for f in folders) or _is_package_above(path, folders):
            continue
        stray[name] = path.relative_to(project).as_posix()
    return stray


_THIS_PACKAGE = Path(__file__).resolve().parent


def _is_package_above(path: Path, folders: Sequence[Path]) -> bool:
    """Whether `path` is the `__init__.py` of a folder that holds one of `folders`."""
    return path.name == "__init__.py" and any(f.is_relative_to(path.parent) for f in folders)


def require_no_strays(project: Path, allowed: Sequence[Path],
                      allowed_files: Sequence[Path] = ()) -> None:
    """Raise StrayImportError naming every module the recording took from the working tree."""
    stray = stray_modules(project, allowed, allowed_files)
    if stray:
        raise StrayImportError(stray_message(stray))


def stray_message(stray: Mapping[str, str]) -> str:
    """What is said about modules imported from the working tree, by name."""
    lines = "\n".join(f"  {name} ({where})" for name, where in stray.items())
    return ("these modules were imported from your working tree while recording at the "
            f"reference, so their current code would pass as the reference:\n{lines}\n"
            "Nothing was stored. If a module is part of the code under test, add its "
            "top-level package to config.yaml's `subject.packages` (it is then imported from "
            "the reference); if it only shapes the tests' inputs, add its files to `harness` "
            "(they are then part of the cache key).")


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
    safetensors' `safe_open` is wrapped to note its file, and files still mapped into memory
    are read from /proc/self/maps after each case; a native reader that keeps no mapping
    (`torch.from_file`, `numpy.fromfile`) is not seen, but a relative path it is given names
    the reference's file, the worktree being the working folder. Events are only noted here;
    the verdict comes at the end, so user code that catches an error cannot hide a read.
    """

    def __init__(self, project: Path, free: Sequence[Path], free_files: Sequence[Path],
                 subject: Sequence[Path], tests: Sequence[Path]) -> None:
        self.project = project.resolve()
        self.prefix = str(self.project) + os.sep
        self.free = tuple(p.resolve() for p in free) + library_folders() + (_THIS_PACKAGE,)
        self.free_files = frozenset(p.resolve() for p in free_files)
        self.subject = tuple(p.resolve() for p in subject)
        self.tests = tuple(p.resolve() for p in tests)
        self.seen: dict[str, str] = {}
        """Real path -> "run" or "read", for files inside the project."""
        self.imported: set[str] = set()
        """Real paths of project modules named by an import statement (pytest imports test
        modules with importlib, so a test module here was imported by other code)."""
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
            real = self._real[absolute] = self._resolved(absolute)
        if not real.startswith(self.prefix):
            return
        if how == "import":
            self.imported.add(real)
        if how != "read" or real not in self.seen:
            self.seen[real] = "read" if how == "read" else "run"

    def _resolved(self, absolute: str) -> str:
        """os.path.realpath, with each folder resolved once: a file costs one lstat."""
        folder, name = os.path.split(absolute)
        real_folder = self._real.get(folder)
        if real_folder is None:
            real_folder = self._real[folder] = os.path.realpath(folder)
        joined = os.path.join(real_folder, name)
        return os.path.realpath(joined) if os.path.islink(joined) else os.path.normpath(joined)

    def saw_mappings(self, maps: Path = Path("/proc/self/maps")) -> None:
        """Note the project's files mapped into this process (safetensors maps its files)."""
        try:
            lines = maps.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return  # no /proc (macOS): only the audit events count
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(self.prefix):
                self.saw(fields[5].removesuffix(" (deleted)"), "read")

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

    def _is_free(self, path: Path) -> bool:
        """Package metadata, inside a free folder (worktree, cache, .git, libraries), or the
        `__init__.py` of a package that holds the tests."""
        return (any(part.endswith((".egg-info", ".dist-info")) for part in path.parts)
                or any(path.is_relative_to(f) for f in self.free)
                or _is_package_above(path, self.tests + self.free))


_CODE = (".py", ".pyc", ".so", ".pyd")


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
    """Make `watch` the active one, installing the audit hook once per process."""
    if not _HOOKED:
        sys.addaudithook(_audit)
        _note_native_opens()
        _note_import_statements()
        _HOOKED.append(True)
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


def _note_native_opens() -> None:
    """safetensors opens its files in Rust, which raises no audit event: its `safe_open`
    notes the file first. `import safetensors` loads no torch; its framework modules take
    `safe_open` from it when they are imported, or are patched here if they were before."""
    try:
        import safetensors
    except ImportError:
        return
    original = safetensors.safe_open

    def safe_open(filename: Any, *args: Any, **kwargs: Any) -> Any:
        _audit("open", (filename, "r", os.O_RDONLY))
        return original(filename, *args, **kwargs)

    for name, module in list(sys.modules.items()):
        if (name == "safetensors" or name.startswith("safetensors.")) and \
                getattr(module, "safe_open", None) is original:
            setattr(module, "safe_open", safe_open)


def stop_watching() -> None:
    _WATCHES.clear()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: cheap for every other event, and never raises."""
    if not _WATCHES or (event != "open" and event != "exec"):
        return
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


def _writes_only(flags: int) -> bool:
    """Whether an open with `flags` cannot read what the file held: write-only, or a file
    emptied (O_TRUNC) or made new (O_EXCL)."""
    return flags & os.O_ACCMODE == os.O_WRONLY or bool(flags & (os.O_TRUNC | os.O_EXCL))


def require_own_files(stray: Mapping[str, str], refused: Mapping[str, str]) -> None:
    """Raise StrayImportError, in one message, naming every module (`stray`, by name) and
    every other file (`refused`, by path) the recording took from the working tree."""
    named = set(stray.values())
    refused = {path: how for path, how in sorted(refused.items()) if path not in named}
    messages = ([stray_message(stray)] if stray else []) + \
        ([read_message(refused)] if refused else [])
    if messages:
        raise StrayImportError("\n".join(messages))


def read_message(refused: Mapping[str, str]) -> str:
    """What is said about files run or read from the working tree, by path."""
    lines = "\n".join(f"  {name} ({how})" for name, how in refused.items())
    return (
        "these files of your working tree were run or read while recording at the "
        f"reference, so their current content would pass as the reference's:\n{lines}\n"
        "Nothing was stored. Import the subject by its package name (not from a file path: "
        "importlib.util.spec_from_file_location, SourceFileLoader, runpy.run_path, "
        "exec(open(...).read()), a folder of your repository put on sys.path); read its data "
        "files relative to the working folder (the reference's worktree while recording) or "
        "to its module's __file__; a file that only shapes the tests' inputs "
        "belongs in config.yaml's `harness` (it is then part of the cache key).")
