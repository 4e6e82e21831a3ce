"""The GitHub Actions workflow that init writes: its template, runners, shards and torch install."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from regression.environment import dependencies
from regression.config.settings import DEFAULT_DURATIONS
from regression.environment.dependencies import Requirement
from regression.store.durations import read_durations
from regression.errors import RegressionError
from regression.repository.gitcmd import git_process
from regression.report import listed

STARTER_FOLDER = "tests/regression"
WORKFLOW_PATH = ".github/workflows/regression.yml"
MAX_SHARDS = 64
MAX_AUTO_SHARDS = 4
TEST_FUNCTION = re.compile(r"^\s*(?:async\s+)?def\s+test_?\w*\s*\(", re.MULTILINE)
PYTHON_VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}(\.[0-9]{1,3})?")

WORKFLOW = '''\
# Bit-exact regression tests: a pull request against its base commit, a push to {branch} and
# the schedule against config.yaml's reference. Split across {shards} {runners}: {why}.
# To change that, edit the matrix's shard list.
# Each shard generates only its own reference and caches it under its own key.
name: regression

on:
  push:
    branches: [{branch}]
  pull_request:
  schedule:
    - cron: "23 4 * * 1"  # Mondays: a new runner image or package changes what is recorded
  workflow_dispatch:
    inputs:
      reference:
        description: "Reference revision (tag, branch or SHA); empty for config.yaml's"
        type: string
        default: ""
      candidate:
        description: "Candidate revision to compare with it; empty for the checked-out commit"
        type: string
        default: ""

permissions:
  contents: read

# A new push to a pull request cancels the run of its older commit; a run of {branch} or of
# the schedule is never cancelled (it saves the cache that pull requests restore).
concurrency:
  group: regression-${{{{ github.event.pull_request.number || github.ref }}}}
  cancel-in-progress: ${{{{ github.event_name == 'pull_request' }}}}

jobs:
  regression:
    name: regression shard ${{{{ matrix.shard }}}}/${{{{ strategy.job-total }}}}
    runs-on: {runs_on}
    timeout-minutes: 30
    strategy:
      fail-fast: false
      matrix:
        shard: [{shard_list}]
    env:
      SHARD: ${{{{ matrix.shard }}}}/${{{{ strategy.job-total }}}}
      JUNIT: regression-shard-${{{{ matrix.shard }}}}.xml
      # The reference: a pull request's base commit, so that the job says what the pull
      # request changes; a manual run's input; empty on a push and on the schedule:
      # config.yaml's, so that the job says what changed since it. The tool says which it
      # used and why (REGRESSION_REFERENCE_FOR), in the log and the step summary.
      REFERENCE: ${{{{ github.event.pull_request.base.sha || inputs.reference }}}}
      REGRESSION_REFERENCE_FOR: ${{{{ github.event_name }}}}
      CANDIDATE: ${{{{ inputs.candidate }}}}
      # Where pip finds torch-regression: CHECK THIS LINE (a git URL with a tag, or a wheel).
      TORCH_REGRESSION: {torch_regression}
    steps:
      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8  # v5.0.0
        with:
          fetch-depth: 0  # the reference commit must be in the clone
          persist-credentials: false
      - uses: actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c  # v6.0.0
        with:
          python-version: "{python}"  # exact: the patch version is part of the key
          cache: pip
          cache-dependency-path: |
{cache_paths}
      - name: Install
        run: |
          python -m venv .venv
          # {torch_names}: from one index, in one command (a mix of indexes
          # breaks torchvision's operators or swaps in another torch build), then pinned,
          # so that installing the library cannot replace them.
          .venv/bin/pip install {torch_install}
          .venv/bin/pip freeze --all | grep -iE '^({torch_pattern})==' > .venv/torch-pins.txt
          .venv/bin/pip install -c .venv/torch-pins.txt -e . "$TORCH_REGRESSION"
      - name: Cache key
        id: key
        run: .venv/bin/invoke key --shard "$SHARD" ${{REFERENCE:+--reference "$REFERENCE"}} --github-output
      - name: Restore the reference
        id: restore
        uses: actions/cache/restore@9255dc7a253b0ccc959486e2bca901246202afeb  # v5.0.1
        with:
          path: .regression-cache
          key: ${{{{ steps.key.outputs.key }}}}
          # Else the newest save of this reference, environment and shard with other test
          # code: each case whose harness is unchanged is reused, the others recorded (every
          # case is checked before use, so a save made for other code is harmless).
          restore-keys: ${{{{ steps.key.outputs.restore-key }}}}
      - name: Generate the reference
        id: gen
        run: .venv/bin/invoke gen --shard "$SHARD" ${{REFERENCE:+--reference "$REFERENCE"}}
      - name: Save the reference
        if: steps.restore.outputs.cache-hit != 'true'
        uses: actions/cache/save@9255dc7a253b0ccc959486e2bca901246202afeb  # v5.0.1
        with:
          path: .regression-cache
          key: ${{{{ steps.key.outputs.key }}}}
      - name: Regression test
        id: test
        run: |
          if [ -n "$CANDIDATE" ]; then
            .venv/bin/invoke compare --candidate "$CANDIDATE" --shard "$SHARD" --junitxml "$JUNIT" ${{REFERENCE:+--reference "$REFERENCE"}}
          else
            .venv/bin/invoke test --shard "$SHARD" --junitxml "$JUNIT" ${{REFERENCE:+--reference "$REFERENCE"}}
          fi
      - name: Upload JUnit
        if: always()
        uses: actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f  # v6.0.0
        with:
          name: regression-junit-shard-${{{{ matrix.shard }}}}
          path: ${{{{ env.JUNIT }}}}
          if-no-files-found: warn
'''

TORCH_REGRESSION = ("torch-regression[xdist] @ "
                    "git+https://github.com/torch-regression/torch-regression@v0.1.0")
"""Where the generated workflow installs torch-regression from: a placeholder (we are not on
PyPI) that init's output tells the user to check."""
TORCH_PACKAGES = ("torch", "torchvision", "torchaudio")
"""Built against one another: installed together, from one index."""
TORCH_INDEXES = {
    "cpu": "https://download.pytorch.org/whl/cpu",
    "cuda": "https://download.pytorch.org/whl/cu130",
}
"""The one index the torch packages come from: PyTorch's CPU builds, or its CUDA 13.0 builds
(cu126, cu128: for a runner whose driver is older)."""
SAFE_PATH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
"""A file name written into the workflow as is: nothing YAML or GitHub would read as more."""
SECONDS_PER_RUNNER = 300
TESTS_PER_RUNNER = 10
RUNNERS = {"cpu": "ubuntu-latest", "cuda": "self-hosted, gpu"}
"""Default runner labels: GitHub's hosted runners have no GPU, so a cuda workflow runs on
a self-hosted runner labelled gpu (--runner names others)."""
GITHUB_LABELS = frozenset({"self-hosted", "linux", "x64", "arm64", "ubuntu-latest",
                           "ubuntu-24.04", "ubuntu-22.04"})
