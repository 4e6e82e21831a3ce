"""Which files define a case's inputs, and their digest.

A case's harness is its test file, the conftest.py files above it and config.yaml's
`harness` files, hashed before recording; plus its helpers: the other test code the
recording found the tests using (modules they import, files they read) and the environment
variables it found the subject reading, stored with the case with a digest each, so that
the check side validates them before anything runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from regression.environment.fingerprint import KERNEL_VARIABLES, digest, file_digest, \
    files_digest
from regression.environment.start import start_environment

VARIABLE = "$"
"""A helper named `$NAME` is the environment variable NAME, by the digest of its value: a
file's name, relative to the project, never starts with it (see helper_digests)."""
_OURS = ("REGRESSION_", "PYTEST_", "GIT_")
_SET_BY_US = frozenset({*KERNEL_VARIABLES, "PYTHONDONTWRITEBYTECODE",
                        "TORCHINDUCTOR_DETERMINISTIC", "PWD", "OLDPWD", "COLUMNS", "LINES"})
"""Variables a helper never names: the tool's, pytest's and git's (they differ between the
processes of one run), those in the key already, the working folder's and the terminal's
size (xdist's workers set it)."""


def harness_files(test_file: Path, rootdir: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """The test file, every conftest.py from its folder up to rootdir, and `extra`."""
    test_file = test_file.resolve()
    rootdir = rootdir.resolve()
    files = [test_file, *extra]
    folder = test_file.parent
    while True:
        conftest = folder / "conftest.py"
        if conftest.is_file():
            files.append(conftest)
        if folder == rootdir or folder == folder.parent or not folder.is_relative_to(rootdir):
            break
        folder = folder.parent
    return files


def extra_harness_files(root: Path, patterns: Iterable[str]) -> list[Path]:
    """The files config.yaml's `harness` globs name."""
    return sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})


class HarnessDigests:
    """Digests of the harness per test file, computed once per file."""

    def __init__(self, rootdir: Path, extra: Iterable[Path] = (), settings: str = "") -> None:
        self.rootdir = rootdir
        self.extra = list(extra)
        self.settings = settings
        """pytest's settings as text (plugin/common.pytest_settings): a value a conftest
        reads with `getini` shapes outputs as the test code does."""
        self._by_file: dict[Path, str] = {}

    def of(self, test_file: Path) -> str:
        if test_file not in self._by_file:
            files = files_digest(self.rootdir, harness_files(test_file, self.rootdir,
                                                             self.extra))
            self._by_file[test_file] = digest(f"{files}\0{self.settings}".encode()) \
                if self.settings else files
        return self._by_file[test_file]


def helper_digests(root: Path, helpers: Iterable[Path], variables: Iterable[str] = ()
                   ) -> dict[str, str]:
    """Each helper file by its name relative to `root` (`./$x` for a file named `$x`), with
    the digest of its bytes; each variable read (of those a helper may name) as `$NAME`,
    with the digest of its value."""
    found = {}
    for path in helpers:
        name = path.relative_to(root.resolve()).as_posix()
        found[f"./{name}" if name.startswith(VARIABLE) else name] = _digest_or_missing(path)
    for name in variables:
        if keyed_variable(name):
            found[f"{VARIABLE}{name}"] = variable_digest(name)
    return found


def keyed_variable(name: str) -> bool:
    """Whether a helper may name the environment variable `name` (see _SET_BY_US)."""
    return not name.startswith(_OURS) and name not in _SET_BY_US


def variable_digest(name: str) -> str:
    """The digest of an environment variable's value as this process's run started;
    "<unset>"."""
    value = start_environment().get(name)
    return "<unset>" if value is None else digest(os.fsencode(value))


def changed_helpers(root: Path, helpers: Mapping[str, str],
                    known: dict[Path, str] | None = None) -> list[str]:
    """The helpers (name -> digest, as stored) whose bytes now differ, or that are gone, and
    the variables whose value differs now. `known` keeps each file's digest for the rest of
    one run: cases share their helpers, so a suite of a thousand cases reads each helper
    once, not once per case."""
    known = {} if known is None else known
    changed = []
    for name, stored in sorted(helpers.items()):
        if name.startswith(VARIABLE):
            if variable_digest(name[len(VARIABLE):]) != stored:
                changed.append(f"environment variable {name[len(VARIABLE):]}")
            continue
        path = root / name
        if path not in known:
            known[path] = _digest_or_missing(path)
        if known[path] != stored:
            changed.append(name)
    return changed


def _digest_or_missing(path: Path) -> str:
    try:
        return file_digest(path)
    except OSError:
        return "<missing>"


def python_files_under(root: Path, folders: Iterable[str]) -> list[Path]:
    """Every Python file under the test folders: the modules the tests may import, for the
    CI cache key (which is made before any recording says which ones they use)."""
    found = []
    for folder in folders:
        for where, dirs, files in os.walk(root / folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__"))
                             and not (Path(where) / d / "pyvenv.cfg").exists())
            found += [Path(where) / f for f in sorted(files) if f.endswith(".py")]
    return found
