"""Tests of regression.config.settings: loading, defaults, validation errors and find_config."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from regression.config.settings import Determinism, load_settings
from regression.config.paths import (CACHE_DIR_ENV, NO_DEFAULT_CACHE_ENV, DEFAULT_CACHE_DIR,
                                    find_config)
from regression.config import settings
from regression.errors import ConfigError

FULL = """\
reference: v1.0
references:
  stable: release-2
  old: "0123abc"
subject:
  packages: [zoo, zoo_extra]
  path: src
tests: [tests/regression, tests/more]
harness: ["data/*.json"]
determinism:
  seed: 7
  threads: 4
  deterministic_algorithms: false
  repeat: 2
device: cuda
fingerprint:
  packages: [numpy]
cache_dir: .my-cache
"""

MINIMAL = """\
reference: HEAD
subject:
  packages: [zoo]
"""


@pytest.fixture(autouse=True)
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """FULL sets 4 threads, within the CPUs of any machine these tests run on."""
    monkeypatch.setattr(settings, "usable_cpus", lambda: 8)


def write(folder: Path, text: str) -> Path:
    path = folder / "config.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def config_error(folder: Path, text: str) -> ConfigError:
    path = write(folder, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return info.value


def test_full_config_is_read_into_settings(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL))
    assert settings.path == (tmp_path / "config.yaml").resolve()
    assert settings.root == tmp_path.resolve()
    assert settings.reference == "v1.0"
    assert dict(settings.references) == {"stable": "release-2", "old": "0123abc"}
    assert settings.subject_packages == ("zoo", "zoo_extra")
    assert settings.subject_path == "src"
    assert settings.tests == ("tests/regression", "tests/more")
    assert settings.harness == ("data/*.json",)
    assert settings.determinism == Determinism(seed=7, threads=4, deterministic_algorithms=False,
                                               repeat=2)
    assert settings.device == "cuda"
    assert settings.fingerprint_packages == ("numpy",)
    assert settings.cache_dir_setting == ".my-cache"


def test_minimal_config_gets_every_default(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL))
    assert settings.references == {}
    assert settings.subject_path == "."
    assert settings.tests == ("tests",)
    assert settings.harness == ()
    assert settings.determinism == Determinism(seed=0, threads=1, deterministic_algorithms=True)
    assert settings.device == "cpu"
    assert settings.fingerprint_packages == ()
    assert settings.cache_dir_setting == DEFAULT_CACHE_DIR


def test_single_strings_are_accepted_for_lists(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "reference: main\nsubject: {packages: zoo}\n"
                                             "tests: checks\n"))
    assert settings.subject_packages == ("zoo",)
    assert settings.tests == ("checks",)


def test_reference_is_stripped(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, 'reference: "  main "\nsubject: {packages: [zoo]}\n'))
    assert settings.reference == "main"


def test_sha_with_exponent_letters_stays_a_string(tmp_path: Path) -> None:
    # PyYAML (YAML 1.1) needs a dot for a float, so 1234e5 is read as the string "1234e5".
    settings = load_settings(write(tmp_path, "reference: 1234e5\nsubject: {packages: [zoo]}\n"))
    assert settings.reference == "1234e5"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("subject: {packages: [zoo]}\n", "reference"),
        ("reference: ''\nsubject: {packages: [zoo]}\n", "reference"),
        ("reference: HEAD\n", "subject"),
        ("reference: HEAD\nsubject: {path: .}\n", "subject.packages"),
        ("reference: HEAD\nsubject: {packages: []}\n", "subject.packages"),
        ("reference: HEAD\nsubject: {packages: [zoo-models]}\n", "subject.packages"),
        ("reference: HEAD\nsubject: {packages: [3]}\n", "subject.packages"),
        ("reference: HEAD\nsubject: [zoo]\n", "subject"),
    ],
    ids=["no-reference", "empty-reference", "no-subject", "no-packages", "empty-packages",
         "dash-in-package", "number-package", "subject-not-mapping"],
)
def test_missing_or_bad_required_setting_names_key_and_file(
        tmp_path: Path, text: str, key: str) -> None:
    error = config_error(tmp_path, text)
    assert error.key == key
    path = re.escape(str((tmp_path / "config.yaml").resolve()))
    assert re.search(rf"{path}(:\d+)?: {re.escape(key)}: ", str(error))


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("colour: blue\n", "colour"),
        ("determinism: {seeds: 3}\n", "determinism.seeds"),
        ("fingerprint: {package: [numpy]}\n", "fingerprint.package"),
        ("subject: {packages: [zoo], paths: [src]}\n", "subject.paths"),
    ],
)
def test_unknown_setting_names_key_and_file(tmp_path: Path, extra: str, key: str) -> None:
    base = "reference: HEAD\n" + ("" if extra.startswith("subject") else
                                  "subject: {packages: [zoo]}\n")
    error = config_error(tmp_path, base + extra)
    assert error.key == key
    assert "unknown setting" in str(error)
    assert str((tmp_path / "config.yaml").resolve()) in str(error)


@pytest.mark.parametrize(
    ("setting", "key", "words"),
    [
        ("determinism: {threads: two}", "determinism.threads", "must be an integer"),
        ("determinism: {threads: 0}", "determinism.threads", "from 1 to"),
        ("determinism: {threads: true}", "determinism.threads", "must be an integer"),
        ("determinism: {seed: -1}", "determinism.seed", "from 0 to"),
        ("determinism: {seed: 1.5}", "determinism.seed", "must be an integer"),
        ("determinism: {deterministic_algorithms: 'yes'}",
         "determinism.deterministic_algorithms", "true or false"),
        ("determinism: {repeat: 0}", "determinism.repeat", "must be from 1 to 10, got 0"),
        ("determinism: [1]", "determinism", "a mapping"),
        ("tests: 5", "tests", "list of paths"),
        ("tests: [ok, 5]", "tests", "list of paths"),
        ("harness: {a: b}", "harness", "list of paths"),
        ("device: tpu", "device", "one of cpu, cuda"),
        ("device: 1", "device", "a string"),
        ("cache_dir: [a]", "cache_dir", "a folder path"),
        ("references: [a]", "references", "a mapping"),
        ("fingerprint: {packages: {a: 1}}", "fingerprint.packages", "list of names"),
    ],
)
def test_wrong_type_or_value_names_key_and_file(
        tmp_path: Path, setting: str, key: str, words: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert words in str(error)
    assert str((tmp_path / "config.yaml").resolve()) in str(error)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("reference: 1234567\nsubject: {packages: [zoo]}\n", "reference"),
        ("reference: 0123\nsubject: {packages: [zoo]}\n", "reference"),
        ("reference: 1.5\nsubject: {packages: [zoo]}\n", "reference"),
        ("reference: HEAD\nreferences: {stable: 1234567}\nsubject: {packages: [zoo]}\n",
         "references.stable"),
    ],
    ids=["digits", "octal", "float", "named"],
)
def test_revision_read_as_number_asks_for_quotes(tmp_path: Path, text: str, key: str) -> None:
    error = config_error(tmp_path, text)
    assert error.key == key
    assert "quote it" in str(error)


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("tests: [/abs/tests]", "tests"),
        ("tests: [tests/../../outside]", "tests"),
        ("tests: ..", "tests"),
        ("harness: [../conftest.py]", "harness"),
    ],
)
def test_paths_must_stay_inside_the_project(tmp_path: Path, setting: str, key: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert "must be relative" in str(error)


@pytest.mark.parametrize("path", ["/abs/src", "../src", "src/../../x"])
def test_subject_path_must_stay_inside_the_project(tmp_path: Path, path: str) -> None:
    error = config_error(tmp_path,
                         f"reference: HEAD\nsubject: {{packages: [zoo], path: '{path}'}}\n")
    assert error.key == "subject.path"
    assert "must be relative" in str(error)


def test_subject_path_must_be_a_string(tmp_path: Path) -> None:
    error = config_error(tmp_path, "reference: HEAD\nsubject: {packages: [zoo], path: [a]}\n")
    assert error.key == "subject.path"


def test_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "reference: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_settings(path)
    assert info.value.path == str(path)
    assert info.value.key is None


@pytest.mark.parametrize("text", ["- reference\n- HEAD\n", "just a string\n", "42\n"])
def test_top_level_that_is_not_a_mapping_is_rejected(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match="mapping of settings at the top level") as info:
        load_settings(path)
    assert info.value.path == str(path)


def test_empty_file_says_what_a_config_needs(tmp_path: Path) -> None:
    for text in ("", "# nothing yet\n", "---\n"):
        error = config_error(tmp_path, text)
        assert error.key is None
        assert "is empty; a config needs at least `reference:` and `subject:`" in str(error)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "config.yaml"
    with pytest.raises(ConfigError, match="file not found") as info:
        load_settings(path)
    assert info.value.path == str(path)


def test_config_that_is_not_utf8_gives_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"reference: caf\xe9\nsubject: {packages: [zoo]}\n")
    with pytest.raises(ConfigError):
        load_settings(path)


def test_config_path_that_is_a_folder_gives_config_error(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").mkdir()
    with pytest.raises(ConfigError):
        load_settings(tmp_path / "config.yaml")


def test_revision_for_resolves_names_revisions_and_default(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL))
    assert settings.revision_for("stable") == "release-2"
    assert settings.revision_for("abc1234") == "abc1234"
    assert settings.revision_for(None) == "v1.0"


def test_cache_dir_comes_from_config_without_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv(NO_DEFAULT_CACHE_ENV)  # this test means the default location
    settings = load_settings(write(tmp_path, FULL))
    assert settings.cache_dir == (tmp_path / ".my-cache").resolve()


def test_cache_dir_default_is_under_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv(NO_DEFAULT_CACHE_ENV)  # this test means the default location
    settings = load_settings(write(tmp_path, MINIMAL))
    assert settings.cache_dir == (tmp_path / DEFAULT_CACHE_DIR).resolve()


def test_cache_dir_variable_overrides_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(write(tmp_path, FULL))
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "elsewhere"))
    assert settings.cache_dir == (tmp_path / "elsewhere").resolve()
    monkeypatch.setenv(CACHE_DIR_ENV, "relative-cache")
    assert settings.cache_dir == (tmp_path / "relative-cache").resolve()


def test_find_config_looks_at_the_top_of_the_repository(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    (tmp_path / ".git").mkdir()
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_config(deep) == path.resolve()


def test_find_config_prefers_the_start_folder(tmp_path: Path) -> None:
    write(tmp_path, MINIMAL)
    (tmp_path / ".git").mkdir()
    inner = tmp_path / "inner"
    inner.mkdir()
    nearest = write(inner, MINIMAL)
    assert find_config(inner) == nearest.resolve()


def test_find_config_never_looks_above_the_repository(tmp_path: Path) -> None:
    write(tmp_path, MINIMAL)  # some other project's config.yaml, above the repository
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    with pytest.raises(ConfigError, match="at the top of its git repository"):
        find_config(repo / "tests")


def test_find_config_ignores_a_folder_named_config_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    (tmp_path / ".git").mkdir()
    inner = tmp_path / "inner"
    (inner / "config.yaml").mkdir(parents=True)
    assert find_config(inner) == path.resolve()


def test_find_config_fails_when_there_is_none(tmp_path: Path) -> None:
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    with pytest.raises(ConfigError, match="no config.yaml in ") as info:
        find_config(start)
    assert info.value.path == str(start.resolve() / "config.yaml")


def test_dotted_subject_package_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("reference: HEAD\nsubject:\n  packages: [pkg.sub]\n")
    with pytest.raises(ConfigError) as error:
        load_settings(path)
    assert "subject.packages" in str(error.value)
    assert "top-level package" in str(error.value)


# --- shards --------------------------------------------------------------------------------

def test_durations_file_defaults_to_the_config_folder(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL))
    assert settings.durations_setting == ".regression-durations.json"
    assert settings.durations_file == tmp_path.resolve() / ".regression-durations.json"
    assert settings.pins == {}


def test_empty_shards_section_gets_the_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL + "shards:\n"))
    assert settings.durations_file == tmp_path.resolve() / ".regression-durations.json"
    assert settings.pins == {}


def test_custom_durations_path_is_relative_to_the_config_folder(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL + "shards: {durations: ci/times.json}\n"))
    assert settings.durations_setting == "ci/times.json"
    assert settings.durations_file == tmp_path.resolve() / "ci" / "times.json"


def test_pins_are_read_as_a_mapping_in_file_order(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL + (
        "shards:\n"
        "  pins:\n"
        "    'tests/test_zoo.py::*vit*': 2\n"
        "    'tests/test_zoo.py::*': 1\n")))
    assert dict(settings.pins) == {"tests/test_zoo.py::*vit*": 2, "tests/test_zoo.py::*": 1}
    assert list(settings.pins) == ["tests/test_zoo.py::*vit*", "tests/test_zoo.py::*"]


@pytest.mark.parametrize(
    ("pins", "words"),
    [
        ("{'*vit*': 0}", "to a shard number from 1"),
        ("{'*vit*': -2}", "to a shard number from 1"),
        ("{'*vit*': two}", "to a shard number from 1"),
        ("{'*vit*': true}", "to a shard number from 1"),
        ("{'*vit*': 1.5}", "to a shard number from 1"),
        ("{1: 2}", "to a shard number from 1"),
        ("['*vit*']", "must be a mapping of test id pattern: shard number"),
        ("'*vit*'", "must be a mapping of test id pattern: shard number"),
    ],
    ids=["zero", "negative", "word", "boolean", "float", "number-pattern", "list", "string"],
)
def test_bad_pins_name_the_setting(tmp_path: Path, pins: str, words: str) -> None:
    error = config_error(tmp_path, MINIMAL + f"shards: {{pins: {pins}}}\n")
    assert error.key == "shards.pins"
    assert "shards.pins: " in str(error)
    assert words in str(error)


@pytest.mark.parametrize(("setting", "key"), [("shards: {duration: a.json}", "shards.duration"),
                                              ("shards: {pin: {'*': 1}}", "shards.pin")])
def test_unknown_shards_setting_is_rejected_by_name(
        tmp_path: Path, setting: str, key: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert "unknown setting" in str(error)
    assert "durations, pins" in str(error)


@pytest.mark.parametrize("path", ["/abs/durations.json", "../durations.json", "ci/../../d.json"])
def test_durations_path_must_stay_inside_the_project(tmp_path: Path, path: str) -> None:
    error = config_error(tmp_path, MINIMAL + f"shards: {{durations: '{path}'}}\n")
    assert error.key == "shards.durations"
    assert "must be relative" in str(error)


@pytest.mark.parametrize(("setting", "key", "words"), [
    ("shards: {durations: [a.json]}", "shards.durations", "a path relative to the config"),
    ("shards: [a]", "shards", "must be a mapping"),
])
def test_shards_settings_of_the_wrong_type_are_rejected(
        tmp_path: Path, setting: str, key: str, words: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert words in str(error)


@pytest.mark.parametrize("value", [".", "''", "..", "sub/.."])
def test_cache_dir_may_not_be_the_project_or_above(tmp_path: Path, value: str) -> None:
    error = config_error(tmp_path, MINIMAL + f"cache_dir: {value}\n")
    assert "cache_dir" in str(error)


@pytest.mark.parametrize("text", ["determinism: {seed: 4294967296}", "tests: []",
                                  "references: {1: abc}"])
def test_more_bad_values_name_their_key(tmp_path: Path, text: str) -> None:
    error = config_error(tmp_path, MINIMAL + text + "\n")
    assert text.split(":")[0] in str(error)


# one check for where the cache may live, from config.yaml or from the environment


def project_with_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A project beside a fake home folder, and places that must never hold the cache."""
    home = tmp_path / "home"
    (home / "user").mkdir(parents=True)
    project = tmp_path / "work" / "project"
    (project / "vendored" / ".git").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home / "user"))
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    write(project, MINIMAL)
    return {"the project": str(project), "a folder above it": str(tmp_path),
            "the file system's root": "/", "the home folder": str(home / "user"),
            "above the home folder": "../../home", "the project, relatively": ".",
            "above it, relatively": "..", "a repository": "vendored"}


