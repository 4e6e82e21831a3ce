"""Which files define a case's inputs, and their digest."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from .fingerprint import files_digest


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

    def __init__(self, rootdir: Path, extra: Iterable[Path] = ()) -> None:
        self.rootdir = rootdir
        self.extra = list(extra)
        self._by_file: dict[Path, str] = {}

    def of(self, test_file: Path) -> str:
        if test_file not in self._by_file:
            files = harness_files(test_file, self.rootdir, self.extra)
            self._by_file[test_file] = files_digest(self.rootdir, files)
        return self._by_file[test_file]
