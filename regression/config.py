"""Load and validate config.yaml into frozen settings; defaults live here and in configpaths."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from regression.configpaths import (CACHE_DIR_ENV, DEFAULT_CACHE_DIR, chosen_cache_dir,
                                    default_cache_dir, submodule_holding)
from regression.configreader import Reader
from regression.dependencies import normalized
from regression.errors import ConfigError
from regression.yamlfile import YamlProblem, parse


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
        subject_packages=subject.names("packages", required=True, subject=True),
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