PLACES = ["the project", "a folder above it", "the file system's root", "the home folder",
          "above the home folder", "the project, relatively", "above it, relatively",
          "a repository"]


@pytest.mark.parametrize("place", PLACES)
def test_the_cache_variable_may_not_name_the_project_home_or_a_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str) -> None:
    value = project_with_places(tmp_path, monkeypatch)[place]
    settings = load_settings(tmp_path / "work" / "project" / "config.yaml")
    monkeypatch.setenv(CACHE_DIR_ENV, value)
    with pytest.raises(ConfigError) as info:
        settings.cache_dir  # noqa: B018 - the property checks
    message = str(info.value)
    assert message.startswith(f"${CACHE_DIR_ENV}: {value!r} ")
    assert "unset it or name a folder of its own, e.g. .regression-cache" in message


@pytest.mark.parametrize("place", PLACES)
def test_the_cache_dir_key_may_not_name_the_project_home_or_a_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str) -> None:
    value = project_with_places(tmp_path, monkeypatch)[place]
    error = config_error(tmp_path / "work" / "project", MINIMAL + f"cache_dir: '{value}'\n")
    assert error.key == "cache_dir"
    assert "name a folder of its own, e.g. .regression-cache" in str(error)


def test_the_cache_variable_may_name_a_folder_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project_with_places(tmp_path, monkeypatch)
    settings = load_settings(tmp_path / "work" / "project" / "config.yaml")
    for value, folder in [("zoo", tmp_path / "work" / "project" / "zoo"),
                          (str(tmp_path / "caches"), tmp_path / "caches")]:
        monkeypatch.setenv(CACHE_DIR_ENV, value)
        assert settings.cache_dir == folder


