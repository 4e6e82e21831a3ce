"""`torch-regression init`: the files a model repository needs, written once, never over
its own."""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from regression.errors import RegressionError
from regression.revision import git_process

Echo = Callable[[str], None]
# Top-level folders that hold no package of the library itself.
NOT_SUBJECT = frozenset({"tests", "test", "docs", "doc", "examples", "example", "scripts",
                         "benchmarks", "bench", "build", "dist", "tools", "notebooks"})
STARTER = "tests/regression/test_regression.py"
MAX_SHARDS = 64
PYTHON_VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}(\.[0-9]{1,3})?")


@dataclass(frozen=True)
class Layout:
    """Where the repository's packages live: `path` ("." or "src") and their names."""

    path: str
    packages: tuple[str, ...]


def _is_package(folder: Path) -> bool:
    """A folder that `import NAME` imports as a package of the library."""
    name = folder.name
    return folder.is_dir() and (folder / "__init__.py").is_file() and name not in NOT_SUBJECT \
        and name.isidentifier() and not keyword.iskeyword(name)


def find_layout(root: Path) -> Layout:
    """The packages of a flat or `src/` layout: folders with an `__init__.py`."""
    for path in ("src", "."):
        folder = root / path
        found = tuple(sorted(p.name for p in folder.iterdir() if _is_package(p))) \
            if folder.is_dir() else ()
        if found:
            return Layout(path, found)
    raise RegressionError(f"no Python package found in {root} or {root / 'src'} (a folder "
                          "with an __init__.py); run `torch-regression init` at the top of "
                          "your model library's repository")


def newest_tag(root: Path) -> str:
    """The most recent tag reachable from HEAD, or HEAD when there is none."""
    done = git_process(root, "describe", "--tags", "--abbrev=0")
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "HEAD"


def config_text(layout: Layout, reference: str, device: str = "cpu") -> str:
    device = "device: cuda   # where the cases run; the key names the GPU\n" \
        if device == "cuda" else ""
    return f"""\
# torch-regression: see its README, "Configuration".
reference: {_yaml_string(reference)}   # the revision whose outputs are the reference
subject:
  packages: [{", ".join(_yaml_string(p) for p in layout.packages)}]   # imported from a worktree of the reference
  path: {layout.path}
tests: [tests/regression]
determinism:
  seed: 0
  threads: 1
{device}"""


def _yaml_string(text: str) -> str:
    """`text` as YAML reads it back: bare where it is plainly a string (v1.2, minilib),
    quoted and escaped otherwise (a tag may hold quotes or '#'; `on` or 1.10 would be read as
    another type)."""
    bare = re.fullmatch(r"[A-Za-z_][\w.-]*", text) is not None
    if bare and yaml.safe_load(f"- {text}") == [text]:
        return text
    return json.dumps(text, ensure_ascii=False)


TASKS = "from regression.tasks import ns\n"

STARTER_TEST = '''\
"""Regression tests of {package}: each output is compared bit for bit with what the
reference revision produced (config.yaml's `reference`), on this machine.

Fill in MODELS, build() and example_input(); until then every case is skipped.
"""

import pytest
import torch

import {package}

MODELS: list[str] = []  # e.g. ["resnet18", "vit_tiny"]


def build(name: str) -> torch.nn.Module:
    """The model called `name`, freshly initialised (torch-regression seeds every case).
    A model with lazy modules (nn.LazyLinear...) needs one forward on a dummy batch here
    before its weights exist to be checked."""
    raise NotImplementedError("fill in build() in tests/regression/test_regression.py")


def example_input(name: str, regression) -> torch.Tensor:
    """An input for the model, drawn from the case's own generator (on its device)."""
    return regression.randn(2, 3, 32, 32)


pytestmark = pytest.mark.skipif(
    not MODELS, reason="fill in MODELS, build() and example_input() in "
                       "tests/regression/test_regression.py")
NAMES = MODELS or ["unset"]


@pytest.mark.parametrize("name", NAMES)
def test_initial_weights(name, regression):
    regression.check(build(name).state_dict(), name="state")


@pytest.mark.parametrize("name", NAMES)
def test_forward_no_grad(name, regression):
    model = build(name).to(regression.device).eval()  # cpu, or config.yaml's device
    with torch.no_grad():  # PyTorch takes other kernels here than with autograd on
        regression.check(model(example_input(name, regression)), name="out")


@pytest.mark.parametrize("name", NAMES)
def test_forward_with_autograd(name, regression):
    model = build(name).to(regression.device).eval()
    regression.check(model(example_input(name, regression)).detach(), name="out")
'''

