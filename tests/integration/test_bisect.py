"""invoke bisect on a real history: the first commit whose outputs changed, and since when."""

from __future__ import annotations

import pytest
from helpers import SUBJECT, Repo, output


def _history(repo: Repo) -> dict[str, str]:
    """After v1: a harmless edit, a commit where the subject fails to import, its fix, the
    change of behaviour, a harmless edit. Returns each commit's SHA by name."""
    shas = {}
    steps = [("harmless", SUBJECT.format(scale="1.0") + "# a comment\n"),
             ("broken", "raise ImportError('broken on purpose')\n"),
             ("fixed", SUBJECT.format(scale="1.0")),
             ("changed", SUBJECT.format(scale="1.5")),
             ("harmless again", SUBJECT.format(scale="1.5") + "# another comment\n")]
    for name, text in steps:
        repo.write("subj/__init__.py", text)
        shas[name] = repo.commit(name)
    return shas


@pytest.mark.slow
def test_bisect_names_the_commit_that_changed_the_outputs_and_skips_a_broken_one(
        subject_repo: Repo) -> None:
    shas = _history(subject_repo)
    before = subject_repo.snapshot()
    done = subject_repo.invoke("bisect", "--good", "v1", "--bad", "HEAD")
    text = output(done)
    assert done.returncode == 0, text
    # subject.path is ".": the commits that touch the subject package, not the docs commit
    assert "1 case differs between good and bad\n" in text
    assert "bisecting 5 commits that touch subj for 1 case\n" in text
    assert "first commit whose outputs differ from good " in text
    assert f"{shas['changed'][:12]} changed" in text
    assert "tests/test_subj.py::test_forward:" in text and "6 of 6 elements differ" in text
    assert f"skipped {shas['broken'][:12]} broken for every case: " in text
    assert "fails to import" in text and text.count("ImportError: broken on purpose") == 1
    recorded = int(text.split("case judged; recorded at ")[1].split()[0])
    assert recorded >= 3  # good, bad, and the commits tried between them
    assert subject_repo.snapshot() == before  # tree, index, HEAD, stash untouched
    listing = subject_repo.invoke("cache.list").stdout.splitlines()
    rows = listing[1:-2]  # under the header, above the two lines that explain the marks
    assert len(rows) >= recorded and all(line.endswith("  bisect    the reference only")
                                         for line in rows), listing
    tag_sha = subject_repo.git("rev-parse", "v1^{commit}")[:12]
    assert [line[:14] for line in rows if line.startswith("*")] == [f"* {tag_sha}"]
    assert listing[-2:] == [
        f"* config.yaml's reference v1 ({tag_sha})",
        f"{len(rows) - 1} entries made by `invoke bisect` (one per commit it recorded): "
        "`invoke cache.prune` removes them before any other entry, e.g. `invoke cache.prune "
        "--older-than 1d`"]
    again = subject_repo.invoke("bisect", "--good", "v1", "--bad", "HEAD")
    assert again.returncode == 0, output(again)
    assert f"{shas['changed'][:12]} changed" in again.stdout
    assert "recorded at 0 commits" in again.stdout  # every recording came from the cache


@pytest.mark.slow
def test_bisect_without_a_difference_and_with_bad_input(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1, good below
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.0") + "# harmless\n")
    subject_repo.commit("harmless")
    same = subject_repo.invoke("bisect", "--good", "v1", "--bad", "HEAD")
    assert same.returncode == 0, output(same)
    assert "no case's outputs differ between good" in same.stdout
    backwards = subject_repo.invoke("bisect", "--good", "HEAD", "--bad", "v1")
    assert backwards.returncode == 2
    assert "is not an ancestor of bad" in backwards.stderr
    one = subject_repo.invoke("bisect", "--good", "HEAD")  # bad defaults to HEAD
    assert one.returncode == 2 and "good and bad are the same commit" in one.stderr
    typo = subject_repo.invoke("bisect", "--good", "v9")
    assert typo.returncode == 2 and "check the spelling of 'v9'" in typo.stderr
    unknown = subject_repo.invoke("bisect", "--good", "v1", "--case", "tests/test_subj.py::nope")
    assert unknown.returncode == 2
    assert "not a regression case of this suite, here or at good: tests/test_subj.py::nope" \
        in unknown.stderr


@pytest.mark.slow
def test_scan_finds_a_change_that_a_later_commit_reverts(subject_repo: Repo) -> None:
    shas = {}
    for name, scale in (("change", "1.5"), ("revert", "1.0"), ("harmless", "1.0")):
        subject_repo.write("subj/__init__.py", SUBJECT.format(scale=scale) + f"# {name}\n")
        shas[name] = subject_repo.commit(name)
    # good and bad agree here, so a plain bisect finds nothing (as in the test above)
    scanned = subject_repo.invoke("bisect", "--good", "v1", "--scan")
    assert scanned.returncode == 0, output(scanned)
    assert "2 of 3 commits after good " in scanned.stdout  # the docs commit is not tried
    listed = [line.split()[0] for line in scanned.stdout.splitlines()
              if line.startswith("  ") and not line.startswith("    ")
              and "recording" not in line and "[" not in line]
    assert listed == [shas["change"][:12], shas["revert"][:12]], scanned.stdout
    assert "tests/test_subj.py::test_forward: 'out': float32[2, 3]: 6 of 6 elements differ" \
           in scanned.stdout
    assert "recorded at 4 commits" in scanned.stdout  # good, and the 3 commits after it
