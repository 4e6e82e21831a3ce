"""Pure: the packages a project declares it needs, read from its own files (pyproject.toml,
setup.cfg, setup.py, requirements*.txt) or from an installed distribution's metadata."""

from __future__ import annotations

import configparser
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads pyproject.toml only when tomli is there
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

_REQUIREMENT = re.compile(
    r"\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?"
    r"\s*(?P<spec>(?:[<>=!~][^;@#]*)?)\s*(?P<rest>[;@#].*)?$")
_SPECIFIER = re.compile(r"(?:(?:[<>=!~]=?|===)[A-Za-z0-9.*+!_-]+(?:,|$))*")
_SETUP_PY_TORCH = re.compile(r"""["'](\s*(?:torch|torchvision|torchaudio)\b[^"']*)["']""")
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")


@dataclass(frozen=True)
class Requirement:
    """One declared dependency: its normalised name, version specifier and where it was read."""

    name: str
    spec: str
    source: str
    optional: bool = False
    """Declared under an extra (optional-dependencies, extras_require, `extra ==`)."""

    def pinned(self) -> str:
        """The requirement as pip reads it: name and specifier, nothing else."""
        return f"{self.name}{self.spec}"


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): my_Pkg.x -> my-pkg-x."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str, source: str, optional: bool = False) -> Requirement | None:
    """A PEP 508 line as name and specifier; None for what names no package (a comment, an
    option such as -r or -e, a URL, an empty line)."""
    line = text.split(" #", 1)[0].strip()
    if not line or line.startswith(("#", "-")) or "://" in line.split(";")[0].split("@")[0]:
        return None
    match = _REQUIREMENT.match(line)
    if match is None:
        return None
    extra = "extra" in (match.group("rest") or "") and (match.group("rest") or "").startswith(";")
    spec = re.sub(r"\s+", "", match.group("spec") or "")
    spec = spec if _SPECIFIER.fullmatch(spec) else ""  # only what pip reads as a version
    return Requirement(normalized(match.group("name")), spec, source, optional or extra)


def declared(root: Path) -> list[Requirement]:
    """Every dependency the project at `root` declares, in the order its files list them:
    pyproject.toml, setup.cfg, the torch packages setup.py names, requirements*.txt."""
    return [requirement for reader in (_pyproject, _setup_cfg, _setup_py, file_requirements)
            for requirement in reader(root)]


def _parsed(lines: Iterable[object], source: str, optional: bool) -> list[Requirement]:
    parsed = (parse(line, source, optional) for line in lines if isinstance(line, str))
    return [requirement for requirement in parsed if requirement is not None]


def _pyproject(root: Path) -> list[Requirement]:
    project = pyproject_table(root).get("project", {})
    if not isinstance(project, dict):
        return []
    found = _parsed(_list(project.get("dependencies")), "pyproject.toml", False)
    extras = project.get("optional-dependencies")
    for group in (extras.values() if isinstance(extras, dict) else ()):
        found += _parsed(_list(group), "pyproject.toml", True)
    return found


def pyproject_table(root: Path) -> dict[str, Any]:
    """pyproject.toml as data; {} when it is missing or not TOML (pip reports that)."""
    return toml_table(root / "pyproject.toml")