WORKFLOW = '''\
# Bit-exact regression tests against config.yaml's reference, split across {shards} runners.
# Each shard generates only its own reference and caches it under its own exact key.
name: regression

on:
  push:
    branches: [main]
  pull_request:

permissions:
  contents: read

jobs:
  regression:
    name: regression shard ${{{{ matrix.shard }}}}/{shards}
    runs-on: {runs_on}
    timeout-minutes: 30
    strategy:
      fail-fast: false
      matrix:
        shard: [{shard_list}]
    env:
      SHARD: ${{{{ matrix.shard }}}}/{shards}
      JUNIT: regression-shard-${{{{ matrix.shard }}}}.xml
      # Where pip finds torch-regression: a name, a wheel's URL or a git URL.
      TORCH_REGRESSION: torch-regression[xdist]
    steps:
      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8  # v5.0.0
        with:
          fetch-depth: 0  # the reference commit must be in the clone
          persist-credentials: false
      - uses: actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c  # v6.0.0
        with:
          python-version: "{python}"  # exact: the patch version is part of the key
      - name: Install
        run: |
          python -m venv .venv
          {install_torch}
          .venv/bin/pip install -e . "$TORCH_REGRESSION"
      - name: Cache key
        id: key
        run: .venv/bin/invoke key --shard "$SHARD" --github-output
      - name: Restore the reference
        id: restore
        uses: actions/cache/restore@9255dc7a253b0ccc959486e2bca901246202afeb  # v5.0.1
        with:
          path: .regression-cache
          key: ${{{{ steps.key.outputs.key }}}}
      - name: Generate the reference
        run: .venv/bin/invoke gen --shard "$SHARD"
      - name: Save the reference
        if: steps.restore.outputs.cache-hit != 'true'
        uses: actions/cache/save@9255dc7a253b0ccc959486e2bca901246202afeb  # v5.0.1
        with:
          path: .regression-cache
          key: ${{{{ steps.key.outputs.key }}}}
      - name: Regression test
        run: .venv/bin/invoke test --shard "$SHARD" --junitxml "$JUNIT"
      - name: Upload JUnit
        if: always()
        uses: actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f  # v6.0.0
        with:
          name: regression-junit-shard-${{{{ matrix.shard }}}}
          path: ${{{{ env.JUNIT }}}}
          if-no-files-found: warn
'''


INSTALL_TORCH = {
    "cpu": ".venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu",
    "cuda": ".venv/bin/pip install torch  # PyPI's Linux wheel: the CUDA build",
}
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

    shards: int = 4
    python: str = "3.11.7"
    device: str = "cpu"
    runner: str = ""
    """Comma-separated runner labels; "" for the device's default."""

    def runner_labels(self) -> list[str]:
        return [label.strip() for label in (self.runner or RUNNERS[self.device]).split(",")]


def files(root: Path, options: Options) -> dict[str, str]:
    """The files init writes, by path relative to `root`."""
    layout = find_layout(root)
    labels = options.runner_labels()
    runs_on = labels[0] if len(labels) == 1 else f"[{', '.join(labels)}]"
    custom = [label for label in labels if label not in GITHUB_LABELS]
    linted = {ACTIONLINT: ACTIONLINT_CONFIG.format(labels=", ".join(custom))} if custom else {}
    return {
        **linted,
        "config.yaml": config_text(layout, newest_tag(root), options.device),
        "tasks.py": TASKS,
        STARTER: STARTER_TEST.format(package=layout.packages[0]),
        ".github/workflows/regression.yml": WORKFLOW.format(
            shards=options.shards,
            shard_list=", ".join(str(i) for i in range(1, options.shards + 1)),
            python=options.python, runs_on=runs_on,
            install_torch=INSTALL_TORCH[options.device]),
    }


def check_options(options: Options) -> None:
    """Refuse values that would go into the workflow as anything but what they say."""
    if not 1 <= options.shards <= MAX_SHARDS:
        raise RegressionError(f"--shards {options.shards}: give 1 to {MAX_SHARDS} CI runners")
    if not PYTHON_VERSION.fullmatch(options.python):
        raise RegressionError(f"--python {options.python!r} is not a Python version: digits "
                              "and dots, e.g. --python 3.11.7, the exact version CI sets up")
    if options.device not in INSTALL_TORCH:
        raise RegressionError(f"--device {options.device!r}: give cpu or cuda")
    bad = [label for label in options.runner_labels() if not RUNNER_LABEL.fullmatch(label)]
    if bad:
        raise RegressionError(f"--runner {options.runner!r}: {bad[0]!r} is not a runner label; "
                              "give labels of letters, digits, '.', '_' and '-', separated by "
                              "commas, e.g. --runner self-hosted,gpu")


def init(root: Path, options: Options, force: bool, echo: Echo) -> list[str]:
    """Write the files into `root` (a git work tree's top), keeping any that exist unless
    `force`; warn about each one git ignores. Returns the paths written."""
    check_options(options)
    top = git_process(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        raise RegressionError(f"{root} is not the top of a git work tree; run "
                              "`torch-regression init` in your repository's root folder")
    written, ignored = [], []
    managed = files(root, options)
    for relative, text in managed.items():
        target = root / relative
        if target.exists() and not force:
            echo(f"kept {relative}: it exists (--force overwrites it)")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(relative)
        echo(f"wrote {relative}")
        if git_process(root, "check-ignore", "-q", relative).returncode == 0:
            ignored.append(relative)
            echo(f"warning: your .gitignore hides {relative}, so CI would run without it; "
                 f"commit it anyway with `git add -f {relative}`, or add `!/{relative}` to "
                 ".gitignore")
    echo("next:")
    echo(f"  1. fill in MODELS, build() and example_input() in {STARTER}")
    echo("  2. invoke test          # records the reference, then checks your working tree")
    echo("  3. in .github/workflows/regression.yml, set TORCH_REGRESSION to where CI installs "
         "torch-regression from (a wheel's URL or a git URL), then commit and push:")
    if options.device == "cuda":
        echo(f"     CI runs on runners labelled {', '.join(options.runner_labels())}: register "
             "one that has a GPU and its driver (GitHub's hosted runners have none)")
    add = " ".join(p for p in managed if p not in ignored)
    forced = f" && git add -f {' '.join(ignored)}" if ignored else ""
    echo(f"     git add {add}{forced} && git commit -m 'Regression tests'")
    return written
