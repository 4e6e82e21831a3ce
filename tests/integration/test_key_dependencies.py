"""The key covers the subject's dependencies: another installed version of one changes it;
and it covers the test code: an edited helper of the tests re-records.

tabulate (small, pure Python, no dependencies of its own) stands for einops or torchvision:
two of its releases are installed from this machine's package index into folders of their
own, and put on the path in turn.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Repo, flat_subject_repo, installable_pyproject, output

from regression.config.settings import load_settings
from regression.environment.fingerprint import environment_parts, key_of, key_packages

OLD, NEW = "0.8.10", "0.10.0"
DEPENDENT = installable_pyproject("subj", ".").replace(
    'version = "1.0"\n', 'version = "1.0"\ndependencies = ["tabulate>=0.8", "torch"]\n')


def _pip_target(folder: Path, *requirements: str) -> Path:
    """`requirements` installed into `folder` alone (no dependencies), offline."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--target", str(folder), *requirements],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


@pytest.fixture(scope="module")
def tabulate_releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two releases of tabulate, each in a folder of its own."""
    root = tmp_path_factory.mktemp("tabulate")
    return {version: _pip_target(root / version, f"tabulate=={version}")
            for version in (OLD, NEW)}


def _keys_by_version(settings_path: Path, releases: dict[str, Path],
                     monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment's key with each release of tabulate on the path in turn."""
    settings = load_settings(settings_path)
    keys = {}
    for version, folder in releases.items():
        monkeypatch.syspath_prepend(str(folder))
        parts = environment_parts(settings, "a" * 40)
        assert parts["packages"] == "none" or \
            parts["packages"].startswith(f"tabulate {version} (files ")
        keys[version] = key_of(parts)
    return keys


