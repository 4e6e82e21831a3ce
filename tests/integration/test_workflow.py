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
from helpers import PROJECT, Repo, expand_expressions, output, with_addopts
from warm_python import WARM, invoke_command

WORKFLOW = PROJECT / ".github" / "workflows" / "regression.yml"
BIN = Path(sys.executable).parent
SHARDS = 4


def _workflow() -> dict[Any, Any]:
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
    data = _workflow()
    assert data["permissions"] == {"contents": "read"}
    job = data["jobs"]["regression"]
    assert job["strategy"]["matrix"]["shard"] == list(range(1, SHARDS + 1))
    steps = job["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert re.fullmatch(r"\d+\.\d+\.\d+", python["with"]["python-version"])
    for step in (s for jobs in data["jobs"].values() for s in jobs["steps"] if "run" in s):
        assert "${{" not in step["run"], f"expression inside run: {step['run']}"
    restore = next(s for s in steps if s.get("id") == "restore")
    assert restore["with"]["key"] == "${{ steps.key.outputs.key }}"
    # a save for other test code: harmless, every case is checked before use (the rehearsal)
    assert restore["with"]["restore-keys"] == "${{ steps.key.outputs.restore-key }}"
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    assert save["if"] == "steps.restore.outputs.cache-hit != 'true'"
    assert "test-suite" in data["jobs"]


def test_a_pull_request_is_checked_against_its_base_and_pushes_against_config_yaml() -> None:
    data = _workflow()
    triggers = data[True]  # YAML 1.1 reads `on` as true
    assert set(triggers) == {"push", "pull_request", "schedule", "workflow_dispatch"}
    assert set(triggers["workflow_dispatch"]["inputs"]) == {"reference", "candidate"}
    env = data["jobs"]["regression"]["env"]
    assert env["REFERENCE"] == "${{ github.event.pull_request.base.sha || inputs.reference }}"
    assert env["REGRESSION_REFERENCE_FOR"] == "${{ github.event_name }}"
    for step in ("key", "gen", "test"):
        assert '${REFERENCE:+--reference "$REFERENCE"}' in _step(step)["run"], step


def _step(step_id: str) -> dict[str, Any]:
    (step,) = [s for s in _workflow()["jobs"]["regression"]["steps"] if s.get("id") == step_id]
    assert isinstance(step, dict)
    return step


def test_every_job_has_a_timeout() -> None:
    for name, job in _workflow()["jobs"].items():
        minutes = job.get("timeout-minutes")
        assert isinstance(minutes, int) and 0 < minutes <= 120, f"job {name}: {minutes!r}"


def _event(name: str, base: str = "") -> dict[str, str]:
    """What the job's expressions read of an event without inputs: its name, and a pull
    request's base commit (null, so empty, for any other event)."""
    return {"github.event_name": name, "github.event.pull_request.base.sha": base,
            "inputs.reference": "", "inputs.candidate": ""}


PUSH = _event("push")


def _expand(value: object, shard: int, event: dict[str, str]) -> str:
    """The job's env as GitHub evaluates it for `event` on shard `shard`."""
    return expand_expressions(value, {"matrix.shard": str(shard), **event})


def _run_step(step_id: str, clone: Path, shard: int, cache: Path, github_output: Path,
              event: dict[str, str] = PUSH,
              step_summary: Path | None = None) -> subprocess.CompletedProcess[str]:
    job = _workflow()["jobs"]["regression"]
    (step,) = [s for s in job["steps"] if s.get("id") == step_id]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REGRESSION_", "GITHUB_", "PYTEST_"))}
    env.update({k: _expand(v, shard, event)
                for k, v in {**job["env"], **step.get("env", {})}.items()})
    env.update(GITHUB_OUTPUT=str(github_output), REGRESSION_CACHE_DIR=str(cache),
               REGRESSION_NO_DEFAULT_CACHE="1", PYTHONDONTWRITEBYTECODE="1")
    if step_summary is not None:
        env.update(GITHUB_STEP_SUMMARY=str(step_summary))
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
    saved: dict[str, Path] = {}  # what actions/cache/save stored, by exact key, oldest first
    keys: set[str] = set()
    restores: list[str] = []
    sharded: list[str] = []
    # The steps' own `.venv/bin/invoke`: each run a fork of the warm Python, each recording
    # its own process, as in `Repo.invoke`.
    venv = tmp_path / "venv"
    with invoke_command(venv / "bin" / "invoke"):
        # The second rehearsal, on the last shard, restores what the first saved; the third,
        # with a new helper file under the tests (another key), restores it by restore-keys.
        for rehearsal, shards in (("first", range(1, SHARDS + 1)), ("second", (SHARDS,)),
                                  ("third", (SHARDS,))):
            for shard in shards:
                clone = _fresh_clone(zoo_repo_template, tmp_path / f"{rehearsal}-{shard}", venv)
                if rehearsal == "third":  # not committed: config.yaml's reference is HEAD
                    (clone / "tests" / "regression" / "notes.py").write_text('"""Notes."""\n')
                found, restored = _rehearse(clone, shard, saved, keys)
                sharded += found if rehearsal == "first" else []
                restores.append(restored)
    assert restores == ["missed"] * SHARDS + ["exact", "prefix"]
    assert len(keys) == SHARDS + 1  # each shard its own key, the same in two rehearsals
    assert sorted(sharded) == sorted(_collected_cases(zoo_repo_template))
    assert len(sharded) == len(set(sharded)) > SHARDS


def _rehearse(clone: Path, shard: int, saved: dict[str, Path],
              keys: set[str]) -> tuple[list[str], str]:
    """One shard's job in `clone`, with actions/cache's restore (the exact key, else the
    newest save that restore-key prefixes) and its save after a miss: the cases its JUnit
    report names, and how the cache was restored (exact, prefix or missed)."""
    cache, github_output = clone / ".regression-cache", clone.parent / "out"
    github_output.write_text("")
    key_step = _run_step("key", clone, shard, cache, github_output)
    assert key_step.returncode == 0, output(key_step)
    outputs = dict(line.split("=", 1) for line in github_output.read_text().splitlines())
    key, prefix = outputs["key"], outputs["restore-key"]
    assert key.startswith(prefix) and f"shard{shard}of{SHARDS}" in prefix
    keys.add(key)
    matches = [k for k in saved if k.startswith(prefix)]
    restored = "exact" if key in saved else "prefix" if matches else "missed"
    if matches:
        shutil.copytree(saved[key if key in saved else matches[-1]], cache)
    gen = _run_step("gen", clone, shard, cache, github_output)
    assert gen.returncode == 0, output(gen)
    # a restored save is reused whole: the harness of no case changed
    assert ("nothing generated" in gen.stdout) == bool(matches), (clone.name, output(gen))
    if restored != "exact":  # the save step: cache-hit is false after a prefix match
        saved[key] = clone.parent / "saved" / key
        shutil.copytree(cache, saved[key])
    test = _run_step("test", clone, shard, cache, github_output)
    assert test.returncode == 0, output(test)
    return _cases(clone / f"regression-shard-{shard}.xml"), restored


def _collected_cases(repo: Path) -> list[str]:
    """Every case of the repository's suite, as pytest collects it (plugin off), in JUnit's
    `classname::name` form."""
    done = WARM.pytest(repo, ["--collect-only", "-q", "-p", "no:regression",
                              "-p", "no:cacheprovider", "tests/regression"],
                       with_addopts({k: v for k, v in os.environ.items()
                                     if not k.startswith("PYTEST_")}))
    assert done.returncode == 0, output(done)
    nodeids = [line for line in done.stdout.splitlines() if "::" in line]
    cases = []
    for nodeid in nodeids:
        path, _, rest = nodeid.partition("::")
        *classes, name = rest.split("::")
        cases.append(".".join([path.removesuffix(".py").replace("/", "."), *classes]) +
                     f"::{name}")
    return cases


HALVED = """\
    model = _BUILDERS[cfg["architecture"]](cfg)
    for parameter in model.parameters():
        parameter.data.mul_(0.5)
"""


def _commit(clone: Path, message: str) -> str:
    subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com",
                    "-c", "commit.gpgsign=false", "commit", "-q", "-a", "-m", message],
                   cwd=clone, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, text=True,
                          capture_output=True, check=True).stdout.strip()


