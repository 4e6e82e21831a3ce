"""Incremental generation, cache management tasks and the CI key, through invoke."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import SUBJECT, Repo, output

SECOND_FILE = """\
import subj


def test_double(regression):
    regression.check(subj.forward(regression.randn(3, 4)) * 2, name="double")
"""


def _stamps(repo: Repo) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in repo.cache.rglob("cases/*")}


@pytest.mark.slow
def test_editing_one_test_file_rerecords_its_cases_only(subject_repo: Repo) -> None:
    subject_repo.write("tests/test_second.py", SECOND_FILE)
    assert subject_repo.invoke("gen").returncode == 0
    before = _stamps(subject_repo)
    subject_repo.write("tests/test_second.py", SECOND_FILE + "\n# an edit\n")
    done = subject_repo.invoke("gen")
    assert "recording 1 of 2 cases" in done.stdout, output(done)
    after = _stamps(subject_repo)
    unchanged = [p for p in before if p in after and after[p] == before[p]]
    assert len(unchanged) == 2  # test_subj.py's record and tensors
    forced = subject_repo.invoke("gen", "--force")
    assert "recording 2 of 2 cases" in forced.stdout, output(forced)


@pytest.mark.slow
def test_key_is_one_line_for_ci_and_follows_the_cpu_capability(subject_repo: Repo,
                                                               tmp_path: Path) -> None:
    done = subject_repo.invoke("key")
    assert done.returncode == 0, output(done)
    (key,) = done.stdout.splitlines()
    assert key.startswith("torch-regression-") and "," not in key and len(key) <= 512
    github = tmp_path / "github_output"
    github.write_text("earlier=1\n")
    with_output = subject_repo.invoke("key", "--github-output",
                                      env={"GITHUB_OUTPUT": str(github)})
    assert with_output.stdout.strip() == key
    # and the prefix restore-keys matches: the key without its test code's 16 digits
    assert github.read_text() == f"earlier=1\nkey={key}\nrestore-key={key[:-16]}\n"
    assert key[:-16].endswith("-") and key[-16:].isalnum()
    other = subject_repo.invoke("key", "--explain", env={"ATEN_CPU_CAPABILITY": "default"})
    assert other.stdout.splitlines()[-1] != key
    assert "kernel variables: ATEN_CPU_CAPABILITY=default" in other.stdout


def test_github_output_outside_actions_is_a_clear_error(subject_repo: Repo) -> None:
    done = subject_repo.invoke("key", "--github-output")
    assert done.returncode == 2
    assert "$GITHUB_OUTPUT" in done.stderr


@pytest.mark.slow
def test_list_prune_and_clear(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.0") + "# a comment\n")
    subject_repo.commit("the subject changes: its own entry")
    assert subject_repo.invoke("gen", "--reference", "HEAD").returncode == 0
    listing = subject_repo.invoke("cache.list").stdout.splitlines()
    assert len(listing) == 4, listing
    tag_sha = subject_repo.git("rev-parse", "v1^{commit}")[:12]
    assert [line[:14] for line in listing[1:3] if line.startswith("*")] == [f"* {tag_sha}"]
    assert listing[3] == f"* config.yaml's reference v1 ({tag_sha})"
    entries = [p for p in subject_repo.cache.iterdir() if p.is_dir()]
    oldest = min(entries, key=lambda p: (p / "last-used").stat().st_mtime)
    os.utime(oldest / "last-used", (1, 1))
    pruned = subject_repo.invoke("cache.prune", "--older-than", "30d")
    assert "removed 1 entries" in pruned.stdout, output(pruned)
    assert not oldest.exists()
    bad = subject_repo.invoke("cache.prune", "--max-size", "lots")
    assert bad.returncode == 2 and "--max-size 'lots'" in bad.stderr
    assert "removed 1 entries" in subject_repo.invoke("cache.prune", "--max-size", "0").stdout
    assert subject_repo.invoke("gen").returncode == 0
    assert "removed 1 entries" in subject_repo.invoke("cache.clear").stdout
    assert "no cache entries" in subject_repo.invoke("cache.list").stdout


def _user_folder(parent: Path) -> Path:
    """A folder of the user's named like a cache entry (e.g. by an MD5 sum)."""
    folder = parent / ("0123456789abcdef" * 2)
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("the user's\n")
    return folder


def test_cache_variable_naming_the_project_is_refused(subject_repo: Repo) -> None:
    folder = _user_folder(subject_repo.path)
    for value in (str(subject_repo.path), ".", "/"):
        for args in (["cache.clear"], ["cache.prune", "--max-size", "0"], ["gen"]):
            done = subject_repo.invoke(*args, env={"REGRESSION_CACHE_DIR": value})
            assert done.returncode == 2, output(done)
            assert f"$REGRESSION_CACHE_DIR: {value!r} is the project folder or a folder " \
                   "above it" in done.stderr
            assert "Traceback" not in output(done)
    assert (folder / "data.txt").read_text() == "the user's\n"


@pytest.mark.slow
def test_clear_and_prune_leave_what_is_not_an_entry_alone(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo
    folder = _user_folder(subject_repo.cache)
    for args in (["cache.prune", "--max-size", "0"], ["cache.clear"]):
        assert subject_repo.invoke("gen").returncode == 0
        done = subject_repo.invoke(*args)
        assert done.returncode == 0, output(done)
        assert "removed 1 entries" in done.stdout
        assert f"left alone, not provably a cache entry: {folder}: " in done.stdout
        assert (folder / "data.txt").read_text() == "the user's\n"
    assert "NOT AN ENTRY, left alone" in subject_repo.invoke("cache.list").stdout


@pytest.mark.slow
def test_gen_never_writes_a_gitignore_into_an_existing_folder(subject_repo: Repo) -> None:
    subject_repo.write("zoo/model.py", "WIDTH = 3\n")
    subject_repo.commit("a zoo folder")
    done = subject_repo.invoke("gen", env={"REGRESSION_CACHE_DIR": "zoo"})
    assert done.returncode == 0, output(done)
    assert not (subject_repo.path / "zoo" / ".gitignore").exists()
    status = subject_repo.git("status", "--porcelain", "--untracked-files=all")
    assert "?? zoo/" in status  # what the cache wrote there stays visible to git
    subject_repo.write("zoo/new_model.py", "WIDTH = 4\n")
    assert "?? zoo/new_model.py" in subject_repo.git("status", "--porcelain")


def test_verify_advice_works_for_leftovers_and_names_what_clear_leaves(
        recorded_subject_repo: Repo) -> None:
    repo = recorded_subject_repo
    (entry,) = [p for p in repo.cache.iterdir() if p.is_dir() and (p / "cases").is_dir()]
    trash = repo.cache / f".trash-{entry.name}-0123abcd"  # a removal killed half-way
    (entry / "entry.json").unlink()
    entry.rename(trash)
    done = repo.invoke("cache.verify")
    assert done.returncode == 1 and f"FAULT {trash}/entry.json is missing" in done.stdout
    assert "`invoke cache.clear` empties the cache" in output(done)
    cleared = repo.invoke("cache.clear")
    assert cleared.returncode == 0 and f"removed {trash}" in cleared.stdout, output(cleared)
    assert not trash.exists()

    folder = _user_folder(repo.cache)
    done = repo.invoke("cache.verify")
    assert done.returncode == 1, output(done)
    assert "`invoke cache.clear` removes every entry and leftover, but leaves what is not " \
           f"provably the cache's: {folder}. Look inside, then remove it yourself " \
           f"(`rm -r {folder}`)" in output(done)
    assert "empties the cache" not in output(done)
