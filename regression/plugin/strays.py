"""Modules and files a recording took from the user's working tree, and what is said of them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping, Sequence

from regression.errors import StrayImportError


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
    folders = tuple(p.resolve() for p in allowed) + library_folders() + (THIS_PACKAGE,)
    files = {p.resolve() for p in allowed_files}
    stray = {}
    for name, module in sorted(sys.modules.items()):
        origin = getattr(module, "__file__", None) if module is not None else None
        if not isinstance(origin, str) or not Path(origin).is_absolute():
            continue  # built in, namespace, or a name only (torch.ops: "_ops.py")
        path = Path(origin).resolve()
        if not path.is_relative_to(project) or path in files or path.name == "conftest.py":
            continue
        if any(path.is_relative_to(f) for f in folders) or is_package_above(path, folders):
            continue
        stray[name] = path.relative_to(project).as_posix()
    return stray


THIS_PACKAGE = Path(__file__).resolve().parents[1]
"""The regression package (this file is in its plugin/ folder), which may live in the project."""


def is_package_above(path: Path, folders: Sequence[Path]) -> bool:
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
