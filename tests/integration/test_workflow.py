"""The GitHub Actions workflow: linted, and rehearsed locally with its own commands."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import PROJECT, Repo, output, with_addopts
from warm_python import invoke_command

WORKFLOW = PROJECT / ".github" / "workflows" / "regression.yml"
BIN = Path(sys.executable).parent
SHARDS = 4


def _workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_actionlint_finds_nothing() -> None:
    done = subprocess.run([str(BIN / "actionlint"), str(WORKFLOW)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_finds_nothing() -> None:
    done = subprocess.run([str(BIN / "zizmor"), "--offline", str(WORKFLOW)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflow_follows_the_rules_of_the_cache_and_of_inputs() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    data = _workflow()
    assert data["permissions"] == {"contents": "read"}
    assert "restore-keys" not in text  # a prefix match would be another fingerprint
    job = data["jobs"]["regression"]
    assert job["strategy"]["matrix"]["shard"] == list(range(1, SHARDS + 1))
    steps = job["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert re.fullmatch(r"\d+\.\d+\.\d+", python["with"]["python-version"])
    for step in (s for jobs in data["jobs"].values() for s in jobs["steps"] if "run" in s):
        assert "${{" not in step["run"], f"expression inside run: {step['run']}"
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    assert save["if"] == "steps.restore.outputs.cache-hit != 'true'"
    assert "test-suite" in data["jobs"]


def test_every_job_has_a_timeout() -> None:
    for name, job in _workflow()["jobs"].items():
        minutes = job.get("timeout-minutes")
        assert isinstance(minutes, int) and 0 < minutes <= 120, f"job {name}: {minutes!r}"


def _expand(value: object, shard: int) -> str:
    """The few expressions the job's env may hold, as a run without inputs sees them."""
    known = {"matrix.shard": str(shard), "inputs.reference": "", "inputs.candidate": ""}
    return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", lambda m: known[m.group(1)], str(value))


def _run_step(step_id: str, clone: Path, shard: int, cache: Path,
              github_output: Path) -> subprocess.CompletedProcess[str]:
    job = _workflow()["jobs"]["regression"]
    (step,) = [s for s in job["steps"] if s.get("id") == step_id]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REGRESSION_", "GITHUB_", "PYTEST_"))}
    env.update({k: _expand(v, shard) for k, v in {**job["env"], **step.get("env", {})}.items()})
    env.update(GITHUB_OUTPUT=str(github_output), REGRESSION_CACHE_DIR=str(cache),
               REGRESSION_NO_DEFAULT_CACHE="1", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=clone, env=with_addopts(env),
                          text=True,
                          capture_output=True, check=False, timeout=600)


def _fresh_clone(template: Path, folder: Path, venv: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(template), str(folder)], check=True)
    (folder / ".venv").symlink_to(venv)  # what the workflow's Install step makes
    return folder


def _cases(junit: Path) -> list[str]:
    tree = ElementTree.parse(junit)
    return [f"{case.get('classname')}::{case.get('name')}" for case in tree.iter("testcase")]


@pytest.mark.slow
def test_workflow_rehearsal_shards_cover_every_case_once_and_reuse_the_cache(
        zoo_repo_template: Path, tmp_path: Path) -> None:
    saved: dict[str, Path] = {}  # what actions/cache/save stored, by exact key
    keys, sharded = set(), []
    # The steps' own `.venv/bin/invoke`: each run a fork of the warm Python, each recording
    # its own process, as in `Repo.invoke`.
    venv = tmp_path / "venv"
    with invoke_command(venv / "bin" / "invoke"):
        # The second rehearsal, on the last shard, restores what the first saved.
        for rehearsal, shards in (("first", range(1, SHARDS + 1)), ("second", (SHARDS,))):
            for shard in shards:
                sharded += _rehearse(zoo_repo_template, tmp_path / f"{rehearsal}-{shard}",
                                     venv, shard, saved, keys, first=rehearsal == "first")
    assert len(keys) == SHARDS  # each shard its own key, the same in both rehearsals
    assert sorted(sharded) == sorted(_collected_cases(zoo_repo_template))
    assert len(sharded) == len(set(sharded)) > SHARDS


def _rehearse(template: Path, folder: Path, venv: Path, shard: int, saved: dict[str, Path],
              keys: set[str], first: bool) -> list[str]:
    """One shard's job in a fresh clone, with actions/cache's exact-key restore and save;
    the cases its JUnit report names (first rehearsal only)."""
    clone = _fresh_clone(template, folder, venv)
    cache, github_output = clone / ".regression-cache", folder.parent / "out"
    github_output.write_text("")
    key_step = _run_step("key", clone, shard, cache, github_output)
    assert key_step.returncode == 0, output(key_step)
    key = github_output.read_text().strip().removeprefix("key=")
    keys.add(key)
    hit = key in saved
    if hit:
        shutil.copytree(saved[key], cache)
    gen = _run_step("gen", clone, shard, cache, github_output)
    assert gen.returncode == 0, output(gen)
    assert ("nothing generated" in gen.stdout) == hit, (folder.name, output(gen))
    if not hit:
        saved[key] = folder.parent / "saved" / key
        shutil.copytree(cache, saved[key])
    test = _run_step("test", clone, shard, cache, github_output)
    assert test.returncode == 0, output(test)
    return _cases(clone / f"regression-shard-{shard}.xml") if first else []


def _collected_cases(repo: Path) -> list[str]:
    """Every case of the repository's suite, as pytest collects it (plugin off), in JUnit's
    `classname::name` form."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:regression", "-p", "no:cacheprovider", "tests/regression"],
                          cwd=repo, env=with_addopts({k: v for k, v in os.environ.items()
                                            if not k.startswith("PYTEST_")}),
                          text=True, capture_output=True, check=True)
    nodeids = [line for line in done.stdout.splitlines() if "::" in line]
    cases = []
    for nodeid in nodeids:
        path, _, rest = nodeid.partition("::")
        *classes, name = rest.split("::")
        cases.append(".".join([path.removesuffix(".py").replace("/", "."), *classes]) +
                     f"::{name}")
    return cases


@pytest.mark.parametrize("spec", ["0/4", "5/4", "a/b", "1/0"])
def test_bad_shard_spec_is_a_clear_error(subject_repo: Repo, spec: str) -> None:
    done = subject_repo.invoke("key", "--shard", spec)
    assert done.returncode == 2
    assert f"--shard {spec!r}" in done.stderr
