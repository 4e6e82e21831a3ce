"""invoke bisect and --scan on histories as real libraries have them: a flaky case, a model
that fails to build at some commits, several changes in one range."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import CONFIG, Repo, output, tagged_repo

MODELS = ("a", "b", "c", "d")

TESTS = """\
import time

import pytest
import torch

import subj


@pytest.mark.parametrize("name", {models!r})
def test_model(name, regression):
    regression.check(subj.forward(name, regression.randn(2, 3)), name="out")


def test_clock(regression):  # unseeded: differs from itself in every new process
    regression.check(torch.tensor([time.perf_counter_ns()]), name="noise")
"""

FLAKY = "tests/test_models.py::test_clock"


def case(name: str) -> str:
    return f"tests/test_models.py::test_model[{name}]"


def subject(scales: dict[str, float] | None = None, broken: tuple[str, ...] = (),
            note: str = "") -> str:
    """The subject: one model per name, each a scaled tanh; `broken` ones fail to build."""
    scales = {name: 1.0 for name in MODELS} | (scales or {})
    return (f"import torch\n\nSCALES = {scales!r}\nBROKEN = {broken!r}\n\n\n"
            "def forward(name: str, x: torch.Tensor) -> torch.Tensor:\n"
            "    if name in BROKEN:\n"
            "        raise ValueError(name + ' cannot be built here')\n"
            f"    return torch.tanh(x) * SCALES[name]\n{note}")


def models_repo(path: Path) -> Repo:
    """A library of four models and a flaky case, at v1 (tagged); `subject.path` is `.`."""
    return tagged_repo(path / "repo", path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."), "subj/__init__.py": subject(),
        "tests/test_models.py": TESTS.format(models=MODELS)}, message="version 1")


def commits(repo: Repo, steps: list[tuple[str, str | None]]) -> dict[str, str]:
    """Commit each (message, subject text; None: a README edit only); each SHA by message."""
    shas = {}
    for message, text in steps:
        if text is None:
            repo.write("README.md", f"{message}\n")
        else:
            repo.write("subj/__init__.py", text)
        shas[message] = repo.commit(message)[:12]
    return shas


def listed(text: str, header: str) -> dict[str, list[str]]:
    """The commits (or ranges) listed after `header`, each with the cases listed under it."""
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.split(header, 1)[1].splitlines():
        commit = re.match(r"  (?:between [0-9a-f]{12} and )?([0-9a-f]{12}) ", line)
        if commit:
            current = commit.group(1)
            found[current] = []
        elif line.startswith("    tests/") and current:
            found[current].append(line.split(": ")[0].strip())
        elif not line.startswith("    "):
            current = ""
    return found


@pytest.fixture(scope="module")
def three_changes(tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[Repo, dict[str, str], subprocess.CompletedProcess[str]]:
    """After v1: a harmless edit, a change of model a, a README edit, a change of b, a
    harmless edit, a change of c; and the bisect of that range."""
    repo = models_repo(tmp_path_factory.mktemp("three"))
    shas = commits(repo, [
        ("harmless", subject(note="# a comment\n")),
        ("change a", subject({"a": 1.5})),
        ("docs", None),
        ("change b", subject({"a": 1.5, "b": 1.5})),
        ("harmless again", subject({"a": 1.5, "b": 1.5}, note="# a comment\n")),
        ("change c", subject({"a": 1.5, "b": 1.5, "c": 1.5})),
    ])
    done = repo.invoke("bisect", "--good", "v1")
    assert done.returncode == 0, output(done)
    return repo, shas, done


@pytest.mark.slow
def test_bisect_sets_a_flaky_case_aside_and_names_the_real_commits(
        three_changes: tuple[Repo, dict[str, str], subprocess.CompletedProcess[str]]) -> None:
    _, shas, done = three_changes
    text = output(done)
    found = listed(text, "each with the cases it changed:")
    assert shas["harmless"] not in found and FLAKY not in str(found), text
    assert found[shas["change a"]] == [case("a")], text
    aside = text.split("set aside as nondeterministic (outputs that differ from themselves "
                       "say nothing of the commits):\n", 1)[1]
    assert aside.startswith(f"  {FLAKY}: at {shas['change c']}: outputs 'noise' differed "
                            "between recording 1 and recording 2, each in its own "
                            "process\n"), text
    assert "4 cases differ between good and bad" in text
    assert "recording 4 cases again (2 of 2) to find nondeterministic ones ..." in text
    assert "3 cases judged;" in text


@pytest.mark.slow
def test_bisect_names_each_case_s_own_first_commit(
        three_changes: tuple[Repo, dict[str, str], subprocess.CompletedProcess[str]]) -> None:
    _, shas, done = three_changes
    text = output(done)
    found = listed(text, "first commits whose outputs differ from good ")
    assert found == {shas["change a"]: [case("a")], shas["change b"]: [case("b")],
                     shas["change c"]: [case("c")]}, text
    # the README commit does not touch the subject package: 5 of the 6 commits are tried
    assert "bisecting 5 commits that touch subj for 3 cases" in text
    steps = re.findall(r"^step (\d+) of about (\d+): trying [0-9a-f]{12} \.\.\.$", text,
                       flags=re.M)
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1)), text
    assert 3 <= len(steps) <= 4 and int(steps[0][1]) == 3, text  # log2 of 5 commits, first
    assert "(1 of 5)" not in text and "of 5) ..." not in text


@pytest.mark.slow
def test_scan_skips_a_commit_only_for_the_case_that_fails_there(tmp_path: Path) -> None:
    repo = models_repo(tmp_path)
    gen = repo.invoke("gen", "--repeat", "2")  # stores the flaky case as nondeterministic
    assert gen.returncode == 0 and f"nondeterministic: {FLAKY}" in gen.stdout, output(gen)
    v1 = repo.git("rev-parse", "v1^{commit}")[:12]
    shas = commits(repo, [
        ("harmless", subject(note="# a comment\n")),
        ("break d", subject(broken=("d",))),
        ("change a", subject({"a": 1.5}, broken=("d",))),
        ("fix d, scaled", subject({"a": 1.5, "d": 2.0})),
    ])
    done = repo.invoke("bisect", "--good", "v1", "--scan")
    text = output(done)
    assert done.returncode == 0, text
    found = listed(text, "outputs of the 4 cases judged:\n")  # the flaky set aside
    assert found == {shas["change a"]: [case("a")], shas["fix d, scaled"]: [case("d")]}, text
    assert (f"  between {shas['harmless']} and {shas['fix d, scaled']} fix d, scaled: 2 "
            "commits skipped for this case because it failed at the reference: ValueError: d "
            "cannot be built here (in subj/__init__.py:9)\n"
            f"    the first commit could be any of: {shas['break d']}, {shas['change a']}, "
            f"{shas['fix d, scaled']}\n") in text, text
    assert text.count("d cannot be built here") == 1, text  # each skip's reason once
    assert text.count("  skipped for 1 case (why is listed at the end)") == 2, text
    # stored as nondeterministic by gen --repeat at good: set aside, never a change
    assert f"  {FLAKY}: at {v1}: outputs 'noise' differed between recording 1 and " \
           "recording 2" in text


def _commit_at(repo: Repo, message: str, second: int, *merge: str) -> str:
    """Commit (or merge `merge`) at a set time, so that the history's order by date is the
    one written here; its SHA, short."""
    when = {"GIT_AUTHOR_DATE": f"2030-01-01T00:00:{second:02d}",
            "GIT_COMMITTER_DATE": f"2030-01-01T00:00:{second:02d}"}
    repo.git("add", "-A")
    subprocess.run(["git", *(("merge", "-q", "--no-ff", *merge) if merge else ("commit", "-q")),
                    "-m", message], cwd=repo.path, check=True, env={**os.environ, **when})
    return repo.git("rev-parse", "HEAD")[:12]


@pytest.mark.slow
def test_bisect_over_a_merge_names_the_merge_and_the_branch_to_bisect(tmp_path: Path) -> None:
    """Model a changed on a branch whose commits interleave by date with the main line's
    (each touching the subject): a search over them all by date could blame a later branch
    commit, as the main line's lack the change. The search follows the main line, names
    the merge, and says how to bisect the branch, where A1 is found."""
    repo = models_repo(tmp_path)
    repo.git("checkout", "-q", "-b", "feature")
    repo.write("subj/__init__.py", subject({"a": 2.0}))
    a1 = _commit_at(repo, "A1 changes a", 1)
    repo.git("checkout", "-q", "main")
    repo.write("subj/notes.py", "MAIN = 1\n")
    _commit_at(repo, "M1 harmless", 2)
    repo.git("checkout", "-q", "feature")
    repo.write("subj/extra.py", "EXTRA = 1\n")
    _commit_at(repo, "A2 harmless", 3)
    repo.git("checkout", "-q", "main")
    repo.write("subj/notes.py", "MAIN = 2\n")
    _commit_at(repo, "M2 harmless", 4)
    merge = _commit_at(repo, "merge feature", 5, "feature")
    done = repo.invoke("bisect", "--good", "v1", "--case", case("a"))
    text = output(done)
    assert done.returncode == 0, text
    assert "first commit whose outputs differ from good " in text, text
    assert f": {merge} merge feature\n" in text, text
    base = repo.git("rev-parse", "v1^{commit}")[:12]
    hint = f"`invoke bisect --good {base} --bad {repo.git('rev-parse', 'feature')[:12]}`"
    assert f"  a merge: the change came with the branch it merged (the search follows the " \
           f"main line); {hint} finds its commit there" in text, text
    branch = repo.invoke("bisect", "--good", base, "--bad", "feature", "--case", case("a"))
    assert branch.returncode == 0, output(branch)
    assert f"first commit whose outputs differ from good {base}: {a1} A1 changes a" \
           in output(branch), output(branch)


LISTED_TESTS = """\
import pytest

