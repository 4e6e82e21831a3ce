"""Tests of regression.environment.harness: which files make up a case's harness, and their
digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.environment.fingerprint import file_digest
from regression.environment.harness import (HarnessDigests, changed_helpers, extra_harness_files,
                                            harness_files, helper_digests, python_files_under)
from regression.environment.start import keep_start_environment


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """outer/conftest.py above rootdir; rootdir with conftests at several depths."""
    root = tmp_path / "outer" / "project"
    (root / "tests" / "models").mkdir(parents=True)
    (root / "tests" / "other").mkdir()
    (tmp_path / "outer" / "conftest.py").write_text("# above rootdir\n")
    (root / "conftest.py").write_text("# rootdir\n")
    (root / "tests" / "conftest.py").write_text("# tests\n")
    (root / "tests" / "models" / "test_net.py").write_text("def test(): pass\n")
    (root / "tests" / "other" / "conftest.py").write_text("# sibling\n")
    (root / "tests" / "other" / "test_x.py").write_text("def test(): pass\n")
    return root


def test_harness_is_the_test_file_and_conftests_up_to_rootdir(tree: Path) -> None:
    files = harness_files(tree / "tests" / "models" / "test_net.py", tree)
    assert files == [tree / "tests" / "models" / "test_net.py",
                     tree / "tests" / "conftest.py",
                     tree / "conftest.py"]


def test_harness_excludes_conftests_above_rootdir_and_in_siblings(tree: Path) -> None:
    files = harness_files(tree / "tests" / "models" / "test_net.py", tree)
    assert tree.parent / "conftest.py" not in files
    assert tree / "tests" / "other" / "conftest.py" not in files


def test_harness_includes_a_conftest_next_to_the_test(tree: Path) -> None:
    files = harness_files(tree / "tests" / "other" / "test_x.py", tree)
    assert tree / "tests" / "other" / "conftest.py" in files


def test_harness_includes_extra_files(tree: Path) -> None:
    extra = tree / "data.json"
    extra.write_text("{}")
    files = harness_files(tree / "tests" / "models" / "test_net.py", tree, [extra])
    assert extra in files


def test_test_file_outside_rootdir_takes_only_its_own_folder(tree: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "conftest.py").write_text("")
    (elsewhere / "test_y.py").write_text("")
    files = harness_files(elsewhere / "test_y.py", tree)
    assert files == [elsewhere / "test_y.py", elsewhere / "conftest.py"]


def test_extra_harness_files_expands_globs_to_files_only(tree: Path) -> None:
    (tree / "data").mkdir()
    (tree / "data" / "b.json").write_text("{}")
    (tree / "data" / "a.json").write_text("{}")
    (tree / "data" / "dir.json").mkdir()
    assert extra_harness_files(tree, ["data/*.json", "data/a.*"]) == [
        tree / "data" / "a.json", tree / "data" / "b.json"]


def test_digest_changes_when_a_conftest_changes(tree: Path) -> None:
    test_file = tree / "tests" / "models" / "test_net.py"
    before = HarnessDigests(tree).of(test_file)
    (tree / "tests" / "conftest.py").write_text("# tests, edited\n")
    assert HarnessDigests(tree).of(test_file) != before


def test_digest_changes_with_pytest_s_settings(tree: Path) -> None:
    test_file = tree / "tests" / "models" / "test_net.py"
    plain = HarnessDigests(tree).of(test_file)
    assert HarnessDigests(tree, settings="").of(test_file) == plain
    one = HarnessDigests(tree, settings='{"input_scale": "1"}').of(test_file)
    assert one != plain
    assert HarnessDigests(tree, settings='{"input_scale": "3"}').of(test_file) not in (one, plain)


def test_digest_ignores_a_conftest_above_rootdir(tree: Path) -> None:
    test_file = tree / "tests" / "models" / "test_net.py"
    before = HarnessDigests(tree).of(test_file)
    (tree.parent / "conftest.py").write_text("# edited above rootdir\n")
    (tree / "tests" / "other" / "conftest.py").write_text("# edited sibling\n")
    assert HarnessDigests(tree).of(test_file) == before


def test_digest_changes_with_an_extra_file(tree: Path) -> None:
    test_file = tree / "tests" / "models" / "test_net.py"
    extra = tree / "data.json"
    extra.write_text("{}")
    before = HarnessDigests(tree, [extra]).of(test_file)
    extra.write_text("{\"a\": 1}")
    assert HarnessDigests(tree, [extra]).of(test_file) != before


def test_digests_of_test_files_with_other_conftests_differ(tree: Path) -> None:
    digests = HarnessDigests(tree)
    assert digests.of(tree / "tests" / "models" / "test_net.py") != \
        digests.of(tree / "tests" / "other" / "test_x.py")


def test_helpers_are_named_relative_to_the_root_with_their_digest(tree: Path) -> None:
    helper = tree / "tests" / "models" / "build.py"
    helper.write_text("SIZE = 1\n")
    digests = helper_digests(tree, [helper, tree / "tests" / "gone.py"])
    assert digests == {"tests/models/build.py": file_digest(helper),
                       "tests/gone.py": "<missing>"}
    assert changed_helpers(tree, digests) == []


def test_an_edited_or_removed_helper_is_changed(tree: Path) -> None:
    (tree / "tests" / "a.py").write_text("A = 1\n")
    (tree / "tests" / "b.py").write_text("B = 1\n")
    digests = helper_digests(tree, [tree / "tests" / "a.py", tree / "tests" / "b.py"])
    (tree / "tests" / "a.py").write_text("A = 2\n")
    (tree / "tests" / "b.py").unlink()
    assert changed_helpers(tree, digests) == ["tests/a.py", "tests/b.py"]


def test_the_key_s_test_code_is_every_python_file_under_the_test_folders(tree: Path) -> None:
    (tree / "tests" / "__pycache__").mkdir()
    (tree / "tests" / "__pycache__" / "stale.py").write_text("")
    (tree / "tests" / ".hidden").mkdir()
    (tree / "tests" / ".hidden" / "x.py").write_text("")
    (tree / "tests" / "venv").mkdir()
    (tree / "tests" / "venv" / "pyvenv.cfg").write_text("")
    (tree / "tests" / "venv" / "site.py").write_text("")
    (tree / "tests" / "data.json").write_text("{}")
    found = python_files_under(tree, ["tests"])
    assert [p.relative_to(tree).as_posix() for p in found] == [
        "tests/conftest.py", "tests/models/test_net.py", "tests/other/conftest.py",
        "tests/other/test_x.py"]


def test_helper_digests_are_read_once_per_run_for_every_case_that_shares_them(
        tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    helper = tmp_path / "tests" / "models.py"
    helper.write_text("SCALE = 1\n")
    stored = helper_digests(tmp_path, [helper])
    known: dict[Path, str] = {}
    assert changed_helpers(tmp_path, stored, known) == []
    helper.write_text("SCALE = 2\n")  # within one run, the digest read first stands
    assert changed_helpers(tmp_path, stored, known) == []
    assert changed_helpers(tmp_path, stored) == ["tests/models.py"]  # a new run reads again


def test_a_variable_read_is_a_helper_by_its_value_and_changes_with_it(
        tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBJ_SCALE", "2")
    monkeypatch.delenv("SUBJ_UNSET", raising=False)
    keep_start_environment()  # as a run starts
    monkeypatch.setenv("SUBJ_UNSET", "set as the run went on: not what it started with")
    (tree / "$odd.py").write_text("x = 1\n")  # a file named like a variable stays a file
    helpers = helper_digests(tree, [tree / "$odd.py"],
                             ["SUBJ_SCALE", "SUBJ_UNSET", "REGRESSION_JOB", "PYTEST_CURRENT_TEST",
                              "GIT_DIR", "MKL_CBWR", "PWD"])
    assert sorted(helpers) == ["$SUBJ_SCALE", "$SUBJ_UNSET", "./$odd.py"]
    assert helpers["$SUBJ_UNSET"] == "<unset>"
    assert changed_helpers(tree, helpers) == []
    monkeypatch.setenv("SUBJ_SCALE", "3")
    assert changed_helpers(tree, helpers) == []  # not so as this run started
    keep_start_environment()  # the next run
    assert changed_helpers(tree, helpers) == ["environment variable SUBJ_SCALE",
                                              "environment variable SUBJ_UNSET"]
