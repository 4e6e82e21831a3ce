"""`torch-regression init` in a model repository that is not ours, as a newcomer runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Repo, init_repo, installable_pyproject, output, venv_with_wheel

MINILIB = """\
import torch
from torch import nn

SLOPE = {slope}


def list_models():
    return ["mini-mlp", "mini-wide"]


def create_model(name):
    width = 16 if name == "mini-mlp" else 32
    return nn.Sequential(nn.Linear(8, width), nn.LeakyReLU(SLOPE), nn.Linear(width, 4))
"""

FILLED = {
    'MODELS: list[str] = []  # e.g. ["resnet18", "vit_tiny"]':
        "MODELS: list[str] = minilib.list_models()",
    '    raise NotImplementedError("fill in build() in tests/regression/test_regression.py")':
        "    return minilib.create_model(name)",
    "    return regression.randn(2, 3, 32, 32)": "    return regression.randn(2, 8)",
}
STARTER = "tests/regression/test_regression.py"
WORKFLOW = ".github/workflows/regression.yml"


def _library(tmp_path: Path, layout: str) -> Repo:
    """A small installable model library with its own .gitignore (which hides /*.yaml, as
    timm's does), tests and pytest settings, and a tagged release."""
    repo = init_repo(tmp_path / "minilib", tmp_path / "cache")
    package = "src/minilib" if layout == "src" else "minilib"
    repo.write(f"{package}/__init__.py", MINILIB.format(slope="0.01"))
    repo.write("tests/test_api.py", "import minilib\n\n\ndef test_models():\n"
                                    "    assert minilib.list_models()\n")
    repo.write(".gitignore", "/*.yaml\n__pycache__/\n*.egg-info/\nbuild/\n")
    where = "src" if layout == "src" else "."
    repo.write("pyproject.toml", installable_pyproject("minilib", where, 'addopts = "-q"\n'))
    repo.commit("minilib 0.1")
    repo.git("tag", "v0.1")
    return repo


def _init(repo: Repo, *args: str, command: tuple[str, ...] = (sys.executable, "-m",
                                                               "regression")
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, "init", *args], cwd=repo.path, env=repo.env(), text=True,
                          capture_output=True, check=False, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["flat", "src"])
def test_init_then_fill_in_passes_and_a_numerics_change_is_caught(tmp_path: Path, layout: str,
                                                                  our_wheel: Path) -> None:
    """The README's "Use it in your project", in order, in a new environment: torch-regression
    from its wheel (torch and the rest seen from this environment, not installed again), the
    library installed editable, `torch-regression init`, the starter filled in, invoke test."""
    repo = _library(tmp_path, layout)
    python = venv_with_wheel(our_wheel, tmp_path / "venv")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-e", "."], cwd=repo.path, check=True, env=repo.env(),
                   capture_output=True)
    done = _init(repo, command=(str(Path(python).parent / "torch-regression"),))
    assert done.returncode == 0, output(done)
    for path in ("config.yaml", "tasks.py", STARTER, WORKFLOW):
        assert f"wrote {path}" in done.stdout
    assert "warning: your .gitignore hides config.yaml" in done.stdout
    assert "git add -f config.yaml" in done.stdout
    steps = done.stdout.split("next:")[1]
    assert "invoke test" in steps and "check the TORCH_REGRESSION line" in steps
    assert (f"git add tasks.py {STARTER} {WORKFLOW} && git add -f config.yaml && git commit"
            in steps)  # the file .gitignore hides is forced in, and only these files added
    config = (repo.path / "config.yaml").read_text()
    assert "reference: v0.1" in config and "packages: [minilib]" in config
    assert f"path: {'src' if layout == 'src' else '.'}" in config
    kept = _init(repo)  # never over a file that exists
    assert kept.returncode == 0 and kept.stdout.count("kept ") == 4, output(kept)
    unedited = repo.invoke("test", python=python)
    assert unedited.returncode == 0, output(unedited)
    assert "fill in MODELS, build() and example_input()" in output(unedited)
    starter = (repo.path / STARTER).read_text()
    for old, new in FILLED.items():
        starter = starter.replace(old, new)
    repo.write(STARTER, starter)
    repo.git("add", "-f", "config.yaml")
    repo.commit("regression tests")
    passed = repo.invoke("test", python=python)
    assert passed.returncode == 0, output(passed)
    assert "6 cases: 6 identical, 0 changed" in passed.stdout
    package = "src/minilib" if layout == "src" else "minilib"
    repo.write(f"{package}/__init__.py", MINILIB.format(slope="0.02"))
    changed = repo.invoke("test", python=python)
    assert changed.returncode == 1, output(changed)
    assert "CHANGED tests/regression/test_regression.py::test_forward_no_grad[mini-mlp]" \
           in changed.stdout


def test_generated_workflow_passes_actionlint_and_zizmor(tmp_path: Path) -> None:
    repo = _library(tmp_path, "flat")
    assert _init(repo, "--shards", "3").returncode == 0
    workflow = repo.path / WORKFLOW
    assert "shard: [1, 2, 3]" in workflow.read_text()
    bin_folder = Path(sys.executable).parent
    for command in ([str(bin_folder / "actionlint"), str(workflow)],
                    [str(bin_folder / "zizmor"), "--offline", str(workflow)]):
        checked = subprocess.run(command, capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_init_outside_a_repository_root_or_without_a_package_says_what_to_do(
        tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "empty", tmp_path / "cache")
    repo.write("README.md", "no code yet\n")
    repo.commit("readme")
    bare = _init(repo)
    assert bare.returncode == 2 and "no Python package found" in bare.stderr, output(bare)
    (repo.path / "sub").mkdir()
    nested = subprocess.run([sys.executable, "-m", "regression", "init"], cwd=repo.path / "sub",
                            env=repo.env(), text=True, capture_output=True, check=False)
    assert nested.returncode == 2 and "is not the top of a git work tree" in nested.stderr
    assert "Traceback" not in output(bare) + output(nested)


def test_a_reference_that_is_heads_own_tag_is_said_so_with_the_tag_before_it(
        tmp_path: Path) -> None:
    repo = _library(tmp_path, "flat")  # v0.1 tags HEAD, and no tag comes before it
    first = _init(repo)
    assert first.returncode == 0, output(first)
    assert ("note: the reference is v0.1, the tag of HEAD itself, so the first `invoke test` "
            "compares HEAD with itself") in first.stdout, output(first)
    assert "no tag comes before it" in first.stdout
    repo.write("minilib/extra.py", "X = 1\n")
    repo.commit("minilib 0.2")
    repo.git("tag", "v0.2")
    second = _init(repo, "--force")
    assert "note: the reference is v0.2, the tag of HEAD itself" in second.stdout, output(second)
    assert "the tag before it is v0.1: set `reference: v0.1` in config.yaml" in second.stdout
    repo.write("minilib/extra.py", "X = 2\n")
    repo.commit("after the release")
    assert "note: the reference" not in _init(repo, "--force").stdout
    starter = (repo.path / STARTER).read_text()
    assert "    # return regression.randint(0, 1000, (2, 16))\n" in starter