import subj


@pytest.mark.parametrize("name", subj.NAMES)
def test_model(name, regression):
    regression.check(subj.forward(name, regression.randn(2, 3)), name="out")
"""


def listed_subject(names: tuple[str, ...], scales: dict[str, float] | None = None) -> str:
    """The subject, its models listed by the library itself (the tests parametrize over it)."""
    return subject(scales) + f"\nNAMES = {names!r}\n"


@pytest.mark.slow
def test_bisect_and_scan_name_the_commit_that_removed_a_case(tmp_path: Path) -> None:
    """The tests parametrize over the library's own list: a commit drops c from it, a later
    one changes a, a last one brings c back changed. Bisect (and --case) names the commit
    that dropped c, as for a's change, and scan each one, with how c came back; before, a
    removed case was not judged at all ("nothing differs" where c alone had gone)."""
    repo = models_repo(tmp_path)
    repo.write("subj/__init__.py", listed_subject(MODELS))
    repo.write("tests/test_models.py", LISTED_TESTS)
    repo.commit("the tests take the library's list")
    repo.git("tag", "-f", "-a", "v2", "-m", "version 2")
    shas = commits(repo, [
        ("drop c", listed_subject(("a", "b", "d"))),
        ("change a", listed_subject(("a", "b", "d"), {"a": 1.5})),
        ("c back, scaled", listed_subject(MODELS, {"a": 1.5, "c": 2.0})),
    ])
    done = repo.invoke("bisect", "--good", "v2")
    text = output(done)
    assert done.returncode == 0, text
    assert "collecting the cases at good" in text, text
    found = listed(text, "each with the cases it changed:")
    assert found == {shas["drop c"]: [case("c")], shas["change a"]: [case("a")]}, text
    assert f"    {case('c')}: removed: not collected here" in text, text
    scan = repo.invoke("bisect", "--good", "v2", "--scan")
    assert listed(output(scan), "cases judged:\n") == {**found, shas["c back, scaled"]: [
        case("c")]}, output(scan)
    assert f"    {case('c')}: collected again, changed: 'out': " in output(scan), output(scan)
    one = repo.invoke("bisect", "--good", "v2", "--case", case("c"))
    assert f"differ from good {repo.git('rev-parse', 'v2^{commit}')[:12]}: {shas['drop c']} " \
           "drop c\n" in output(one), output(one)
    assert f"  {case('c')}: removed: not collected here" in output(one), output(one)
