"""What to do when the tests cannot be collected because a module is missing."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def subject_not_importable(text: str, packages: tuple[str, ...], root: Path | None = None
                           ) -> str:
    """What to do when a collection error is a module missing from this environment: the
    subject, or another package the tests import; "" when `text` is another error, or the
    module is a file of the project (then pytest's own message says more)."""
    for name in _NO_MODULE.findall(text):
        top = name.split(".")[0]
        if top in packages:
            return (f"the subject package {top!r} cannot be imported in this environment (No "
                    f"module named {name!r}). Your tests import it from here, as they would "
                    "under plain pytest: install your project into this environment (`pip "
                    "install -e .`) or add its folder to pytest's `pythonpath` setting. "
                    "config.yaml's `subject.path` only says where it lives in the reference's "
                    "worktree.")
        if root is None or not _in_project(top, root):
            return (f"the tests import {top!r}, which this environment ({sys.executable}) "
                    f"cannot import (No module named {name!r}): install it there (`"
                    f"{sys.executable} -m pip install {top}`; its name on PyPI may differ), "
                    "then run again")
    return ""


def _in_project(module: str, root: Path, depth: int = 4) -> bool:
    """Whether a module or package of that name is a file or folder of the project (hidden
    folders, such as a .venv, and site-packages not searched)."""
    for folder, folders, files in os.walk(root):
        if module in folders or f"{module}.py" in files:
            return True
        too_deep = len(Path(folder).relative_to(root).parts) >= depth
        folders[:] = [] if too_deep else [
            f for f in folders if not f.startswith(".") and f not in _NOT_SEARCHED]
    return False


_NOT_SEARCHED = {"site-packages", "node_modules", "__pycache__", "build", "dist"}

