"""Bad config.yaml files: each is a clear error naming the file, the line, the key,
the problem and the fix, without a hang. Loaded in-process; a few real `invoke` runs prove
exit code 2 and no traceback at the task boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Repo, init_repo, output

from regression.config.settings import MAX_CONFIG_BYTES, load_settings
from regression.config.settings import usable_cpus
from regression.errors import ConfigError

BASE = "reference: v1\nsubject:\n  packages: [zoo]\n"


def refused(tmp_path: Path, text: str | bytes) -> ConfigError:
    """The ConfigError that loading `text` as config.yaml raises (no hang, no other error: a
    time bound would measure the machine's load, not the reader)."""
    path = tmp_path / "config.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return info.value


def where(tmp_path: Path, line: int, key: str) -> str:
    """How a message starts: the file, the line and the key."""
    return f"{(tmp_path / 'config.yaml').resolve()}:{line}: {key}: "


# --- keys set twice ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "key", "first"), [
    ("reference: v1\nsubject: {packages: [zoo]}\nreference: v2\n", 3, "reference", 1),
    ("reference: v1\nsubject:\n  packages: [zoo]\n  path: .\n  packages: [other]\n", 5,
     "subject.packages", 3),
    (BASE + "references:\n  stable: v1\n  stable: v2\n", 6, "references.stable", 5),
    (BASE + "shards:\n  pins: {'a*': 1, 'a*': 2}\n", 5, "shards.pins.a*", 5),
    ("reference: v1\nsubject: {packages: [zoo], packages: [zoo]}\n", 2, "subject.packages", 2),
], ids=["reference", "subject.packages", "named reference", "pin", "same value, flow style"])
def test_a_key_set_twice_is_refused_naming_both_lines(tmp_path: Path, text: str, line: int,
                                                      key: str, first: int) -> None:
    error = refused(tmp_path, text)
    assert (error.key, error.line) == (key, line)
    assert str(error).startswith(where(tmp_path, line, key))
    assert f"set twice, on line {first} and on line {line}; YAML would silently keep the last. " \
           "Fix: delete the one you do not mean" in str(error)


def test_a_merge_key_may_override_what_it_merges(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BASE + "references:\n  <<: {stable: v1, old: v0}\n  stable: v2\n")
    assert dict(load_settings(path).references) == {"stable": "v2", "old": "v0"}


# --- aliases, cycles, nesting, size: refused, no hang ----------------------------------------

def billion_laughs(key: str = "lol") -> str:
    levels = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 10)]
    return "\n".join(levels) + f"\n{key}: *l9\n"


@pytest.mark.parametrize("place", ["top", "subject.packages", "references"])
def test_an_alias_bomb_is_refused_at_once(tmp_path: Path, place: str) -> None:
    bomb = billion_laughs()
    text = {"top": BASE + bomb,
            "subject.packages": "reference: v1\n" + bomb + "subject: {packages: *l9}\n",
            "references": BASE + bomb + "references: {stable: *l9}\n"}[place]
    error = refused(tmp_path, text)
    assert "aliases (*name) expand this value to more than 100000 values" in str(error)
    assert "'billion laughs'" in str(error) and "Fix: write the values out" in str(error)
    assert error.line is not None and error.line <= 10


def test_an_alias_inside_its_own_value_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "reference: v1\nsubject:\n  packages: &p [zoo, *p]\n")
    assert str(error).startswith(where(tmp_path, 3, "subject.packages"))
    assert "refers to a value that contains it, which makes the value endless" in str(error)


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("reference: &r v1\nreferences: {again: *r}\nsubject: {packages: [zoo]}\n")
    assert load_settings(path).references == {"again": "v1"}


@pytest.mark.parametrize("depth", [100, 200_000])
def test_deep_nesting_is_refused_without_a_recursion_error(tmp_path: Path, depth: int) -> None:
    error = refused(tmp_path, "reference: v1\nsubject: {packages: " + "[" * depth +
                    "]" * depth + "}\n")
    assert "nested more than 64 levels deep" in str(error)
    assert "Fix: write the settings out flat" in str(error)


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    error = refused(tmp_path, BASE + "#" * (MAX_CONFIG_BYTES + 1))
    assert f"is over {MAX_CONFIG_BYTES} bytes, far more than a config holds" in str(error)


# --- threads ----------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [100_000, "cpus + 1"])
def test_more_threads_than_cpus_are_refused_with_the_reason(tmp_path: Path,
                                                            threads: int | str) -> None:
    cpus = usable_cpus()
    count = cpus + 1 if threads == "cpus + 1" else threads
    error = refused(tmp_path, BASE + f"determinism:\n  threads: {count}\n")
    assert str(error).startswith(where(tmp_path, 5, "determinism.threads"))
    assert f"must be from 1 to {cpus}, the CPUs this process may use here, got {count}: " \
           "threads beyond the CPUs cannot run at once" in str(error)
    assert f"Fix: set determinism.threads to {cpus} or fewer" in str(error)


def test_as_many_threads_as_cpus_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BASE + f"determinism: {{threads: {usable_cpus()}}}\n")
    assert load_settings(path).determinism.threads == usable_cpus()


