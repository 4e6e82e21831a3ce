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

from regression.cli.workflow import (ACTIONLINT, ACTIONLINT_CONFIG, GITHUB_LABELS, STARTER_FOLDER,
                                     TORCH_REGRESSION, WORKFLOW_PATH, Options, Shards,
                                     check_options, choose_shards, workflow_lines, workflow_text)
from regression.errors import RegressionError
from regression.repository.gitcmd import git_process, ignored_warning

Echo = Callable[[str], None]
# Top-level folders that hold no package of the library itself.
NOT_SUBJECT = frozenset({"tests", "test", "docs", "doc", "examples", "example", "scripts",
                         "benchmarks", "bench", "build", "dist", "tools", "notebooks"})
STARTER = f"{STARTER_FOLDER}/test_regression.py"


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


def reference_note(root: Path, tag: str) -> list[str]:
    """Where the reference is HEAD's own tag: the first run compares HEAD with itself; say
    so, and name the tag before it."""
    if tag == "HEAD" or tag not in git_process(root, "tag", "--points-at", "HEAD").stdout.split():
        return []
    before = git_process(root, "describe", "--tags", "--abbrev=0", "HEAD^")
    previous = before.stdout.strip() if before.returncode == 0 else ""
    hint = (f"the tag before it is {previous}: set `reference: {previous}` in config.yaml to "
            "check against that release") if previous else \
        "no tag comes before it: set config.yaml's reference to an older commit to check " \
        "against one"
    return [f"note: the reference is {tag}, the tag of HEAD itself, so the first `invoke test` "
            f"compares HEAD with itself (every case identical, until you change the code); "
            f"{hint}"]


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
    return regression.randn(2, 3, 32, 32)  # an image batch
    # a token model's (ids below its vocabulary size):
    # return regression.randint(0, 1000, (2, 16))


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
def files(root: Path, options: Options, shards: Shards) -> dict[str, str]:
    """The files init writes, by path relative to `root`."""
    layout = find_layout(root)
    custom = [label for label in options.runner_labels() if label not in GITHUB_LABELS]
    linted = {ACTIONLINT: ACTIONLINT_CONFIG.format(labels=", ".join(custom))} if custom else {}
    return {
        **linted,
        "config.yaml": config_text(layout, newest_tag(root), options.device),
        "tasks.py": TASKS,
        STARTER: STARTER_TEST.format(package=layout.packages[0]),
        WORKFLOW_PATH: workflow_text(root, options, shards),
    }


def init(root: Path, options: Options, force: bool, echo: Echo) -> list[str]:
    """Write the files into `root` (a git work tree's top), keeping any that exist unless
    `force`; warn about each one git ignores. Returns the paths written."""
    check_options(options)
    top = git_process(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        raise RegressionError(f"{root} is not the top of a git work tree; run "
                              "`torch-regression init` in your repository's root folder")
    written, ignored = [], []
    shards = choose_shards(root, options.shards)
    managed = files(root, options, shards)
    for relative, text in managed.items():
        target = root / relative
        if target.exists() and not force:
            echo(f"kept {relative}: it exists (--force overwrites it)")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(relative)
        echo(f"wrote {relative}")
        warning = ignored_warning(root, relative)
        if warning:
            ignored.append(relative)
            echo(warning)
    for line in [*workflow_lines(root, options, shards),
                 *reference_note(root, newest_tag(root))]:
        echo(line)
    echo("next:")
    echo(f"  1. fill in MODELS, build() and example_input() in {STARTER}")
    echo("  2. invoke test          # records the reference, then checks your working tree")
    echo(f"  3. check the TORCH_REGRESSION line of {WORKFLOW_PATH}: it installs "
         f"{TORCH_REGRESSION!r}, a placeholder; point it at the torch-regression CI should "
         "use (a git URL with a tag, or a wheel's URL), then commit and push:")
    if options.device == "cuda":
        echo(f"     CI runs on runners labelled {', '.join(options.runner_labels())}: register "
             "one that has a GPU and its driver (GitHub's hosted runners have none)")
    add = " ".join(p for p in managed if p not in ignored)
    forced = f" && git add -f {' '.join(ignored)}" if ignored else ""
    echo(f"     git add {add}{forced} && git commit -m 'Regression tests'")
    return written
