"""config.yaml read into typed Settings: each setting's reading, checks and messages, and the
values' own checks (package names, sizes, CPUs, paths)."""

from __future__ import annotations

import difflib
import keyword
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from regression.config.paths import (CACHE_DIR_ENV, DEFAULT_CACHE_DIR, cache_dir_problem,
                                    chosen_cache_dir, default_cache_dir, submodule_holding)
from regression.environment.dependencies import normalized
from regression.errors import ConfigError
from regression.config.yamlfile import Lined, YamlProblem, parse


DISTRIBUTION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
"""A distribution's name as pip and importlib.metadata take it (PEP 508)."""

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?i?b)?", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(value: object) -> int | None:
    """Bytes from an integer or a string like "16 MB"; None when it is neither (or < 0)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    found = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    unit = (found.group(2) or "b").lower() if found else ""
    if found is None or unit not in _UNITS:
        return None
    return int(float(found.group(1)) * _UNITS[unit])


def path_problem(value: str) -> str:
    """Why `value` cannot name a file or folder on any system, or "": the one check of every
    path-valued setting (a NUL byte, which YAML's "\\0" escape writes, or a blank name)."""
    if "\0" in value:
        return (f"{shown(value)} holds a NUL byte, which no file or folder name can hold "
                "(YAML's \"\\0\" escape writes one). Fix: remove it")
    if not value.strip():
        return f"{value!r} is blank, which names no file or folder. Fix: write a path"
    return ""


def closest(name: str, candidates: list[str]) -> str:
    """The candidate `name` is most likely a misspelling of, or ""."""
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return matches[0] if matches else ""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as a container or taskset sets it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def shown(value: Any) -> str:
    """`value` for a message, cut short: a bad value can be large."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def quoting_hint(value: Any, kind: type) -> str:
    """What to change when YAML's quoting made a value the wrong type, or ""."""
    if isinstance(value, str) and kind in (int, bool) and _unquoted_is(value, kind):
        return f"; write it without quotes: {value}"
    if kind is str and isinstance(value, bool):
        return "; YAML reads yes, no, on, off, true and false as booleans: quote it"
    if kind is str and isinstance(value, (int, float)):
        return "; YAML reads it as a number: quote it"
    return ""


def _unquoted_is(text: str, kind: type) -> bool:
    """Whether YAML reads `text`, written without quotes, as a value of `kind`."""
    if len(text) > 20 or not text.strip():
        return False
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


TOOL_IMPORTS = {
    "regression": "it is torch-regression itself",
    **dict.fromkeys(("torch", "torchgen", "numpy", "typing_extensions"),
                    "torch-regression imports it with torch"),
    **dict.fromkeys(("pytest", "_pytest", "pluggy", "iniconfig", "py", "pygments", "xdist",
                     "execnet"), "torch-regression runs in pytest, which imports it"),
    **dict.fromkeys(("invoke", "xxhash", "yaml", "_yaml", "safetensors", "filelock"),
                    "torch-regression itself imports it"),
}
"""Top-level packages imported before the tests run: the redirect cannot take them over."""


def name_problem(item: object) -> str:
    """Why `item` is not the name of a top-level package, or ""."""
    if not isinstance(item, str):
        return (f"{shown(item)} is a {type(item).__name__}, not a package name. Fix: write "
                "the name of a package, quoted if YAML would read it otherwise")
    if not item.strip():
        return f"{item!r} is an empty name. Fix: remove it, or write the package's name"
    if "." in item:
        return (f"{item!r} is not a top-level package name (the import redirect works on "
                "whole top-level packages: write `pkg`, not `pkg.sub`)")
    if not item.isidentifier():
        return (f"{item!r} is not a package name Python can import: letters, digits and _, "
                "not starting with a digit (a distribution like 'my-model' is imported as "
                "'my_model')")
    if keyword.iskeyword(item):
        return f"{item!r} is a Python keyword: no package can have that name"
    return ""


def subject_problem(name: str) -> str:
    """Why `name` cannot be a subject package (imported before the redirect), or ""."""
    why = TOOL_IMPORTS.get(name)
    if why is None and name in sys.stdlib_module_names:
        why = "it is a module of Python's standard library"
    if why is None:
        return ""
    return (f"{name!r} cannot be a subject package: {why}, so it is loaded before the import "
            "redirect exists and a recording would use the installed copy, not the "
            "reference's. Fix: list your own packages, the ones this repository holds (e.g. "
            "packages: [mymodel])")


T = TypeVar("T")


SETTING_NAMES = frozenset({
    "reference", "references", "subject", "packages", "path", "tests", "harness",
    "determinism", "seed", "threads", "deterministic_algorithms", "repeat", "device",
    "fingerprint", "exclude_packages",
    "cache_dir", "shards", "durations", "pins", "storage", "digest_above",
    "record_beside_check"})
"""Every setting's name, in any section: a set one is never taken for a misspelling."""


class Reader:
    """Typed access to one mapping of config.yaml; remembers which keys were read."""

    def __init__(self, path: str, data: dict[str, Any], prefix: str,
                 line: int | None = None) -> None:
        self.path = path
        self.data = data
        self.prefix = prefix
        self.line = line
        """The line of this section's own key: where a missing setting belongs."""
        self.known: set[str] = set()

    def _line(self, key: Any) -> int | None:
        return self.data.line_of(key) if isinstance(self.data, Lined) else None

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.path, message, key=self.prefix + key,
                           line=self._line(key) or self.line)

    def _get(self, key: str, required: bool) -> Any:
        self.known.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                typo = closest(key, [k for k in self.data
                                      if isinstance(k, str) and k not in SETTING_NAMES])
                hint = f" ({typo!r} is set: did you mean {key!r}?)" if typo else ""
                raise self.error(key, f"missing; this setting is required{hint}")
            return None
        return self.data[key]

    def _typed(self, key: str, kind: type[T], label: str, required: bool = False) -> T | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(key, f"must be {label}, got {type(value).__name__} "
                                   f"{shown(value)}{quoting_hint(value, kind)}")
        return value

    def section(self, key: str, required: bool = False) -> Reader:
        value = self._typed(key, dict, "a mapping", required)
        return Reader(self.path, value or {}, f"{self.prefix}{key}.", self._line(key))

    def revision(self, key: str, required: bool = False) -> str:
        value = self._get(key, required)
        if value is None:
            return ""
        if not isinstance(value, str) or not value.strip():
            raise self.error(
                key,
                f"must be a revision as a string, got {value!r}; quote it, "
                "e.g. reference: \"1234e5f\" (YAML reads some SHAs as numbers)",
            )
        return value.strip()

    def mapping_of_revisions(self, key: str) -> dict[str, str]:
        value = self._typed(key, dict, "a mapping of name: revision") or {}
        for name in value:
            if not isinstance(name, str):
                raise self.error(key, f"the name {name!r} must be a string; quote it")
        inner = Reader(self.path, value, f"{self.prefix}{key}.", self._line(key))
        return {str(name): inner.revision(str(name), required=True) for name in value}

    def packages(self, key: str) -> tuple[str, ...]:
        """The subject's packages: required, each a name a subject package may have."""
        value = self._get(key, required=True)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value:
            raise self.error(key, "must be a non-empty list of names")
        for item in value:
            problem = name_problem(item) or subject_problem(item)
            if problem:
                raise self.error(key, problem)
            if value.count(item) > 1:
                raise self.error(key, f"{item!r} is listed twice. Fix: list it once")
        return tuple(value)

    def distributions(self, key: str) -> tuple[str, ...]:
        """Names of installed distributions, as pip names them (einops, huggingface-hub)."""
        value = self._get(key, False)
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of names of installed packages, got "
                                   f"{shown(dict(value) if isinstance(value, dict) else value)}"
                                   f", e.g. {self.prefix}{key}: [numpy, einops]")
        for item in value:
            if not isinstance(item, str) or not DISTRIBUTION.fullmatch(item):
                raise self.error(key, f"{shown(item)} is not a package name as pip writes "
                                       "it: letters, digits, '.', '_' and '-', e.g. einops or "
                                       "huggingface-hub")
            if value.count(item) > 1:
                raise self.error(key, f"{item!r} is listed twice. Fix: list it once")
        return tuple(value)

    def relative_path(self, key: str, default: str) -> str:
        value = self._typed(key, str, "a path relative to the config file's folder")
        return default if value is None else self.relative_paths(key, (value,))[0]

    def relative_paths(self, key: str, default: tuple[str, ...],
                       non_empty: bool = False) -> tuple[str, ...]:
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "must be a list of paths relative to the config file")
        if not value and non_empty:
            raise self.error(key, "must name at least one folder or file")
        for item in value:
            self.path_value(key, item)
            if Path(item).is_absolute() or ".." in Path(item).parts:
                raise self.error(key, f"{item!r} must be relative and stay inside the project")
        return tuple(value)

    def pins(self, key: str) -> dict[str, int]:
        value = self._typed(key, dict, "a mapping of test id pattern: shard number") or {}
        for pattern, shard in value.items():
            if not isinstance(pattern, str) or isinstance(shard, bool) \
                    or not isinstance(shard, int) or shard < 1:
                raise self.error(key, f"{pattern!r}: {shard!r} must map a test id pattern "
                                       "(fnmatch, e.g. 'tests/test_zoo.py::*vit*') to a shard "
                                       "number from 1")
        return dict(value)

    def path_value(self, key: str, value: str) -> None:
        """Raise unless `value` can name a file or folder: every path setting's one check."""
        problem = path_problem(value)
        if problem:
            raise self.error(key, problem)

    def cache_dir(self, key: str, root: Path) -> str:
        value = self._typed(key, str, "a folder path")
        if value is None:
            return DEFAULT_CACHE_DIR
        self.path_value(key, value)
        problem = cache_dir_problem((root / value).resolve(), root)
        if problem:
            raise self.error(key, f"{value!r} {problem}; name a folder of its own, "
                                   f"e.g. {DEFAULT_CACHE_DIR}")
        return value

    def threads(self, key: str) -> int:
        """The thread count: from 1 to the CPUs this process may use, for the reason given."""
        value = self.integer(key, 1, minimum=1)
        cpus = usable_cpus()
        if value > cpus:
            raise self.error(key, f"must be from 1 to {cpus}, the CPUs this process may use "
                                   f"here, got {value}: threads beyond the CPUs cannot run at "
                                   "once, they only slow torch down, and thousands of them "
                                   f"crash it. Fix: set {self.prefix}{key} to {cpus} or fewer "
                                   "(1, the default, works on every machine)")
        return value

    def integer(self, key: str, default: int, minimum: int, maximum: int = 2**31 - 1) -> int:
        value = self._typed(key, int, "an integer")
        if value is None:
            return default
        if not minimum <= value <= maximum:
            raise self.error(key, f"must be from {minimum} to {maximum}, got {value}")
        return value

    def size(self, key: str) -> int | None:
        """A number of bytes: an integer, or a number with a unit (16 MB, 1.5 GiB)."""
        value = self._get(key, False)
        if value is None:
            return None
        bytes_ = parse_size(value)
        if bytes_ is None:
            raise self.error(key, f"must be a size, such as 16 MB, 512 KiB or 1 GB (or a "
                                   f"number of bytes), got {shown(value)}")
        return bytes_

    def boolean(self, key: str, default: bool) -> bool:
        """true or false; left out, `default`. An empty value (null, `key:` with nothing after
        it) is refused: it reads as false to a person and would silently be the default."""
        if key in self.data and self.data[key] is None:
            raise self.error(key, f"must be true or false, got null (an empty value). Fix: "
                                   f"write {self.prefix}{key}: true or {self.prefix}{key}: "
                                   f"false, or remove the line for the default "
                                   f"({str(default).lower()})")
        value = self._typed(key, bool, "true or false")
        return default if value is None else value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self._typed(key, str, "a string")
        if value is None:
            return default
        if value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def reject_unknown(self) -> None:
        unknown = sorted((k for k in self.data if k not in self.known), key=str)
        if unknown:
            meant = closest(str(unknown[0]), sorted(self.known))
            hint = f"did you mean {meant!r}? " if meant else ""
            raise ConfigError(self.path, f"unknown setting; {hint}known here: "
                                         f"{', '.join(sorted(self.known))}",
                              key=self.prefix + str(unknown[0]),
                              line=self._line(unknown[0]) or self.line)


