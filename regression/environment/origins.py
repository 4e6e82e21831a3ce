"""Where this process's modules came from: the Python installation, this package, or the
user's repository (of which a recording may load only its subject, test code and harness,
and a fork server nothing)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence


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
    inside = os.path.join(str(project), "")
    folders = tuple(p.resolve() for p in allowed) + library_folders() + (THIS_PACKAGE,)
    under = tuple(os.path.join(str(f), "") for f in folders)
    files = {str(p.resolve()) for p in allowed_files}
    known: dict[str, str] = {}
    stray = {}
    for name, module in sorted(sys.modules.items()):
        origin = getattr(module, "__file__", None) if module is not None else None
        if not isinstance(origin, str) or not os.path.isabs(origin):
            continue  # built in, namespace, or a name only (torch.ops: "_ops.py")
        real = resolved(origin, known)
        if not real.startswith(inside) or real in files or real.startswith(under) or \
                os.path.basename(real) == "conftest.py":
            continue
        path = Path(real)
        if not is_package_above(path, folders):
            stray[name] = path.relative_to(project).as_posix()
    return stray


def resolved(absolute: str, known: dict[str, str]) -> str:
    """os.path.realpath of an absolute path, each folder resolved once (`known` keeps them):
    a file then costs one lstat, not one for each of its folders."""
    folder, name = os.path.split(absolute)
    real_folder = known.get(folder)
    if real_folder is None:
        real_folder = known[folder] = os.path.realpath(folder)
    joined = os.path.join(real_folder, name)
    return os.path.realpath(joined) if os.path.islink(joined) else os.path.normpath(joined)


THIS_PACKAGE = Path(__file__).resolve().parents[1]
"""The regression package (this file is in its environment/ folder), which may live in the
project."""


def is_package_above(path: Path, folders: Sequence[Path]) -> bool:
    """Whether `path` is the `__init__.py` of a folder that holds one of `folders`."""
    return path.name == "__init__.py" and any(f.is_relative_to(path.parent) for f in folders)