def test_a_link_to_the_cache_folder_is_resolved_and_checked_where_it_leads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project_with_places(tmp_path, monkeypatch)
    project = tmp_path / "work" / "project"
    (tmp_path / "big-disk").mkdir()
    (project / "cache-link").symlink_to(tmp_path / "big-disk", target_is_directory=True)
    (project / "root-link").symlink_to(project, target_is_directory=True)
    settings = load_settings(project / "config.yaml")
    monkeypatch.setenv(CACHE_DIR_ENV, "cache-link")
    assert settings.cache_dir == tmp_path / "big-disk"
    monkeypatch.setenv(CACHE_DIR_ENV, "root-link")
    with pytest.raises(ConfigError, match="is the project folder"):
        settings.cache_dir  # noqa: B018 - the property checks


@pytest.mark.parametrize(("text", "key", "hint"), [
    ("refrence: v1\nsubject: {packages: [zoo]}\n", "reference",
     "missing; this setting is required ('refrence' is set: did you mean 'reference'?)"),
    ("reference: v1\nsubject: {packages: [zoo]}\ndeterminsm: {seed: 1}\n", "determinsm",
     "unknown setting; did you mean 'determinism'? known here: "),
    ("reference: v1\nsubject: {packages: [zoo], pth: src}\n", "subject.pth",
     "unknown setting; did you mean 'path'? known here: "),
])
def test_a_misspelt_setting_is_named_with_what_was_meant(tmp_path: Path, text: str, key: str,
                                                          hint: str) -> None:
    error = config_error(tmp_path, text)
    assert error.key == key
    assert hint in str(error)


