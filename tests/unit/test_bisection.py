"""Tests of regression.diagnose.bisect's search over a history held in memory: each case's first
commit, ranges hidden by skipped commits, commits reused between searches, progress; and the
entry each commit is recorded in, in a real repository."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable

import torch

from regression.config.settings import Settings
from regression.diagnose.bisect import REMOVED, OutputsAtCommits, changed_cases, \
    commits_between, removal, subject_paths, suite_at
from regression.repository.gitcmd import Repository
from regression.run.types import Reference, Suite, subject_code
from regression.store.cache import Entry
from regression.diagnose.bisect import Search, steps_left
from regression.diagnose.bisect import Bisection

FAILS = None  # the case fails at that commit
UNREPRODUCED = float("nan")  # stored as nondeterministic at that commit
GONE = -1.0  # the tests do not collect the case at that commit


class History(OutputsAtCommits):
    """Each case's value at each commit (FAILS: skipped there); what was asked, in order."""

    def __init__(self, result: Bisection, values: dict[str, list[float | None]]) -> None:
        self.result, self.failed, self.values = result, result.failed, values
        self.asked: list[tuple[int, str]] = []

    def outputs(self, sha: str, cases: list[str]) -> dict[str, dict[str, object]]:
        index = self.result.commits.index(sha)
        found: dict[str, dict[str, object]] = {}
        for case in cases:
            self.asked.append((index, case))
            value = self.values[case][index]
            if value is FAILS:
                self.result.skipped.setdefault(sha, {})[case] = "failed at the reference: boom"
            elif value is UNREPRODUCED:
                self.result.nondeterministic[case] = f"at {sha}: differs from itself"
            elif value == GONE:
                found[case] = {REMOVED: "does not exist at the reference"}
            else:
                found[case] = {"out": torch.tensor([float(value)])}
        return found

    def progress(self, sha: str, cases: list[str]) -> None:
        pass


def search(values: dict[str, list[float | None]]) -> tuple[Bisection, History, list[str]]:
    """Bisect `values` (good's value is 0.0 for every case; the last commit is bad)."""
    commits = [f"{i:012x}" for i in range(1, len(next(iter(values.values()))) + 1)]
    result = Bisection("0" * 12, commits[-1], commits, sorted(values))
    at_good: dict[str, dict[str, object]] = {c: {"out": torch.tensor([0.0])} for c in values}
    at_bad: dict[str, dict[str, object]] = {
        c: {REMOVED: "gone"} if v[-1] == GONE else {"out": torch.tensor([float(v[-1] or 0)])}
        for c, v in values.items()}
    history, lines = History(result, values), []
    found = Search(result, at_good, changed_cases(at_good, at_bad))
    found.run(history, lines.append)
    result.changes = found.changes()
    return result, history, lines


def test_each_case_gets_its_own_first_commit_and_no_commit_is_asked_twice() -> None:
    result, history, lines = search({
        "a": [0, 1, 1, 1, 1, 1, 1, 1],
        "b": [0, 0, 0, 2, 2, 2, 2, 2],
        "c": [0, 0, 0, 0, 0, 0, 3, 3],
        "d": [0, 0, 0, 2, 2, 2, 2, 2],  # agrees with b: one search, one change
    })
    assert [(c.sha, sorted(c.cases), c.hidden) for c in result.changes] == [
        ("000000000002", ["a"], ()), ("000000000004", ["b", "d"], ()),
        ("000000000007", ["c"], ())]
    assert len(history.asked) == len(set(history.asked))  # each case once at each commit
    steps = [line.split()[1] for line in lines]
    assert steps == [str(n) for n in range(1, len(lines) + 1)]
    assert lines[0] == "step 1 of about 3: trying 000000000004 ..."  # 7 commits to search
    assert all(int(line.split()[4].rstrip(":")) >= int(line.split()[1]) for line in lines)


def test_a_commit_skipped_for_one_case_leaves_its_change_a_range_and_others_pinned() -> None:
    result, history, _ = search({
        "broken": [0, 0, FAILS, FAILS, FAILS, 4, 4],
        "inside": [0, 0, 0, 5, 5, 5, 5],  # changes where "broken" fails
    })
    by_case = {case: change for change in result.changes for case in change.cases}
    assert by_case["inside"].sha == "000000000004" and by_case["inside"].hidden == ()
    assert by_case["broken"].sha == "000000000006"
    assert by_case["broken"].after == "000000000002"
    assert by_case["broken"].hidden == ("000000000003", "000000000004", "000000000005")
    skipped = {sha: sorted(cases) for sha, cases in result.skipped.items()}
    assert all(cases == ["broken"] for cases in skipped.values()), skipped