# --- subject packages -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "why"), [
    ("torch", "torch-regression imports it with torch"),
    ("numpy", "torch-regression imports it with torch"),
    ("pytest", "torch-regression runs in pytest, which imports it"),
    ("regression", "it is torch-regression itself"),
    ("invoke", "torch-regression itself imports it"),
    ("safetensors", "torch-regression itself imports it"),
    ("json", "it is a module of Python's standard library"),
    ("os", "it is a module of Python's standard library"),
])
def test_a_package_imported_before_the_redirect_cannot_be_the_subject(
        tmp_path: Path, name: str, why: str) -> None:
    error = refused(tmp_path, f"reference: v1\nsubject:\n  packages: [zoo, {name}]\n")
    assert str(error).startswith(where(tmp_path, 3, "subject.packages"))
    assert f"{name!r} cannot be a subject package: {why}, so it is loaded before the import " \
           "redirect exists and a recording would use the installed copy" in str(error)
    assert "Fix: list your own packages" in str(error)


@pytest.mark.parametrize(("item", "words"), [
    ("''", "'' is an empty name. Fix: remove it, or write the package's name"),
    ("' '", "' ' is an empty name"),
    ("class", "'class' is a Python keyword: no package can have that name"),
    ("my-model", "'my-model' is not a package name Python can import"),
    ("2d", "'2d' is not a package name Python can import"),
    ("zoo.models", "'zoo.models' is not a top-level package name"),
    ("12", "12 is a int, not a package name"),
    ("zoo", "'zoo' is listed twice. Fix: list it once"),
])
def test_a_package_name_python_cannot_import_is_refused(tmp_path: Path, item: str,
                                                        words: str) -> None:
    error = refused(tmp_path, f"reference: v1\nsubject:\n  packages:\n    - zoo\n    - {item}\n")
    assert str(error).startswith(where(tmp_path, 3, "subject.packages"))
    assert words in str(error)


def test_every_package_the_tool_loads_first_is_refused(tmp_path: Path) -> None:
    """TOOL_IMPORTS stays true: what a recording process has loaded before any test runs."""
    probe = ("import json, sys, sysconfig; started = set(sys.modules); "  # .pth files' own
             "import regression.run.entry, regression.plugin, regression.cli.tasks, "
             "regression.plugin.recording_mode, regression.plugin.check, "
             "torch, pytest; "
             "site = sysconfig.get_path('purelib'); print(json.dumps(sorted({n.split('.')[0] "
             "for n, m in list(sys.modules.items()) if (getattr(m, '__file__', '') or '')"
             ".startswith(site) and n.split('.')[0] not in sys.stdlib_module_names "
             "and n not in started})))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    loaded = [name for name in json.loads(done.stdout) if name.isidentifier()]
    assert {"torch", "pytest", "yaml"} <= set(loaded)
    assert "git" not in loaded  # GitPython is no dependency (ARCHITECTURE.md: git)
    for name in loaded:
        error = refused(tmp_path, f"reference: v1\nsubject: {{packages: [{name}]}}\n")
        assert f"{name!r} cannot be a subject package" in str(error)


# --- types, quoting, tabs and the like ----------------------------------------------------------

@pytest.mark.parametrize(("setting", "line", "key", "words"), [
    ("determinism: {deterministic_algorithms: 'true'}", 4, "determinism.deterministic_algorithms",
     "must be true or false, got str 'true'; write it without quotes: true"),
    ("determinism: {deterministic_algorithms: 'no'}", 4, "determinism.deterministic_algorithms",
     "got str 'no'; write it without quotes: no"),
    ("determinism: {seed: '7'}", 4, "determinism.seed",
     "must be an integer, got str '7'; write it without quotes: 7"),
    ("device: on", 4, "device",
     "must be a string, got bool True; YAML reads yes, no, on, off, true and false as booleans"),
    ("determinism: {seed: 4294967296}", 4, "determinism.seed", "must be from 0 to 4294967295"),
    ("determinism: {seed: -1}", 4, "determinism.seed", "must be from 0 to 4294967295, got -1"),
    ("determinism:\n  repeat: 1000", 5, "determinism.repeat", "must be from 1 to 10, got 1000"),
    ("determinsm: {seed: 1}", 4, "determinsm", "unknown setting; did you mean 'determinism'?"),
    ("1: one", 4, "1", "unknown setting"),
], ids=["quoted true", "quoted no", "quoted number", "on for a string", "seed too big",
        "negative seed", "repeat too big", "did you mean", "number as a key"])
def test_a_wrong_value_names_line_key_problem_and_fix(tmp_path: Path, setting: str, line: int,
                                                      key: str, words: str) -> None:
    error = refused(tmp_path, BASE + setting + "\n")
    assert str(error).startswith(where(tmp_path, line, key))
    assert words in str(error)


def test_a_missing_setting_points_at_its_section(tmp_path: Path) -> None:
    error = refused(tmp_path, "reference: v1\nsubject:\n  path: src\n")
    assert str(error).startswith(where(tmp_path, 2, "subject.packages"))
    assert "missing; this setting is required" in str(error)


@pytest.mark.parametrize(("text", "words"), [
    ("reference: v1\nsubject:\n\tpackages: [zoo]\n",
     ":3: not valid YAML: a tab character; YAML does not allow tabs for indentation. "
     "Fix: indent with spaces"),
    ("- reference: v1\n", ": must be a mapping of settings at the top level (`reference: v1` "
                          "and so on), got list"),
    ("reference: v1\n? [a, b]\n: c\n", ":2: not valid YAML: while constructing a mapping: "
                                        "found unhashable key"),
    (b"reference: caf\xe9\n", ": not UTF-8 text; save it as UTF-8"),
    ("", ": is empty; a config needs at least `reference:` and `subject:` with its "
         "`packages:`, see the README's Configuration section"),
], ids=["tab", "list at the top", "list as a key", "latin-1", "empty"])
def test_a_file_that_is_no_config_says_why(tmp_path: Path, text: str | bytes,
                                           words: str) -> None:
    error = refused(tmp_path, text)
    assert str(error).startswith(f"{tmp_path / 'config.yaml'}")
    assert words in str(error)


def test_a_folder_named_config_yaml_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").mkdir()
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "config.yaml")
    assert str(info.value) == f"{tmp_path / 'config.yaml'}: is a folder, not a file; " \
                              "config.yaml must be a file"