def test_a_real_setting_is_never_offered_as_a_misspelling(tmp_path: Path) -> None:
    error = config_error(tmp_path, "references: {x: v1}\nsubject: {packages: [zoo]}\n")
    assert error.key == "reference"
    assert str(error).endswith("missing; this setting is required")
    far = config_error(tmp_path, "reference: v1\nsubject: {packages: [zoo]}\ncolour: blue\n")
    assert "did you mean" not in str(far)


def test_fingerprint_packages_and_exclusions_take_names_as_pip_writes_them(
        tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL + "fingerprint:\n  packages: [numpy, "
                                   "huggingface-hub, zope.interface]\n  exclude_packages: "
                                   "einops\n"))
    assert settings.fingerprint_packages == ("numpy", "huggingface-hub", "zope.interface")
    assert settings.fingerprint_exclude == ("einops",)
    assert load_settings(write(tmp_path, MINIMAL)).fingerprint_exclude == ()


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("exclude_packages: {a: 1}", "must be a list of names of installed packages, got "
         "{'a': 1}, e.g. fingerprint.exclude_packages: [numpy, einops]"),
        ("exclude_packages: [1]", "1 is not a package name as pip writes it"),
        ("exclude_packages: ['my pkg']", "'my pkg' is not a package name as pip writes it"),
        ("exclude_packages: [-x]", "'-x' is not a package name as pip writes it"),
        ("exclude_packages: [einops, einops]", "'einops' is listed twice"),
        ("packages: [Einops]\n  exclude_packages: [einops]",
         "'einops' is also in fingerprint.packages. Fix: list it in one of the two"),
    ],
    ids=["mapping", "number", "space", "dash", "twice", "both"],
)
def test_a_bad_exclusion_names_the_key_and_the_fix(tmp_path: Path, setting: str,
                                                   words: str) -> None:
    error = config_error(tmp_path, MINIMAL + f"fingerprint:\n  {setting}\n")
    assert error.key == "fingerprint.exclude_packages"
    assert words in str(error)
    assert str((tmp_path / "config.yaml").resolve()) in str(error)