def test_a_case_found_nondeterministic_on_the_way_leaves_the_search() -> None:
    result, history, _ = search({"flaky": [0, UNREPRODUCED, 0, 5], "real": [0, 0, 1, 1]})
    assert [(c.sha, list(c.cases)) for c in result.changes] == [("000000000003", ["real"])]
    assert "flaky" in result.nondeterministic
    assert [i for i, case in history.asked if case == "flaky"] == [1]  # never asked again


def test_a_case_no_longer_collected_differs_from_good_and_is_found_where_it_went() -> None:
    result, _, _ = search({"removed": [0, 0, GONE, GONE, GONE], "changed": [0, 0, 0, 1, 1]})
    found = {c.sha: {case: removal(d) for case, d in c.cases.items()} for c in result.changes}
    assert found == {"000000000003": {"removed": True}, "000000000004": {"changed": False}}
    good = {"out": torch.tensor([0.0])}
    assert changed_cases({"c": good}, {"c": {REMOVED: "x"}})["c"][0][1][0].detail == \
        "removed: not collected here"
    assert changed_cases({"c": {REMOVED: "x"}}, {"c": good})["c"][0][1][0].detail == \
        "collected again"
    assert changed_cases({"c": {REMOVED: "x"}}, {"c": {REMOVED: "y"}}) == {}
    assert not removal(changed_cases({"c": good}, {"c": {"out": torch.tensor([1.0])}})["c"])


def test_a_removal_is_reported_in_one_line_not_as_an_output() -> None:
    from regression.diagnose.bisect import Change
    from regression.diagnose.bisect_report import bisection_lines, scan_lines

    good, bad = "a" * 40, "b" * 40
    differences = changed_cases({"t.py::x": {"out": torch.tensor([0.0])}},
                                {"t.py::x": {REMOVED: "gone"}})
    result = Bisection(good, bad, [bad], ["t.py::x"],
                       changes=[Change(bad, good, dict(differences))])
    for lines in (bisection_lines(result, lambda sha: "Drop x"),
                  scan_lines(result, lambda sha: "Drop x")):
        text = "\n".join(lines)
        assert "t.py::x: removed: not collected here" in text, text
        assert "output '" not in text and "\0" not in text, text
    changed = changed_cases({"t.py::y": {"out": torch.tensor([0.0])}},
                            {"t.py::y": {"out": torch.tensor([1.0])}})
    result.changes = [Change(bad, good, {**differences, **changed})]  # x sorts first
    lines = bisection_lines(result, lambda sha: "Drop x, change y")
    assert lines[1] == "  t.py::y:" and "output 'out' is not bit-identical" in lines[2], lines
    assert "  t.py::x: removed: not collected here" in lines, lines


def teststeps_left_counts_a_stretch_two_searches_share_once() -> None:
    assert steps_left([(-1, 7, frozenset())]) == 3  # 7 untried commits
    assert steps_left([(-1, 1, frozenset()), (1, 7, frozenset())]) == 1 + 3  # apart
    assert steps_left([(0, 4, frozenset({1})), (1, 4, frozenset())]) == 2  # shared
    assert steps_left([(0, 4, frozenset({1, 2, 3}))]) == 0  # nothing left to try


def test_cases_that_fail_at_good_are_said_unjudgeable_not_skipped_at_good() -> None:
    from regression.diagnose.bisect_report import bisection_lines, scan_lines
    from regression.diagnose.bisect import Bisection

    good, bad = "1616288e30a0" + "0" * 28, "b" * 40
    result = Bisection(good, bad, [bad], ["t.py::a"], skipped={
        good: {"t.py::new": "failed at the reference: KeyError: 't2t'",
               "t.py::other": "failed at the reference: KeyError: 't2t'"}})
    for lines in (bisection_lines(result, lambda sha: "subject"),
                  scan_lines(result, lambda sha: "subject")):
        text = "\n".join(lines)
        assert "skipped 1616288e30a0" not in text, text
        assert ("cannot be judged, since they fail at good 1616288e30a0 itself: t.py::new, "
                "t.py::other: failed at the reference: KeyError: 't2t'") in text, text
    result.failed[good] = "the subject does not import"
    text = "\n".join(bisection_lines(result, lambda sha: "subject"))
    assert "no case can be judged: every case fails at good 1616288e30a0: the subject does " \
           "not import" in text, text


