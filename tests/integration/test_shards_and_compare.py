"""Shards on gen/test, durations, and `invoke compare` of two revisions."""

from __future__ import annotations

import json
import pytest

from helpers import SUBJECT, Repo, output

PARAMETRIZED = """\
import pytest
import subj


@pytest.mark.parametrize("n", range(6))
def test_scaled(n, regression):
    regression.check(subj.forward(regression.randn(2, 4)) * n, name="scaled")
"""


def test_shards_split_the_cases_and_an_empty_shard_passes(subject_repo: Repo) -> None:
    seen = []
    for spec in ("1/3", "2/3", "3/3"):
        done = subject_repo.invoke("test", "--shard", spec)
        assert done.returncode == 0, output(done)
        seen.append(int(done.stdout.split(f"shard {spec}: ", 1)[1].split()[0]))
    assert sorted(seen) == [0, 0, 1]  # one regression case, in exactly one shard


@pytest.mark.slow
def test_durations_are_stored_and_balance_the_shards(subject_repo: Repo) -> None:
    subject_repo.write("tests/test_many.py", PARAMETRIZED)
    unmeasured = subject_repo.invoke("shards", "--count", "2")
    assert unmeasured.returncode == 0, output(unmeasured)
    lines = unmeasured.stdout.splitlines()
    assert lines[0] == ("7 cases, no recorded durations (.regression-durations.json is "
                        "missing): shards are split by a hash of each case's name, so no time "
                        "can be estimated; `invoke test --store-durations` records them")
    assert lines[1].split() == ["shard", "cases"] and len(lines) == 4
    assert sum(int(line.split()[1]) for line in lines[2:]) == 7
    done = subject_repo.invoke("test", "--store-durations")
    assert done.returncode == 0, output(done)
    path = subject_repo.path / ".regression-durations.json"
    durations = json.loads(path.read_text())
    assert len(durations) == 7 and all(v >= 0 for v in durations.values())
    # Balancing is judged on durations given as data, never on measured ones.
    slow = "tests/test_subj.py::test_forward"
    path.write_text(json.dumps({case: 10.0 if case == slow else 1.0 for case in durations}))
    table = subject_repo.invoke("shards", "--count", "3", "--list")
    assert "7 cases, 7 with recorded durations" in table.stdout, output(table)
    assert "each shard's estimate includes 3.0 s to start" in table.stdout
    lines = table.stdout.splitlines()
    start = lines.index(f"{'shard':>5}  {'cases':>5}  {'est. seconds':>12}") + 1
    rows = [line.split() for line in lines[start:start + 3]]
    assert rows == [["1", "1", "13.00"], ["2", "3", "6.00"], ["3", "3", "6.00"]]  # + start
    # --list: each shard's cases, every case in exactly one, the slow one alone
    listed = lines[start + 3:]
    assert listed[:2] == ["shard 1/3:", f"  {slow}"]
    cases = [line.strip() for line in listed if line.startswith("  ")]
    assert sorted(cases) == sorted(durations)


@pytest.mark.slow
def test_pinned_cases_go_to_their_shard(subject_repo: Repo) -> None:
    subject_repo.write("tests/test_many.py", PARAMETRIZED)
    config = (subject_repo.path / "config.yaml").read_text()
    subject_repo.write("config.yaml", config + "shards:\n  pins:\n    '*test_scaled*': 2\n")
    done = subject_repo.invoke("key", "--shard", "2/2", "--explain")
    assert done.returncode == 0, output(done)
    assert "harness: 6 cases" in done.stdout or "harness: 7 cases" in done.stdout
    bad = subject_repo.invoke("key", "--shard", "1/1")
    assert bad.returncode == 2 and "names shard 2, but there are 1 shards" in bad.stderr


@pytest.mark.slow
def test_compare_two_revisions_in_worktrees(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1, the reference below
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    # tasks.py imports the subject from the working tree: the candidate's must still win
    subject_repo.write("tasks.py", "import subj  # noqa: F401\nfrom regression.tasks import ns\n")
    subject_repo.commit("double")
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="3.0"))  # uncommitted
    before = subject_repo.snapshot()
    changed = subject_repo.invoke("compare", "--reference", "v1", "--candidate", "HEAD")
    assert changed.returncode == 1, output(changed)
    assert "1 changed" in changed.stdout
    same = subject_repo.invoke("compare", "--reference", "v1", "--candidate", "HEAD~1")
    assert same.returncode == 0, output(same)  # the working tree's edit plays no part
    assert "1 identical" in same.stdout
    assert subject_repo.snapshot() == before


def test_compare_needs_a_known_candidate(subject_repo: Repo) -> None:
    done = subject_repo.invoke("compare", "--reference", "v1", "--candidate", "nope")
    assert done.returncode == 2
    assert "revision 'nope' does not exist" in done.stderr


@pytest.mark.slow
def test_compare_a_candidate_without_config_or_tests_uses_the_working_tree_s(
        recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1, the reference below
    # an upstream tag from before adoption: no config.yaml, no tests, another subject
    subject_repo.git("checkout", "-q", "-b", "upstream", "v1")
    subject_repo.git("rm", "-q", "-r", "config.yaml", "tests", "tasks.py")
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    subject_repo.commit("an upstream release")
    subject_repo.git("tag", "upstream-2")
    subject_repo.git("checkout", "-q", "main")
    before = subject_repo.snapshot()
    done = subject_repo.invoke("compare", "--reference", "v1", "--candidate", "upstream-2")
    assert done.returncode == 1, output(done)
    assert "1 changed" in done.stdout and "CHANGED tests/test_subj.py::test_forward" in done.stdout
    assert subject_repo.snapshot() == before
