"""The harness is the working tree's in both runs: a data file under the test folders reads
the working tree's bytes at the reference as in the check, however a test names it (relative
to the project's root, to `__file__`, through a fixture), cold or warm, recorded beside the
check or first."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import CONFIG, SUBJECT, Repo, output, tagged_repo

TESTS = """\
import json
import shutil
from pathlib import Path

import subj


def test_root_relative(regression):
    scale = json.load(open("tests/data/in.json"))["scale"]
    regression.check(subj.forward(regression.randn(2, 4)) * scale)


def test_by_file(regression):
    scale = json.loads((Path(__file__).parent / "data" / "in.json").read_text())["scale"]
    regression.check(subj.forward(regression.randn(2, 4)) * scale)


def test_by_fixture(regression, data_scale):
    regression.check(subj.forward(regression.randn(2, 4)) * data_scale)
"""

CONFTEST = """\
import json
import shutil
from pathlib import Path

import pytest


@pytest.fixture
def data_scale():
    return json.loads(Path("tests/data/in.json").read_text())["scale"]
"""


def _repo(path: Path, cache: Path, beside: bool = True) -> Repo:
    config = CONFIG.format(reference="v1", path=".")
    repo = tagged_repo(path, cache, {
        "config.yaml": config + ("" if beside else "record_beside_check: false\n"),
        "subj/__init__.py": SUBJECT.format(scale="1.0"), "tests/test_data.py": TESTS,
        "tests/conftest.py": CONFTEST, "tests/data/in.json": '{"scale": 1.0}\n'})
    return repo


def _halve_data_double_subject(repo: Repo) -> None:
    """Exact in floating point: the product is the same, so a run that read the reference's
    data at the reference would call every case identical."""
    repo.write("tests/data/in.json", '{"scale": 0.5}\n')
    repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))


@pytest.mark.parametrize("beside", [True, False], ids=["beside", "first"])
def test_data_halved_and_subject_doubled_fails_cold(tmp_path: Path, beside: bool) -> None:
    repo = _repo(tmp_path / "repo", tmp_path / "cache", beside)
    _halve_data_double_subject(repo)
    before = repo.snapshot()
    done = repo.invoke("test")
    assert done.returncode == 1, output(done)
    assert "3 changed" in output(done), output(done)
    assert repo.snapshot() == before  # the links into the tree changed nothing in it
    assert (repo.path / "tests" / "data" / "in.json").read_text() == '{"scale": 0.5}\n'


@pytest.fixture(scope="module")
def recorded_data(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """`_repo` whose reference `invoke gen` recorded, once per module: copy it to change it."""
    root = tmp_path_factory.mktemp("recorded-data")
    repo = _repo(root / "repo", root / "cache")
    first = repo.invoke("gen")
    assert first.returncode == 0, output(first)
    return repo


@pytest.fixture
def warm_data(recorded_data: Repo, tmp_path: Path) -> Repo:
    """A copy of `recorded_data`, repository and cache, for a test to change at will."""
    shutil.copytree(recorded_data.path, tmp_path / "repo", symlinks=True)
    shutil.copytree(recorded_data.cache, tmp_path / "cache", symlinks=True)
    return Repo(tmp_path / "repo", tmp_path / "cache")


@pytest.mark.slow
def test_data_halved_and_subject_doubled_fails_warm(warm_data: Repo) -> None:
    repo = warm_data  # `invoke gen` recorded v1
    _halve_data_double_subject(repo)
    done = repo.invoke("test")
    assert done.returncode == 1, output(done)
    assert "3 changed" in output(done), output(done)
    again = repo.invoke("test")  # the references recorded with the new data are kept
    assert again.returncode == 1 and "3 changed" in output(again), output(again)


@pytest.mark.slow
def test_data_edited_alone_is_no_change_of_the_subject(warm_data: Repo) -> None:
    repo = warm_data  # `invoke gen` recorded v1
    repo.write("tests/data/in.json", '{"scale": 0.5}\n')
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "3 identical" in output(done), output(done)
    assert "recording 3 of 3 cases" in output(done)  # the data is each case's helper


def test_a_data_file_only_the_working_tree_has_is_read_at_the_reference(tmp_path: Path
                                                                        ) -> None:
    """A new data file, untracked: the reference's worktree has none of its own."""
    repo = _repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_new.py", """\
        import subj


        def test_new_data(regression):
            scale = float(open("tests/data/new.txt").read())
            regression.check(subj.forward(regression.randn(2, 4)) * scale)
        """)
    repo.write("tests/data/new.txt", "0.5\n")
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "4 identical" in output(done), output(done)


SETTING_CONFTEST = """\
import pytest


def pytest_addoption(parser):
    parser.addini("input_scale", "what the inputs are scaled by")


@pytest.fixture
def input_scale(request):
    return float(request.config.getini("input_scale"))
"""

SETTING_TESTS = """\
import subj


def test_scaled(regression, input_scale):
    regression.check(subj.forward(regression.randn(2, 4) * input_scale))
"""


def test_pytest_s_settings_are_harness_a_change_records_again(tmp_path: Path) -> None:
    """A value the tests read from pytest's settings (`getini`, as pytest-env's `env =`
    lines are read) shapes the outputs as the test code does: a change of it, in the
    settings file or as an `-o` override, records the reference again with it, as an edit of
    a conftest.py does (before: the stale reference, and a change reported)."""
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": SUBJECT.format(scale="1.0"), "tests/conftest.py": SETTING_CONFTEST,
        "tests/test_scaled.py": SETTING_TESTS,
        "pyproject.toml": "[tool.pytest.ini_options]\ninput_scale = \"1\"\n"})
    first = repo.invoke("test")
    assert first.returncode == 0 and "1 identical" in first.stdout, output(first)
    repo.write("pyproject.toml", "[tool.pytest.ini_options]\ninput_scale = \"3\"\n")
    changed = repo.invoke("test")
    assert changed.returncode == 0, output(changed)
    assert "recording 1 of 1 cases" in changed.stdout and "1 identical" in changed.stdout, \
        output(changed)
    overridden = repo.invoke("test", env={"PYTEST_ADDOPTS": "-o input_scale=5"})
    assert overridden.returncode == 0, output(overridden)
    assert "recording 1 of 1 cases" in overridden.stdout, output(overridden)
    assert "recording 1 of 1 cases" in repo.invoke("test").stdout  # 3 again, not 5
    again = repo.invoke("test")
    assert "reference up to date" in again.stdout and "1 identical" in again.stdout, \
        output(again)