@pytest.mark.slow
def test_upgrading_a_dependency_the_subject_declares_changes_the_key(
        subject_repo: Repo, tabulate_releases: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    subject_repo.write("pyproject.toml", DEPENDENT)
    subject_repo.commit("subj needs tabulate")
    keys = _keys_by_version(subject_repo.path / "config.yaml", tabulate_releases, monkeypatch)
    assert keys[OLD] != keys[NEW]
    done = subject_repo.invoke("key", "--explain", process=True,
                               env={"PYTHONPATH": str(tabulate_releases[OLD])})
    assert done.returncode == 0, output(done)
    explained = done.stdout
    assert f"packages: tabulate {OLD} (files " in explained
    assert "  tabulate: declared by pyproject.toml\n" in explained
    assert "  the subject's dependencies: read from subj's pyproject.toml/setup.cfg (it is " \
           "not installed)\n" in explained
    assert "harness: 1 case in 1 file, hashed with:\n  tests/test_subj.py\n" in explained


def test_an_installed_subject_s_metadata_names_its_dependencies(
        subject_repo: Repo, tabulate_releases: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The subject installed (here into a folder of its own): its Requires-Dist counts,
    whatever the repository's files say now."""
    subject_repo.write("pyproject.toml", DEPENDENT)
    installed = _pip_target(tmp_path / "site", str(subject_repo.path))
    subject_repo.write("pyproject.toml", installable_pyproject("subj", "."))  # declares none
    monkeypatch.syspath_prepend(str(installed))
    keys = _keys_by_version(subject_repo.path / "config.yaml", tabulate_releases, monkeypatch)
    assert keys[OLD] != keys[NEW]
    settings = load_settings(subject_repo.path / "config.yaml")
    assert [(p.name, p.why) for p in key_packages(settings)] == [
        ("tabulate", "declared by subj 1.0 (installed)")]


def test_an_excluded_dependency_is_not_in_the_key(
        subject_repo: Repo, tabulate_releases: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    subject_repo.write("pyproject.toml", DEPENDENT)
    config = subject_repo.path / "config.yaml"
    config.write_text(config.read_text() + "fingerprint:\n  exclude_packages: [tabulate]\n")
    keys = _keys_by_version(config, tabulate_releases, monkeypatch)
    assert keys[OLD] == keys[NEW]


EDITABLE_SUBJECT = """\
import torch
import zoohelp

SCALE = 1.0  # the plain test asks for it


def forward(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * zoohelp.SCALE
"""


def test_an_editable_dependency_edited_under_one_version_is_recorded_again(
        subject_repo: Repo, tmp_path: Path) -> None:
    """A dependency installed editable (its dist-info as pip writes it, direct_url.json
    naming its source folder) is edited without a new version: the key changes, so the
    reference is recorded again with its new code, never compared with what its old code
    gave (which would blame the subject for the dependency's change)."""
    source, site = tmp_path / "zoohelp-src", tmp_path / "site"
    (source / "zoohelp").mkdir(parents=True)
    (source / "zoohelp/__init__.py").write_text("SCALE = 1.0\n")
    info = site / "zoohelp-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zoohelp\nVersion: 1.0\n")
    (info / "RECORD").write_text("__editable__.zoohelp-1.0.pth,sha256=AAAA,20\n"
                                 "zoohelp-1.0.dist-info/RECORD,,\n")
    (info / "direct_url.json").write_text(json.dumps(
        {"url": source.as_uri(), "dir_info": {"editable": True}}))
    subject_repo.write("pyproject.toml", installable_pyproject("subj", ".").replace(
        'version = "1.0"\n', 'version = "1.0"\ndependencies = ["zoohelp"]\n'))
    subject_repo.write("subj/__init__.py", EDITABLE_SUBJECT)
    subject_repo.commit("subj needs zoohelp")
    env = {"PYTHONPATH": f"{site}{os.pathsep}{source}"}
    first = subject_repo.invoke("test", "--reference", "HEAD", env=env, process=True)
    assert first.returncode == 0, output(first)
    (source / "zoohelp/__init__.py").write_text("SCALE = 2.0\n")  # still zoohelp 1.0
    again = subject_repo.invoke("test", "--reference", "HEAD", env=env, process=True)
    assert again.returncode == 0, output(again)
    assert "recording 1 of 1 cases" in output(again) and "CHANGED" not in output(again)


VARIABLE_SUBJECT = """\
import os

import torch

SCALE = 1.0


def forward(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * float(os.environ.get("SUBJ_SCALE", "{default}"))
"""


def test_a_variable_the_subject_reads_is_part_of_what_its_reference_was_recorded_with(
        subject_repo: Repo) -> None:
    """The reference was recorded with SUBJ_SCALE=2; the subject's default becomes 2 and the
    variable is unset: the reference is recorded again without it (scale 1), so the new
    default is caught, not compared with the old recording that happens to agree."""
    subject_repo.write("subj/__init__.py", VARIABLE_SUBJECT.format(default="1.0"))
    subject_repo.commit("subj reads SUBJ_SCALE")
    first = subject_repo.invoke("test", "--reference", "HEAD", env={"SUBJ_SCALE": "2"})
    assert first.returncode == 0, output(first)
    subject_repo.write("subj/__init__.py", VARIABLE_SUBJECT.format(default="2.0"))
    caught = subject_repo.invoke("test", "--reference", "HEAD")
    assert caught.returncode == 1, output(caught)
    assert "recording 1 of 1 cases" in output(caught)
    assert "CHANGED tests/test_subj.py::test_forward" in output(caught)


def test_a_variable_the_working_tree_s_subject_sets_never_reaches_the_reference(
        subject_repo: Repo) -> None:
    """The working tree's subject sets SUBJ_SCALE as it is imported (a real change: the
    reference reads it, unset there), by a root conftest too (in xdist's controller, before
    its workers start): `invoke gen` imports it while it collects, and the recording it then
    starts must not inherit the value, nor any later run's, nor a worker's."""
    subject_repo.write("subj/__init__.py", VARIABLE_SUBJECT.format(default="1.0"))
    subject_repo.write("conftest.py", "import subj  # noqa: F401\n")
    subject_repo.commit("subj reads SUBJ_SCALE")
    subject_repo.write("subj/__init__.py", 'import os\nos.environ.setdefault("SUBJ_SCALE", '
                       '"2")\n' + VARIABLE_SUBJECT.format(default="1.0"))
    generated = subject_repo.invoke("gen", "--reference", "HEAD")
    assert generated.returncode == 0, output(generated)
    for run in ("after gen", "again", "--workers 2"):
        caught = subject_repo.invoke("test", "--reference", "HEAD", *run.split()[:2]
                                     if run.startswith("--") else ())
        assert caught.returncode == 1, (run, output(caught))
        assert "CHANGED tests/test_subj.py::test_forward" in output(caught), run
        assert "reference up to date" in output(caught), run


FIXTURE_SETS_VARIABLE = """\
import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def scale():
    os.environ["SUBJ_SCALE"] = "2"  # as a suite sets HF_HUB_OFFLINE
"""


def test_a_variable_a_fixture_sets_is_taken_as_the_run_started_and_records_once(
        subject_repo: Repo) -> None:
    """A session fixture sets the variable the subject reads, in both runs: what counts is
    its value as each run started (unset), so the next run reuses the reference."""
    subject_repo.write("subj/__init__.py", VARIABLE_SUBJECT.format(default="1.0"))
    subject_repo.write("tests/conftest.py", FIXTURE_SETS_VARIABLE)
    subject_repo.commit("subj reads SUBJ_SCALE, a fixture sets it")
    for run in ("first", "second"):
        done = subject_repo.invoke("test", "--reference", "HEAD")
        assert done.returncode == 0, (run, output(done))
    assert "reference up to date" in output(done)


INNER_RUN = """\
pytest_plugins = ["pytester"]


def test_inner(pytester):
    pytester.makepyfile(test_nested_x="def test_x(): pass")
    pytester.runpytest("-p", "no:torch_regression").assert_outcomes(passed=1)
"""


def test_a_start_environment_is_the_run_s_own_not_a_leftover_nor_an_inner_run_s(
        subject_repo: Repo) -> None:
    """A hand-on left in the environment by another run (exported by mistake, or inherited
    by a run started from inside a test) is not taken; a pytest run inside a case (pytester,
    in-process) gives the run around it its own back when it ends."""
    subject_repo.write("subj/__init__.py", VARIABLE_SUBJECT.format(default="1.0").replace(
        '"{default}"))'.format(default="1.0"),
        '"1.0")) + float(os.environ.get("SUBJ_SHIFT", "0"))'))
    subject_repo.write("conftest.py", 'import os\nos.environ["SUBJ_SCALE"] = "2"\n')
    subject_repo.write("tests/test_inner.py", INNER_RUN)  # runs before tests/test_subj.py
    subject_repo.commit("a conftest sets SUBJ_SCALE; a test runs pytest inside")
    leftover = json.dumps({"pid": 1, "environ": {"PATH": os.environ["PATH"]}})  # no shift
    for run in ("first", "again"):
        done = subject_repo.invoke("test", "--reference", "HEAD",
                                   env={"REGRESSION_START_ENVIRON": leftover, "SUBJ_SHIFT": "1"})
        assert done.returncode == 0, (run, output(done))
    assert "reference up to date" in output(done)


# The key covers the test code: the test modules, the helpers they import (also a test module
# imported by another, or a helper imported only while a case runs) and the data files of the
# test folders. An edit there re-records; it is never taken for a change of the subject.


HELPED_TESTS = """\
import json
from pathlib import Path

import subj
from models import build
from test_other import shift  # a test module, imported as a helper


def test_built(regression):
    regression.check(subj.forward(build(regression.randn(2, 4)) + shift()))


def test_lazy(regression):
    import lazy  # imported only while the case runs

    regression.check(subj.forward(regression.randn(2, 4)) * lazy.FACTOR)


def test_data(regression):
    shift = json.loads((Path(__file__).parent / "data" / "in.json").read_text())["shift"]
    regression.check(subj.forward(regression.randn(2, 4) + shift))
"""


@pytest.fixture(scope="module")
def helped(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """A recorded repository whose tests use a helper module, a helper imported inside a
    case, and a data file of the test folder. Tests copy it with `_copy`."""
    root = tmp_path_factory.mktemp("helped")
    repo = flat_subject_repo(root / "repo", root / "cache")
    repo.write("tests/models.py", "def build(x):\n    return x\n")
    repo.write("tests/lazy.py", "FACTOR = 1.0\n")
    repo.write("tests/data/in.json", '{"shift": 0.0}\n')
    repo.write("tests/test_helped.py", HELPED_TESTS)
    repo.write("tests/test_other.py", """\
        import subj


        def shift():
            return 0.0


        def test_other(regression):
            regression.check(subj.forward(regression.randn(2, 4)))
        """)
    repo.commit("tests with helpers")
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    return repo


def _copy(repo: Repo, to: Path) -> Repo:
    shutil.copytree(repo.path, to / "repo", symlinks=True)
    shutil.copytree(repo.cache, to / "cache", symlinks=True)
    return Repo(to / "repo", to / "cache")


def test_an_edited_helper_re_records_and_a_subject_edit_compensating_it_is_caught(
        helped: Repo, tmp_path: Path) -> None:
    """An edited helper re-records instead of reading as a false change; the subject edited
    to compensate it exactly (a power of 2) is then caught against that recording."""
    repo = _copy(helped, tmp_path)
    repo.write("tests/models.py", "def build(x):\n    return x * 2\n")
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "recording 4 of 4 cases" in output(done)
    assert "4 identical" in output(done)
    subject = (repo.path / "subj" / "__init__.py").read_text()
    repo.write("subj/__init__.py", subject.replace("linear(x,", "linear(x / 2,"))
    done = repo.invoke("test")
    assert done.returncode == 1, output(done)
    assert "CHANGED tests/test_helped.py::test_built" in output(done)


def test_a_lazy_helper_and_a_data_file_of_the_tests_are_in_the_key(helped: Repo,
                                                                   tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("tests/lazy.py", "FACTOR = 2.0\n")
    repo.write("tests/data/in.json", '{"shift": 1.0}\n')
    done = repo.invoke("test", "--no-gen")
    assert done.returncode == 2, output(done)
    assert "4 of 4 cases have no valid reference" in done.stderr
    assert ("tests/test_helped.py::test_lazy: test code or environment it uses changed: "
            "tests/data/in.json, tests/lazy.py") in done.stderr


def test_plain_pytest_names_the_changed_helper(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("tests/models.py", "def build(x):\n    return x + 1\n")
    done = repo.pytest("-p", "no:xdist", "--regression-no-gen", "tests")
    assert done.returncode == 1, output(done)
    assert ("test code or environment it uses changed since the reference was recorded "
            "(tests/models.py); run `invoke gen` to record it again") in done.stdout


def test_the_key_covers_the_test_code(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    before = repo.invoke("key", "--explain")
    repo.write("tests/models.py", "def build(x):\n    return x + 1\n")
    after = repo.invoke("key", "--explain")
    assert before.returncode == after.returncode == 0, output(before) + output(after)
    assert before.stdout.splitlines()[-1] != after.stdout.splitlines()[-1]
    assert "test code: 4 Python files under tests" in after.stdout


def test_a_test_module_imported_by_another_is_its_helper(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    other = (repo.path / "tests" / "test_other.py").read_text()
    repo.write("tests/test_other.py", other.replace("return 0.0", "return 1.0"))
    done = repo.invoke("test", "--no-gen")
    assert done.returncode == 2, output(done)
    assert ("tests/test_helped.py::test_built: test code or environment it uses changed: "
            "tests/test_other.py") in done.stderr
    assert "tests/test_other.py::test_other: its test file, a conftest.py or pytest's " \
        "settings changed" in done.stderr


@pytest.mark.slow
def test_xdist_workers_record_in_the_worktree_and_watch_it(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("subj/scale.json", '{"scale": 1.0}\n')
    repo.write("tests/test_reads.py", """\
        import json
        from pathlib import Path

        import subj


        def test_relative(regression):
            scale = json.loads(Path("subj/scale.json").read_text())["scale"]
            regression.check(subj.forward(regression.randn(2, 4)) * scale)


        def test_absolute(regression):
            data = Path(__file__).resolve().parents[1] / "subj" / "__init__.py"
            regression.check(subj.forward(regression.randn(2, 4)) * len(data.read_text()))
        """)
    repo.commit("a relative and an absolute read")
    done = repo.invoke("gen", "--reference", "HEAD", "--workers", "2")
    assert done.returncode == 2, output(done)
    assert "  subj/__init__.py (run; the subject's)\n" in done.stderr
    assert "scale.json" not in done.stderr  # relative: the worktree's copy
    assert "Traceback" not in output(done)
