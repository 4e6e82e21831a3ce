"""Changes made on purpose: `invoke accept` declares them in regression-changes.yaml, and
`invoke test` passes them as declared, in a real repository, end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import CONFIG, Repo, output, tagged_repo

from regression.declarations import FILE

SUBJECT = """\
import torch

SCALE = {scale}
SHIFT = {shift}


def forward(x: torch.Tensor) -> torch.Tensor:
    weight = torch.linspace(-1.0, 1.0, 3 * x.shape[-1]).reshape(3, x.shape[-1])
    return torch.tanh(torch.nn.functional.linear(x, weight)) * SCALE


def shifted(x: torch.Tensor) -> torch.Tensor:
    return x + SHIFT
"""

TESTS = """\
import subj


def test_forward(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")


def test_shift(regression):
    regression.check(subj.shifted(regression.randn(2, 4)), name="out")
"""

FORWARD = "tests/test_subj.py::test_forward"
SHIFT = "tests/test_subj.py::test_shift"
ROUNDING = "1.0000001"  # one ULP or so of each output: rounding-level
BEHAVIOUR = "1.01"


def two_case_repo(path: Path, cache: Path, tests: str = TESTS) -> Repo:
    return tagged_repo(path, cache, {"config.yaml": CONFIG.format(reference="v1", path="."),
                                     "subj/__init__.py": SUBJECT.format(scale="1.0", shift="0.0"),
                                     "tests/test_subj.py": tests})


@pytest.mark.slow  # the whole life cycle: eight runs
def test_a_declared_change_passes_with_its_reason_until_it_grows_or_the_reference_holds_it(
        tmp_path: Path) -> None:
    repo = two_case_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("subj/__init__.py", SUBJECT.format(scale=ROUNDING, shift="0.0"))
    done = repo.invoke("accept", "--reason", "scale by 1 + 1e-7")
    assert done.returncode == 0, output(done)
    assert "declared 1 changed case against" in done.stdout
    entries = yaml.safe_load((repo.path / FILE).read_text())["changes"]
    assert entries == [{"case": FORWARD, "outputs": ["out"], "size": "rounding-level",
                        "reason": "scale by 1 + 1e-7",
                        "reference": repo.git("rev-parse", "v1")}]

    summary = tmp_path / "summary.md"
    done = repo.invoke("test", env={"GITHUB_STEP_SUMMARY": str(summary),
                                    "GITHUB_ACTIONS": "true"})
    assert done.returncode == 0, output(done)
    assert f"DECLARED {FORWARD}: scale by 1 + 1e-7" in done.stdout
    assert "2 cases: 1 identical, 0 changed, 0 not in reference, 0 errors, 1 declared" \
        in done.stdout
    assert "::notice file=tests/test_subj.py,line=4," in done.stdout
    assert f"| `{FORWARD}` | rounding-level | scale by 1 + 1e-7 |" in summary.read_text()

    repo.write("subj/__init__.py", SUBJECT.format(scale=ROUNDING, shift="1.0"))
    done = repo.invoke("test")  # a second change, not declared
    assert done.returncode == 1, output(done)
    assert f"CHANGED {SHIFT}" in done.stdout and f"DECLARED {FORWARD}" in done.stdout

    repo.write("subj/__init__.py", SUBJECT.format(scale=BEHAVIOUR, shift="0.0"))
    done = repo.invoke("test")  # the declared change grew
    assert done.returncode == 1, output(done)
    assert f"CHANGED {FORWARD}" in done.stdout
    assert f"declared rounding-level in {FILE} (line 7), but now behaviour" in done.stdout

    repo.write("subj/__init__.py", SUBJECT.format(scale=ROUNDING, shift="0.0"))
    repo.commit("scale")  # the change and its declaration, merged
    repo.git("tag", "v2")
    repo.write("config.yaml", CONFIG.format(reference="v2", path="."))
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert f"STALE {FORWARD} ({FILE} line 7)" in done.stdout
    assert "`invoke accept --prune` drops them" in done.stdout
    done = repo.invoke("accept", "--prune")
    assert done.returncode == 0, output(done)
    assert f"dropped {FORWARD}: no longer differs" in done.stdout
    assert not (repo.path / FILE).exists()


def test_a_declaration_never_excuses_a_case_that_fails_otherwise(tmp_path: Path) -> None:
    """The declared case fails after its check, only in the check run (BREAK): the reference
    recorded it, its check matches the declaration, and the run fails on its change."""
    breaks = TESTS.replace('name="out")\n\n\ndef test_shift',
                           'name="out")\n    assert not os.environ.get("BREAK"), "broken"\n\n\n'
                           'def test_shift')
    repo = two_case_repo(tmp_path / "repo", tmp_path / "cache", "import os\n" + breaks)
    repo.write("subj/__init__.py", SUBJECT.format(scale=ROUNDING, shift="0.0"))
    assert repo.invoke("accept", "--reason", "r").returncode == 0
    declared = repo.invoke("test")
    assert declared.returncode == 0, output(declared)
    assert f"DECLARED {FORWARD}: r" in declared.stdout, output(declared)
    done = repo.invoke("test", env={"BREAK": "1"})
    assert done.returncode == 1, output(done)
    assert f"DECLARED {FORWARD}" not in done.stdout
    assert f"CHANGED {FORWARD}: 'out'" in done.stdout, output(done)  # its change, unexcused
    assert "2 cases: 1 identical, 1 changed, 0 not in reference, 0 errors" in done.stdout
    assert "AssertionError: broken" in done.stdout
    assert "recording" not in output(done)  # the reference's records, the case's included


def test_a_declared_case_that_does_not_exist_stops_the_run(tmp_path: Path) -> None:
    repo = two_case_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write(FILE, f"""\
        changes:
          - case: "tests/test_subj.py::test_gone"
            outputs: ["out"]
            size: behaviour
            reason: "r"
            reference: {repo.git("rev-parse", "v1")}
        """)
    done = repo.invoke("test")
    assert done.returncode == 2, output(done)
    assert f"{FILE}:2: case: declares tests/test_subj.py::test_gone, which is no " \
        "regression case" in done.stderr
    assert "Traceback" not in output(done)


def test_a_malformed_declaration_is_refused_before_anything_runs(tmp_path: Path) -> None:
    repo = two_case_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write(FILE, f"""\
        changes:
          - case: "{FORWARD}"
            outputs: ["out"]
            size: large
            reason: "r"
            reference: abc
        """)
    done = repo.invoke("test")
    assert done.returncode == 2, output(done)
    assert f"{FILE}:4: changes[0].size: 'large' is no size; give rounding-level, " \
        "behaviour or removed" in done.stderr
    assert not (tmp_path / "cache").exists()  # refused before any recording


def test_accept_needs_a_reason(subject_repo: Repo) -> None:
    done = subject_repo.invoke("accept")
    assert done.returncode == 2
    assert "--reason is required" in done.stderr


@pytest.mark.slow
def test_xdist_workers_and_shards_judge_by_the_same_declarations(tmp_path: Path) -> None:
    repo = two_case_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("subj/__init__.py", SUBJECT.format(scale=ROUNDING, shift="0.0"))
    assert repo.invoke("accept", "--reason", "r").returncode == 0
    done = repo.invoke("test", "--workers", "2")
    assert done.returncode == 0, output(done)
    assert done.stdout.count(f"DECLARED {FORWARD}: r") == 1  # once, from the controller

    repo.commit("scale")
    repo.git("tag", "v2")
    repo.write("config.yaml", CONFIG.format(reference="v2", path="."))
    stale = []
    for shard in ("1/2", "2/2"):
        done = repo.invoke("test", "--shard", shard)
        assert done.returncode == 0, output(done)
        stale.append(f"STALE {FORWARD}" in done.stdout)
    assert sorted(stale) == [False, True]  # stale on its own shard only
