"""`invoke key --explain`'s words: counts in the singular where they are one, a file named in
`tests` called a file."""

from __future__ import annotations

from pathlib import Path

from regression.cli.tasks import key_code_line, reference_line


def test_a_test_file_in_tests_is_called_a_file_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_regression_timm.py").write_text("")
    line = key_code_line(tmp_path, ["tests/test_regression_timm.py"], 0)
    assert line == ("test code: the file tests/test_regression_timm.py, hashed as the harness "
                    "of its cases (above)")
    assert "Python files under" not in line


def test_folders_count_their_python_files_in_the_right_number(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "extra.py").write_text("")
    assert key_code_line(tmp_path, ["tests"], 1).startswith(
        "test code: 1 Python file under tests (the helpers")
    both = key_code_line(tmp_path, ["tests", "extra.py"], 4)
    assert both.startswith("test code: 4 Python files under tests (the helpers")
    assert both.endswith("; the file extra.py, hashed as the harness of its cases (above)")


def test_the_reference_line_names_the_commit_and_says_it_is_not_in_the_key() -> None:
    sha = "a" * 40
    assert reference_line(sha, "HEAD") == (
        f"reference: commit {sha} (HEAD), where the subject code was read; not in the key: a "
        "commit that leaves the subject alone shares this reference")
    assert reference_line(sha, sha).startswith(f"reference: commit {sha}, where")