def test_a_misspelt_exclusion_is_an_unknown_setting_with_a_hint(tmp_path: Path) -> None:
    error = config_error(tmp_path, MINIMAL + "fingerprint:\n  exclude_package: [einops]\n")
    assert error.key == "fingerprint.exclude_package"
    assert "did you mean 'exclude_packages'?" in str(error)


@pytest.mark.parametrize(("value", "size"), [
    ("16 MB", 16_000_000), ("16MiB", 16 << 20), ("1.5 GiB", 3 << 29), ("512 kb", 512_000),
    ("0 B", 0), ("4096", 4096), (4096, 4096)])
def test_storage_digest_above_takes_sizes(tmp_path: Path, value: object, size: int) -> None:
    shown = f"'{value}'" if isinstance(value, str) else value
    settings = load_settings(write(tmp_path, MINIMAL + f"storage: {{digest_above: {shown}}}\n"))
    assert settings.digest_above == size


def test_storage_digest_above_is_off_by_default(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, MINIMAL)).digest_above is None


@pytest.mark.parametrize(("setting", "key", "words"), [
    ("storage: {digest_above: lots}", "storage.digest_above", "must be a size, such as 16 MB"),
    ("storage: {digest_above: -1}", "storage.digest_above", "got -1"),
    ("storage: {digest_above: true}", "storage.digest_above", "must be a size"),
    ("storage: {digest_above: 16 XB}", "storage.digest_above", "got '16 XB'"),
    ("storage: {digest_above: [16]}", "storage.digest_above", "must be a size"),
    ("storage: {digest_abov: 16 MB}", "storage.digest_abov", "did you mean 'digest_above'?"),
    ("storage: 16 MB", "storage", "must be a mapping"),
])
def test_bad_storage_settings_are_named_with_the_fix(tmp_path: Path, setting: str, key: str,
                                                     words: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert words in str(error)


@pytest.mark.parametrize("extra, beside", [("", True), ("device: cuda\n", False),
                                           ("record_beside_check: false\n", False),
                                           ("device: cuda\nrecord_beside_check: true\n", True)])
def test_record_beside_check_is_on_for_cpu_and_off_for_cuda_unless_set(
        tmp_path: Path, extra: str, beside: bool) -> None:
    assert load_settings(write(tmp_path, MINIMAL + extra)).record_beside_check is beside


def test_record_beside_check_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="record_beside_check"):
        load_settings(write(tmp_path, MINIMAL + "record_beside_check: sometimes\n"))