@pytest.mark.slow
def test_workflow_rehearsal_checks_a_pull_request_against_its_base(
        zoo_repo_template: Path, tmp_path: Path) -> None:
    """A pull request whose base halves every weight since config.yaml's reference (the
    release), and whose head changes no output: checked against its base, nothing changed;
    the same job on a push checks against the release, and every case changed."""
    with invoke_command(tmp_path / "venv" / "bin" / "invoke"):
        clone = _fresh_clone(zoo_repo_template, tmp_path / "clone", tmp_path / "venv")
        release = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, text=True,
                                 capture_output=True, check=True).stdout.strip()
        config = (clone / "config.yaml").read_text()
        (clone / "config.yaml").write_text(config.replace("reference: HEAD",
                                                          f"reference: {release}"))
        factory = (clone / "zoo" / "factory.py").read_text()
        (clone / "zoo" / "factory.py").write_text(factory.replace(
            '    model = _BUILDERS[cfg["architecture"]](cfg)\n', HALVED))
        base = _commit(clone, "the base: every weight halved")
        (clone / "zoo" / "__init__.py").write_text(
            (clone / "zoo" / "__init__.py").read_text() + "# the pull request\n")
        _commit(clone, "the pull request's head: no output changes")
        cache, github_output = clone / ".regression-cache", tmp_path / "out"
        checked = {}
        for event in (_event("pull_request", base), PUSH):
            github_output.write_text("")
            summary = tmp_path / f"summary-{event['github.event_name']}.md"
            for step in ("key", "gen"):
                done = _run_step(step, clone, 1, cache, github_output, event)
                assert done.returncode == 0, output(done)
            checked[event["github.event_name"]] = (
                _run_step("test", clone, 1, cache, github_output, event, summary), summary)
    pull_request, summary = checked["pull_request"]
    assert pull_request.returncode == 0, output(pull_request)
    why = f"reference {base[:12]}: the pull request's base commit, so this job says what " \
          "the pull request changes"
    assert why in pull_request.stdout
    assert re.search(rf"reference {base[:12]}: (\d+) cases: \1 identical, 0 changed",
                     pull_request.stdout), output(pull_request)
    assert summary.read_text().startswith(f"**Reference:** `{base[:12]}`: the pull request's")
    push, summary = checked["push"]
    assert push.returncode == 1, output(push)
    assert f"reference {release[:12]}: config.yaml's reference on a push" in push.stdout
    assert re.search(rf"reference {release[:12]}: (\d+) cases: 0 identical, \1 changed",
                     push.stdout), output(push)
    assert f"### Regression against {release[:12]}" in summary.read_text()


@pytest.mark.parametrize("spec", ["0/4", "5/4", "a/b", "1/0"])
def test_bad_shard_spec_is_a_clear_error(subject_repo: Repo, spec: str) -> None:
    done = subject_repo.invoke("key", "--shard", spec)
    assert done.returncode == 2
    assert f"--shard {spec!r}" in done.stderr
