"""Import the subject packages from the reference worktree, and prove that it happened.

pytest puts the rootdir at the front of sys.path when a rootdir conftest.py exists, and an
editable install adds its own finder, so path order alone would import the candidate. A
finder at the front of sys.meta_path answers for the subject packages before anything else.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

from regression.errors import ImportRedirectError


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
            f"({', '.join(loaded)}); a pytest plugin, a .pth file or the project's tasks.py "
            "imports it at start-up. Nothing was stored. Make that code import the subject "
            "lazily (inside the function that uses it), or leave the plugin out of the "
            "regression run (-p no:NAME in addopts)."
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