"""Labels actionlint knows; any other a workflow names is declared in ACTIONLINT."""
ACTIONLINT = ".github/actionlint.yaml"
ACTIONLINT_CONFIG = """\
# The labels of this repository's self-hosted runners, for actionlint (rhysd/actionlint).
self-hosted-runner:
  labels: [{labels}]
"""
RUNNER_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Options:
    """What init writes, beyond what it finds in the repository."""

    shards: int | None = None
    """CI runners; None: as many as the suite needs (see `choose_shards`)."""
    python: str = "3.11.7"
    device: str = "cpu"
    runner: str = ""
    """Comma-separated runner labels; "" for the device's default."""

    def runner_labels(self) -> list[str]:
        return [label.strip() for label in (self.runner or RUNNERS[self.device]).split(",")]


@dataclass(frozen=True)
class Shards:
    """How many CI runners the workflow splits the suite across, and why."""

    count: int
    why: str


def torch_requirements(root: Path) -> list[Requirement]:
    """torch, and each other torch package the project declares anywhere, with every
    version specifier it gives for it: installed together from one index."""
    specs: dict[str, list[str]] = {"torch": []}
    for requirement in dependencies.declared(root):
        if requirement.name in TORCH_PACKAGES:
            found = specs.setdefault(requirement.name, [])
            found += [s for s in requirement.spec.split(",") if s and s not in found]
    return [Requirement(name, ",".join(specs[name]), "") for name in TORCH_PACKAGES
            if name in specs]


def torch_install(requirements: list[Requirement], device: str) -> str:
    """The one pip command's arguments: every torch package, quoted, and the index."""
    names = " ".join(f'"{r.pinned()}"' for r in requirements)
    return f"{names} --index-url {TORCH_INDEXES[device]}"


def cache_paths(root: Path) -> list[str]:
    """The files whose change should refresh pip's cache: what declares the dependencies
    (setup-python's cache-dependency-path must name files that exist)."""
    found = [name for name in dependencies.PROJECT_FILES if (root / name).is_file()]
    found += [path.relative_to(root).as_posix()
              for path in dependencies.requirement_files(root)]
    return [path for path in found if SAFE_PATH.fullmatch(path)] or [WORKFLOW_PATH]