DEVICE_ENV = "REGRESSION_DEVICE"
"""Overrides config.yaml's `device` (the tasks' --device sets it for their processes)."""
DEFAULT_DURATIONS = ".regression-durations.json"
DEVICES = ("cpu", "cuda")
MAX_REPEAT = 10
MAX_CONFIG_BYTES = 1 << 20
"""A config is a few hundred bytes; a bigger file is not one (and is not read whole)."""


@dataclass(frozen=True)
class Determinism:
    """Settings applied identically before every case in record and check mode."""

    seed: int = 0
    threads: int = 1
    deterministic_algorithms: bool = True
    repeat: int = 1
    """Recordings of each case, each in its own process; from 2, a case whose recordings
    differ is stored as nondeterministic. Not part of the cache key."""


@dataclass(frozen=True)
class Settings:
    """The validated content of config.yaml, paths made absolute."""

    path: Path
    reference: str
    subject_packages: tuple[str, ...]
    subject_path: str = "."
    tests: tuple[str, ...] = ("tests",)
    references: Mapping[str, str] = field(default_factory=dict)
    harness: tuple[str, ...] = ()
    determinism: Determinism = Determinism()
    device: str = "cpu"
    fingerprint_packages: tuple[str, ...] = ()
    """Distributions whose versions the key holds beside the subject's own dependencies."""
    fingerprint_exclude: tuple[str, ...] = ()
    """Distributions left out of the key, though the subject declares them."""
    cache_dir_setting: str = DEFAULT_CACHE_DIR
    durations_setting: str = DEFAULT_DURATIONS
    pins: Mapping[str, int] = field(default_factory=dict)
    digest_above: int | None = None
    """storage.digest_above: tensors of more bytes are stored as digests (None: never)."""
    record_beside_check: bool = True
    """A check run records what it lacks beside its cases, each checked as soon as its
    reference is stored; off: it records first (default off with device: cuda, where the
    two runs would share the GPU's memory)."""

    @property
    def root(self) -> Path:
        """The project root: the folder that holds config.yaml."""
        return self.path.parent

    @property
    def cache_dir(self) -> Path:
        """Where references are cached; REGRESSION_CACHE_DIR overrides config.yaml.

        A link to the cache folder (to put it on a bigger disk) is resolved here, once.
        """
        chosen = os.environ.get(CACHE_DIR_ENV)
        if chosen is None:
            return default_cache_dir(self.root / self.cache_dir_setting)
        folder, problem = chosen_cache_dir(self.root, chosen)
        if problem:
            raise ConfigError(f"${CACHE_DIR_ENV}", f"{chosen!r} {problem}; unset it or name a "
                                                   f"folder of its own, e.g. {DEFAULT_CACHE_DIR}")
        return folder

    @property
    def durations_file(self) -> Path:
        """Where `invoke test --store-durations` keeps the seconds each case took."""
        return self.root / self.durations_setting

    def revision_for(self, reference: str | None) -> str:
        """The revision to use: a name from `references`, a revision, or the default."""
        if reference is None:
            return self.reference
        return self.references.get(reference, reference)


