"""Typed reading of one mapping of config.yaml: each kind of setting, its checks and messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from regression.configpaths import DEFAULT_CACHE_DIR, cache_dir_problem
from regression.configvalues import (DISTRIBUTION, closest, name_problem, parse_size,
                                     path_problem, quoting_hint, shown, subject_problem,
                                     usable_cpus)
from regression.errors import ConfigError
from regression.yamlfile import Lined

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

    def names(self, key: str, required: bool, subject: bool = False) -> tuple[str, ...]:
        value = self._get(key, required)
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value and required:
            raise self.error(key, "must be a non-empty list of names")
        for item in value:
            problem = name_problem(item) or (subject_problem(item) if subject else "")
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

    def string(self, key: str, default: str) -> str:
        value = self._typed(key, str, "a string")
        return default if value is None else value

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