def choose_shards(root: Path, asked: int | None) -> Shards:
    """--shards when given; else from the recorded durations (about five minutes a runner),
    else from the number of test functions in tests/regression (one runner per
    TESTS_PER_RUNNER of them, at most 4): a small suite needs one runner."""
    if asked is not None:
        return Shards(asked, "as --shards asked")
    durations = read_durations(root / DEFAULT_DURATIONS) \
        if (root / DEFAULT_DURATIONS).is_file() else {}
    if durations:
        seconds = sum(durations.values())
        count = min(MAX_AUTO_SHARDS, max(1, math.ceil(seconds / SECONDS_PER_RUNNER)))
        return Shards(count, f"the {len(durations)} cases in {DEFAULT_DURATIONS} take "
                             f"{seconds:.0f} s; about {SECONDS_PER_RUNNER // 60} minutes "
                             "a runner")
    functions = _test_functions(root / STARTER_FOLDER)
    if not functions:
        return Shards(1, f"a new suite ({STARTER_FOLDER} holds no tests yet, and no durations "
                         "are recorded), which one runner checks in minutes")
    count = min(MAX_AUTO_SHARDS, max(1, math.ceil(functions / TESTS_PER_RUNNER)))
    return Shards(count, f"{STARTER_FOLDER} holds {functions} test functions and no durations "
                         f"are recorded; one runner per {TESTS_PER_RUNNER} of them")


def _test_functions(folder: Path) -> int:
    """The test functions defined in the Python files under `folder` (0 if none)."""
    count = 0
    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
        try:
            count += len(TEST_FUNCTION.findall(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return count


def workflow_text(root: Path, options: Options, shards: Shards) -> str:
    """.github/workflows/regression.yml for this repository."""
    labels = options.runner_labels()
    requirements = torch_requirements(root)
    names = [r.name for r in requirements]
    return WORKFLOW.format(
        shards=shards.count, runners="runner" if shards.count == 1 else "runners",
        why=shards.why, shard_list=", ".join(str(i) for i in range(1, shards.count + 1)),
        python=options.python,
        runs_on=labels[0] if len(labels) == 1 else f"[{', '.join(labels)}]",
        cache_paths="\n".join(f"            {path}" for path in cache_paths(root)),
        torch_names=listed(names),
        torch_install=torch_install(requirements, options.device),
        torch_pattern="|".join(names), torch_regression=json.dumps(TORCH_REGRESSION),
        branch=default_branch(root))


BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}")
"""A branch name written into the workflow as it is: no YAML or expression syntax in it."""


def default_branch(root: Path) -> str:
    """The branch whose pushes CI checks against config.yaml's reference: origin's default
    branch, else the one checked out, else main (also for a name that is no plain one)."""
    for ref in ("refs/remotes/origin/HEAD", "HEAD"):
        done = git_process(root, "symbolic-ref", "--quiet", "--short", ref)
        name = done.stdout.strip().removeprefix("origin/") if done.returncode == 0 else ""
        if BRANCH.fullmatch(name) and ".." not in name:
            return name
    return "main"


def check_options(options: Options) -> None:
    """Refuse values that would go into the workflow as anything but what they say."""
    if options.shards is not None and not 1 <= options.shards <= MAX_SHARDS:
        raise RegressionError(f"--shards {options.shards}: give 1 to {MAX_SHARDS} CI runners")
    if not PYTHON_VERSION.fullmatch(options.python):
        raise RegressionError(f"--python {options.python!r} is not a Python version: digits "
                              "and dots, e.g. --python 3.11.7, the exact version CI sets up")
    if options.device not in TORCH_INDEXES:
        raise RegressionError(f"--device {options.device!r}: give cpu or cuda")
    bad = [label for label in options.runner_labels() if not RUNNER_LABEL.fullmatch(label)]
    if bad:
        raise RegressionError(f"--runner {options.runner!r}: {bad[0]!r} is not a runner label; "
                              "give labels of letters, digits, '.', '_' and '-', separated by "
                              "commas, e.g. --runner self-hosted,gpu")


def workflow_lines(root: Path, options: Options, shards: Shards) -> list[str]:
    """What init chose for the workflow, and why: its runners and how torch is installed."""
    requirements = torch_requirements(root)
    declared = ", ".join(r.pinned() for r in requirements if r.name != "torch") or "none"
    return [
        f"workflow: {shards.count} {'runner' if shards.count == 1 else 'runners'} "
        f"({shards.why}); --shards N, or the matrix's shard list, changes it",
        f"workflow: {listed([r.name for r in requirements])} from "
        f"{TORCH_INDEXES[options.device]}, in one pip command before the library (other "
        f"torch packages your project declares: {declared})",
    ]