# --- every path setting: one check (a NUL byte can name no file) ------------------------------

PATH_SETTINGS = [
    ('cache_dir: "cache\\0x"', "cache_dir"),
    ('shards: {durations: "d\\0.json"}', "shards.durations"),
    ('tests: ["tests\\0"]', "tests"),
    ('tests: [tests, "more\\0"]', "tests"),
    ('harness: ["data/\\0*.json"]', "harness"),
]


@pytest.mark.parametrize(("setting", "key"), PATH_SETTINGS)
def test_a_nul_byte_in_any_path_setting_is_refused_with_the_fix(
        tmp_path: Path, setting: str, key: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert "holds a NUL byte" in str(error) and "Fix: remove it" in str(error)


def test_a_nul_byte_in_the_subject_path_is_refused(tmp_path: Path) -> None:
    error = config_error(tmp_path, 'reference: v1\nsubject:\n  packages: [zoo]\n'
                                   '  path: "src\\0"\n')
    assert error.key == "subject.path" and "holds a NUL byte" in str(error)


@pytest.mark.parametrize(("setting", "key"), [
    ("record_beside_check: null", "record_beside_check"),
    ("record_beside_check:", "record_beside_check"),
    ("record_beside_check: ~", "record_beside_check"),
    ("determinism: {deterministic_algorithms: null}", "determinism.deterministic_algorithms"),
    ("determinism:\n  deterministic_algorithms:", "determinism.deterministic_algorithms"),
])
def test_null_in_any_boolean_setting_is_refused_with_the_fix(
        tmp_path: Path, setting: str, key: str) -> None:
    error = config_error(tmp_path, MINIMAL + setting + "\n")
    assert error.key == key
    assert "must be true or false, got null" in str(error)
    assert f"write {key}: true or {key}: false, or remove the line" in str(error)


def test_boolean_settings_left_out_get_their_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL))
    assert settings.record_beside_check is True
    assert settings.determinism.deterministic_algorithms is True


