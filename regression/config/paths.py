"""Where config.yaml is, and which folder may hold the cache (config.yaml's or the env's)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from regression.errors import ConfigError

CONFIG_NAME = "config.yaml"
CACHE_DIR_ENV = "REGRESSION_CACHE_DIR"
NO_DEFAULT_CACHE_ENV = "REGRESSION_NO_DEFAULT_CACHE"
"""Set by this project's test suite: a cache folder not chosen by $REGRESSION_CACHE_DIR then
raises (as pre-commit's tests make its default store raise), so no test touches a real cache."""
DEFAULT_CACHE_DIR = ".regression-cache"


class DefaultCacheInTests(AssertionError):
    """A test reached the cache folder of config.yaml (or the default one). Not a
    RegressionError: nothing turns it into a message for users, so the test fails loudly."""


def default_cache_dir(folder: Path) -> Path:
    """config.yaml's cache folder, resolved; under the test suite's guard, an error."""
    if os.environ.get(NO_DEFAULT_CACHE_ENV):
        raise DefaultCacheInTests(
            f"the cache folder {folder} was about to be used, but ${NO_DEFAULT_CACHE_ENV} is "
            f"set (the test suite sets it): point ${CACHE_DIR_ENV} at a temporary folder")
    return folder.resolve()


def chosen_cache_dir(root: Path, chosen: str) -> tuple[Path, str]:
    """$REGRESSION_CACHE_DIR resolved, and why it may not hold the cache ("" if it may):
    empty (an unset variable in CI), a link that loops or leads nowhere, or as below."""
    given = root / chosen
    if not chosen.strip():
        return given, "is empty (an unset variable in CI?)"
    try:
        folder = given.resolve()
    except (OSError, RuntimeError):  # a loop of links
        return given, "is a link that leads to itself"
    if given.is_symlink() and not folder.exists():
        return folder, f"is a link to {folder}, which does not exist"
    return folder, cache_dir_problem(folder, root)


def cache_dir_problem(folder: Path, root: Path) -> str:
    """Why `folder` (resolved) may not hold the cache of the project at `root`; "" if it may.

    Cleaning the cache removes folders in it, and making it writes a .gitignore: pointed at
    the project, a folder above it, the home folder or a repository, that would hit the user's
    own files. One check for config.yaml's `cache_dir` and for $REGRESSION_CACHE_DIR.
    """
    root = root.resolve()
    if folder.exists() and not folder.is_dir():
        return "is a file, not a folder"
    if folder in (root, *root.parents):
        return "is the project folder or a folder above it, where the cache would clean up"
    home = _home()
    if home is not None and folder in (home, *home.parents):
        return "is the home folder or a folder above it, where the cache would clean up"
    if (folder / ".git").exists():
        return "holds a git repository, where the cache would clean up"
    return ""


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, KeyError, OSError):  # no $HOME and no password entry
        return None


def find_config(start: Path) -> Path:
    """config.yaml in `start` (pytest's rootdir, or the current folder), else at the top of
    the git repository that holds it; never in a folder above the repository."""
    start = start.resolve()
    top = git_top_level(start)
    for folder in dict.fromkeys((start, top or start)):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    where = f"in {start} or at the top of its git repository ({top})" if top and top != start \
        else f"in {start}"
    raise ConfigError(
        str(start / CONFIG_NAME),
        f"no config.yaml {where}; create one (see the README's Configuration section), "
        "or run from the folder that holds it",
    )


def git_top_level(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `.git` (a folder, or a file in a
    worktree); None outside a repository. No git process: this runs at every pytest start."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def submodule_holding(root: Path, folder: Path) -> Path | None:
    """The git submodule (or repository nested in the project's) that holds `folder`, a
    folder of the project at `root`, or None. No git process: a `.git` inside the project,
    or a path in the top's .gitmodules (a submodule not checked out has no `.git` yet)."""
    top = git_top_level(root)
    if top is None:
        return None
    try:
        parts = folder.relative_to(top).parts
    except ValueError:
        return None
    declared = _gitmodule_paths(top)
    for depth in range(1, len(parts) + 1):
        inner = top.joinpath(*parts[:depth])
        if "/".join(parts[:depth]) in declared or (inner / ".git").exists():
            return inner
    return None


def _gitmodule_paths(top: Path) -> set[str]:
    """The paths .gitmodules at `top` declares as submodules (none without one)."""
    try:
        text = (top / ".gitmodules").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    found = (re.fullmatch(r"\s*path\s*=\s*(.*?)\s*", line) for line in text.splitlines())
    return {m.group(1).strip('"').strip("/") for m in found if m}