def load_settings(path: Path) -> Settings:
    """Read and validate config.yaml at `path`."""
    where = str(path)
    try:
        raw = parse(_read_config(path))
    except FileNotFoundError:
        raise ConfigError(where, "file not found; create it (see the README)") from None
    except YamlProblem as exc:
        raise ConfigError(where, str(exc), key=exc.key, line=exc.line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(where, _yaml_error_message(exc), line=_yaml_error_line(exc)) from None
    except UnicodeDecodeError:
        raise ConfigError(where, "not UTF-8 text; save it as UTF-8") from None
    except IsADirectoryError:
        raise ConfigError(where, "is a folder, not a file; config.yaml must be a file") from None
    except OSError as exc:
        raise ConfigError(where, f"cannot be read: {exc.strerror or exc}") from None
    if raw is None:
        raise ConfigError(where, "is empty; a config needs at least `reference:` and `subject:` "
                                 "with its `packages:`, see the README's Configuration section")
    if not isinstance(raw, dict):
        raise ConfigError(where, f"must be a mapping of settings at the top level (`reference: "
                                 f"v1` and so on), got {type(raw).__name__}")
    return _device_chosen(_settings_from(path.resolve(), raw))


def _device_chosen(settings: Settings) -> Settings:
    """`settings` with the device $REGRESSION_DEVICE names, when it names one."""
    chosen = os.environ.get(DEVICE_ENV)
    if chosen is None:
        return settings
    if chosen not in DEVICES:  # "" too: an unset variable in CI, not "config.yaml's"
        raise ConfigError(f"${DEVICE_ENV} (or --device)", f"{chosen!r} is not a device: give "
                          f"one of {', '.join(DEVICES)}")
    return replace(settings, device=chosen)


def _read_config(path: Path) -> str:
    """The text of config.yaml; a file far bigger than any config is refused unread."""
    with open(path, "rb") as stream:
        data = stream.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise YamlProblem(f"is over {MAX_CONFIG_BYTES} bytes, far more than a config holds; "
                          "is this the right file?")
    return data.decode("utf-8")


def _yaml_error_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return int(mark.line) + 1 if mark is not None else None


def _yaml_error_message(exc: yaml.YAMLError) -> str:
    """PyYAML's reason in one line, and the fix for the usual one (a tab)."""
    problem = str(getattr(exc, "problem", None) or exc).strip()
    if "\\t" in problem or "\t" in problem:
        return ("not valid YAML: a tab character; YAML does not allow tabs for indentation. "
                "Fix: indent with spaces")
    context = getattr(exc, "context", None)
    return f"not valid YAML: {f'{context}: ' if context else ''}{problem}"


def _settings_from(path: Path, raw: dict[str, Any]) -> Settings:
    reader = Reader(str(path), raw, "")
    subject = reader.section("subject", required=True)
    determinism = reader.section("determinism")
    fingerprint = reader.section("fingerprint")
    shards = reader.section("shards")
    storage = reader.section("storage")
    settings = Settings(
        path=path,
        reference=reader.revision("reference", required=True),
        references=reader.mapping_of_revisions("references"),
        subject_packages=subject.packages("packages"),
        subject_path=subject.relative_path("path", "."),
        tests=reader.relative_paths("tests", ("tests",), non_empty=True),
        harness=reader.relative_paths("harness", ()),
        determinism=Determinism(
            seed=determinism.integer("seed", 0, minimum=0, maximum=2**32 - 1),
            threads=determinism.threads("threads"),
            deterministic_algorithms=determinism.boolean("deterministic_algorithms", True),
            repeat=determinism.integer("repeat", 1, minimum=1, maximum=MAX_REPEAT),
        ),
        device=(device := reader.choice("device", DEVICES, "cpu")),
        record_beside_check=reader.boolean("record_beside_check", device == "cpu"),
        fingerprint_packages=fingerprint.distributions("packages"),
        fingerprint_exclude=fingerprint.distributions("exclude_packages"),
        cache_dir_setting=reader.cache_dir("cache_dir", path.parent),
        durations_setting=shards.relative_path("durations", DEFAULT_DURATIONS),
        pins=shards.pins("pins"),
        digest_above=storage.size("digest_above"),
    )
    for section in (reader, subject, determinism, fingerprint, shards, storage):
        section.reject_unknown()
    _require_apart(fingerprint, settings.fingerprint_packages, settings.fingerprint_exclude)
    _require_no_submodule(subject, settings)
    return settings


def _require_no_submodule(subject: Reader, settings: Settings) -> None:
    """The subject is this repository's own: a worktree of the reference holds no submodule's
    files (git does not check them out there), so a subject in one can never be recorded."""
    base = settings.root / settings.subject_path
    for key, folder in (("path", base), *(("packages", base / p) for p in
                                          settings.subject_packages)):
        submodule = submodule_holding(settings.root, folder)
        if submodule is not None:
            raise subject.error(key, (
                f"{os.path.relpath(folder, settings.root)} is in the git submodule "
                f"{os.path.relpath(submodule, settings.root)}, and a subject in a submodule is "
                "not supported: the reference's worktree does not check submodules out, "
                "and their commits are not this repository's history. Fix: make the subject "
                "part of this repository (vendor it, or install it as a package and test "
                "your own code), or run torch-regression in the submodule's own repository, "
                "with its own config.yaml"))


def _require_apart(fingerprint: Reader, added: tuple[str, ...],
                   excluded: tuple[str, ...]) -> None:
    """A package is either added to the key or left out of it, not both."""
    both = sorted({normalized(n) for n in added} & {normalized(n) for n in excluded})
    if both:
        raise fingerprint.error("exclude_packages", f"{both[0]!r} is also in "
                                 "fingerprint.packages. Fix: list it in one of the two")