def test_commits_with_the_same_subject_code_share_one_recording(tmp_path: Path) -> None:
    """bisect records per commit, in the entry of that commit's subject code: a commit that
    leaves the subject alone finds the recording of the one before."""
    top = tmp_path / "repo"
    commit = _committing(top)
    first = commit("subj/__init__.py", "A = 1\n")
    docs = commit("README.md", "docs\n")
    changed = commit("subj/__init__.py", "A = 2\n")
    settings = Settings(path=top / "config.yaml", reference="HEAD", subject_packages=("subj",))
    repo = Repository(str(top), str(top / ".git"))
    reference = Reference(settings, repo, first, first, subject_code(settings, repo, first))
    suite = Suite(reference, {"t::a": "h"}, Entry(tmp_path / "cache", {
        "format": "4", "subject code": reference.code, "threads": "1"}, reference=first))
    at = {sha: suite_at(suite, sha, ["t::a"]) for sha in (first, docs, changed)}
    assert at[docs].entry.directory == at[first].entry.directory == suite.entry.directory
    assert at[changed].entry.directory != at[first].entry.directory
    assert (at[docs].reference.sha, at[docs].entry.reference) == (docs, docs)


def _committing(top: Path) -> Callable[[str, str], str]:
    """commit(name, text): write one file and commit it in the repository `top`; its sha."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True)

    def commit(name: str, text: str) -> str:
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        subprocess.run(["git", "-C", str(top), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(top), "-c", "user.email=t@example.com", "-c",
                        "user.name=T", "-c", "commit.gpgsign=false", "commit", "-q", "-m", name],
                       check=True)
        return subprocess.run(["git", "-C", str(top), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    return commit


def _reference(top: Path, packages: tuple[str, ...], sha: str, folder: str = "src"
               ) -> Reference:
    settings = Settings(path=top / "config.yaml", reference="HEAD", subject_path=folder,
                        subject_packages=packages)
    repo = Repository(str(top), str(top / ".git"))
    return Reference(settings, repo, sha, sha, subject_code(settings, repo, sha))


def test_bisect_tries_the_commits_that_change_the_subject_code_as_the_key_takes_it(
        tmp_path: Path) -> None:
    """The commits bisect tries are those that change what the key holds of the subject: a
    package's folder, else its module file, else (an extension module, built from sources
    beside it) the whole subject folder, as each commit and its first parent have it (a
    module that became a package)."""
    top = tmp_path / "repo"
    commit = _committing(top)
    good = commit("src/native.c", "int a = 1;\n")
    commit("docs/index.md", "docs\n")
    source = commit("src/native.c", "int a = 2;\n")
    module = commit("src/one.py", "B = 1\n")
    assert commits_between(_reference(top, ("native",), good), good, module) == [source, module]
    package = commit("src/one/__init__.py", "B = 2\n")
    commit("docs/index.md", "more docs\n")
    bad = commit("src/one/extra.py", "C = 3\n")
    # at good, `one` is neither: the whole folder, where the source of native changed too
    assert commits_between(_reference(top, ("one",), good), good, bad) == [source, module,
                                                                          package, bad]
    assert commits_between(_reference(top, ("one",), good), module, bad) == [package, bad]
    assert subject_paths(_reference(top, ("one",), good), good, bad) == ["src", "src/one"]
    assert subject_paths(_reference(top, ("one",), good), module, bad) == ["src/one.py",
                                                                           "src/one"]


def test_bisect_tries_a_commit_that_changes_the_key_in_a_shape_held_at_neither_end(
        tmp_path: Path) -> None:
    """A module at good and at bad that was a package in between: the commits that change
    the package are tried too (the key took its folder there); the subject folder's name is
    taken literally, never as a glob or a pathspec's magic."""
    top = tmp_path / "repo"
    commit = _committing(top)
    good = commit("src/one.py", "A = 1\n")
    subprocess.run(["git", "-C", str(top), "rm", "-q", "src/one.py"], check=True)
    package = commit("src/one/__init__.py", "A = 1\n")
    inside = commit("src/one/__init__.py", "A = 2\n")
    subprocess.run(["git", "-C", str(top), "rm", "-rq", "src/one"], check=True)
    back = commit("src/one.py", "A = 2\n")
    bad = commit("docs/index.md", "docs\n")
    assert commits_between(_reference(top, ("one",), good), good, bad) == [package, inside,
                                                                          back, bad]
    top = tmp_path / "magic"
    commit = _committing(top)
    good = commit(":src/one.py", "A = 1\n")
    commit("src/one.py", "A = 1\n")  # not the subject: ":src" is no pathspec magic
    changed = commit(":src/one.py", "A = 2\n")
    bad = commit("docs/index.md", "docs\n")
    assert commits_between(_reference(top, ("one",), good, ":src"), good, bad) == [changed,
                                                                                  bad]