# --- at the task boundary: exit 2, the message, no traceback -----------------------------------

def test_bad_configs_through_invoke_exit_2_without_traceback(subject_repo: Repo) -> None:
    config = (subject_repo.path / "config.yaml").read_text()
    for text, words in [
        (config + "reference: v2\n", "reference: set twice, on line 1 and on line 9"),
        (config.replace("packages: [subj]", "packages: [torch]"),
         "subject.packages: 'torch' cannot be a subject package"),
        (config.replace("threads: 1", "threads: 100000"), "determinism.threads: must be from 1"),
        (config + billion_laughs(), "'billion laughs'"),
    ]:
        subject_repo.write("config.yaml", text)
        done = subject_repo.invoke("test")
        assert done.returncode == 2, output(done)
        assert words in output(done)
        assert "Traceback" not in output(done) and "INTERNALERROR" not in output(done)


@pytest.mark.parametrize(("change", "words"), [
    (("", 'cache_dir: "c\\0d"\n'), 'cache_dir: \'c\\x00d\' holds a NUL byte'),
    (("", 'shards:\n  durations: "d\\0.json"\n'), "shards.durations: 'd\\x00.json' holds a NUL"),
    (("path: .", 'path: "sub\\0"'), "subject.path: 'sub\\x00' holds a NUL byte"),
    (("tests: [tests]", 'tests: ["tests\\0"]'), "tests: 'tests\\x00' holds a NUL byte"),
    (("", "record_beside_check: null\n"), "record_beside_check: must be true or false, got null"),
    (("  threads: 1", "  threads: 1\n  deterministic_algorithms:"),
     "determinism.deterministic_algorithms: must be true or false, got null"),
])
def test_nul_paths_and_null_booleans_through_invoke_exit_2_with_the_fix(
        subject_repo: Repo, change: tuple[str, str], words: str) -> None:
    config = (subject_repo.path / "config.yaml").read_text()
    old, new = change
    subject_repo.write("config.yaml", config.replace(old, new) if old else config + new)
    for task in ("key", "test"):
        done = subject_repo.invoke(task)
        assert done.returncode == 2, output(done)
        assert words in output(done) and "Fix:" in output(done), output(done)
        assert "Traceback" not in output(done) and "INTERNALERROR" not in output(done)


def test_a_subject_in_a_real_submodule_exits_2_saying_so(subject_repo: Repo,
                                                         tmp_path: Path) -> None:
    library = init_repo(tmp_path / "library", tmp_path / "unused")
    library.write("subj/__init__.py", "SCALE = 1.0\n")
    library.commit("the subject")
    subject_repo.git("rm", "-rq", "subj")
    subject_repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q",
                     str(library.path), "lib")
    config = (subject_repo.path / "config.yaml").read_text()
    subject_repo.write("config.yaml", config.replace("path: .", "path: lib"))
    subject_repo.commit("the subject as a submodule")
    done = subject_repo.invoke("test", "--reference", "HEAD")
    assert done.returncode == 2, output(done)
    assert "subject.path: lib is in the git submodule lib" in output(done)
    assert "a subject in a submodule is not supported" in output(done)
    assert "Fix: make the subject part of this repository" in output(done)
    assert "Traceback" not in output(done)


@pytest.mark.parametrize(("case", "words"), [
    ("/etc/passwd", "--case /etc/passwd: /etc/passwd is not a path relative to the project"),
    ("config.yaml", "--case config.yaml: config.yaml is outside the project's tests"),
])
def test_a_case_outside_the_tests_exits_2_saying_so(subject_repo: Repo, case: str,
                                                    words: str) -> None:
    for task in ("test", "gen"):
        done = subject_repo.invoke(task, "--case", case)
        assert done.returncode == 2, output(done)
        assert words in output(done) and "Give a node id as pytest prints it" in output(done)
        assert "Traceback" not in output(done)