def toml_table(path: Path) -> dict[str, Any]:
    """A TOML file as data; {} when it is missing or not TOML."""
    if tomllib is None or not path.is_file():
        return {}
    try:
        return dict(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _setup_cfg(root: Path) -> list[Requirement]:
    parser = _setup_cfg_parser(root)
    if parser is None:
        return []
    found = _parsed(parser.get("options", "install_requires", fallback="").splitlines(),
                    "setup.cfg", False)
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            found += _parsed(value.splitlines(), "setup.cfg", True)
    return found


def _setup_cfg_parser(root: Path) -> configparser.ConfigParser | None:
    """setup.cfg read as setuptools reads it; None when it is missing or unreadable."""
    path = root / "setup.cfg"
    if not path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return None
    return parser


def _setup_py(root: Path) -> list[Requirement]:
    """The torch packages a setup.py names in quotes (it is code: run, it could say more)."""
    path = root / "setup.py"
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return []
    return _parsed(_SETUP_PY_TORCH.findall(text), "setup.py", False)


def requirement_files(root: Path) -> list[Path]:
    """requirements*.txt at the top, and *.txt in a requirements/ folder, sorted."""
    files = sorted(root.glob("requirements*.txt")) + sorted(root.glob("requirements/*.txt"))
    return [path for path in files if path.is_file()]


NOT_RUNTIME = frozenset({"dev", "develop", "development", "test", "tests", "testing", "doc",
                         "docs", "lint", "ci", "build", "typing", "bench", "benchmark",
                         "benchmarks", "example", "examples"})
"""Words in a requirement file's name that say it is not what the library needs to run:
requirements-dev.txt, requirements_test.txt, requirements/docs.txt."""


def is_runtime(path: Path) -> bool:
    """Whether a requirement file lists what the library needs to run: none of the words
    of its name (split at '-', '_' and '.', in requirements/ the whole name) is one of
    NOT_RUNTIME's."""
    words = {w.lower() for w in re.split(r"[-_.]+", path.stem)}
    return not words & NOT_RUNTIME


def file_requirements(root: Path, runtime_only: bool = False) -> list[Requirement]:
    """What the requirement files at `root` declare (`runtime_only`: the runtime ones, see
    is_runtime), each named as its file (requirements.txt, requirements/base.txt)."""
    found = []
    for path in requirement_files(root):
        if runtime_only and not is_runtime(path):
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        found += _parsed(lines, path.relative_to(root).as_posix(), False)
    return found


def project_name(root: Path) -> str:
    """The normalised name of the project at `root`, from pyproject.toml or setup.cfg; ""."""
    project = pyproject_table(root).get("project", {})
    name = project.get("name") if isinstance(project, dict) else None
    if not isinstance(name, str):
        parser = _setup_cfg_parser(root)
        name = parser.get("metadata", "name", fallback="") if parser else ""
    return normalized(name) if name else ""


def distribution_requirements(distribution: str) -> list[Requirement] | None:
    """What an installed distribution requires (Requires-Dist), extras marked optional;
    None when it is not installed."""
    try:
        found = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    source = f"{found.metadata['Name']} {found.version} (installed)"
    return _parsed(found.requires or [], source, False)


def distributions_of(packages: Iterable[str], project: str = "") -> Iterator[str]:
    """The installed distributions that provide these top-level import packages: the one
    named as a package (minilib, vit_pytorch), or `project` (the repository's own, e.g.
    open_clip_torch for open_clip) when it provides one of them. Each once; no scan of every
    installed distribution (that costs a tenth of a second per run)."""
    wanted = set(packages)
    seen: set[str] = set()
    for name in dict.fromkeys([*wanted, project] if project else wanted):
        try:
            found = metadata.distribution(name)
        except (metadata.PackageNotFoundError, ValueError):
            continue
        key = normalized(found.metadata["Name"] or name)
        if key not in seen and _provides(found, wanted):
            seen.add(key)
            yield found.metadata["Name"] or name


def editable_source(found: metadata.Distribution) -> Path | None:
    """The source folder of an editable install (`pip install -e`), as its direct_url.json
    names it; None for any other install."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        data = json.loads(found.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("dir_info"), dict) \
            or not data["dir_info"].get("editable") or not isinstance(data.get("url"), str):
        return None
    url = urlparse(data["url"])
    folder = Path(unquote(url.path)) if url.scheme == "file" else None
    return folder if folder is not None and folder.is_dir() else None


def editable_code(found: metadata.Distribution, source: Path) -> list[Path]:
    """The packages and modules of an editable install in its `source` folder, as its
    top_level.txt names them (flat or src/ layout): what it imports, not its data folders,
    documents or tests beside them; [] when it names none that is there."""
    found_paths = []
    for name in (found.read_text("top_level.txt") or "").split():
        for folder in (source, source / "src"):
            if (folder / name).is_dir():
                found_paths.append(folder / name)
                break
            if (folder / f"{name}.py").is_file():
                found_paths.append(folder / f"{name}.py")
                break
    return found_paths


def source_files(folder: Path) -> Iterator[Path]:
    """The files under an editable install's `folder`, code and data (a model config in
    JSON is as much its code as a module): hidden folders, bytecode caches, packaging
    metadata, node_modules and virtual environments left out."""
    import os

    for where, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__"))
                         and not d.endswith((".egg-info", ".dist-info"))
                         and d != "node_modules"
                         and not (Path(where) / d / "pyvenv.cfg").exists())
        yield from (Path(where) / f for f in sorted(files)
                    if not f.endswith((".pyc", ".pyo")) and not f.startswith("."))


def _provides(found: metadata.Distribution, packages: set[str]) -> bool:
    """Whether an installed distribution holds one of these import packages: its
    top_level.txt, else its RECORD, else its name, says so."""
    top_level = found.read_text("top_level.txt")
    if top_level is not None:
        return bool(packages & set(top_level.split()))
    files = found.files or []
    if any(f.parts and f.parts[0] in packages for f in files):
        return True
    return normalized(found.metadata["Name"] or "") in {normalized(p) for p in packages}