def submodule_project(tmp_path: Path, checked_out: bool) -> Path:
    """A repository whose `lib` is a submodule: checked out (its own .git file) or only
    declared in .gitmodules."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "lib" / "subj").mkdir(parents=True)
    (tmp_path / ".gitmodules").write_text('[submodule "lib"]\n\tpath = lib\n\turl = ../x\n')
    if checked_out:
        (tmp_path / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n")
    return tmp_path


@pytest.mark.parametrize("checked_out", [True, False])
@pytest.mark.parametrize(("subject", "key"), [
    ("  packages: [subj]\n  path: lib\n", "subject.path"),
    ("  packages: [subj]\n  path: lib/subj\n", "subject.path"),
    ("  packages: [lib]\n", "subject.packages"),
])
def test_a_subject_in_a_submodule_is_refused_with_the_fix(
        tmp_path: Path, subject: str, key: str, checked_out: bool) -> None:
    root = submodule_project(tmp_path, checked_out)
    error = config_error(root, "reference: v1\nsubject:\n" + subject)
    assert error.key == key
    assert "is in the git submodule lib" in str(error)
    assert "a subject in a submodule is not supported" in str(error) and "Fix:" in str(error)


def test_a_subject_beside_a_submodule_is_accepted(tmp_path: Path) -> None:
    root = submodule_project(tmp_path, checked_out=True)
    (root / "src" / "subj").mkdir(parents=True)
    settings = load_settings(write(root, "reference: v1\nsubject:\n  packages: [subj]\n"
                                         "  path: src\n"))
    assert settings.subject_path == "src"
