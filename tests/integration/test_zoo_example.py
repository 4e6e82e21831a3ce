"""The example zoo end to end: the issue's acceptance checks, on a copy of this project."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest
from helpers import Repo, output, stored_files

pytestmark = pytest.mark.slow

LINEAR_PATCH = """
import torch as _torch

_linear = _torch.nn.functional.linear
_torch.nn.functional.linear = lambda *a, **k: _linear(*a, **k) * (1 + 1e-7)
"""

HARMLESS = """

def _unused_helper() -> int:
    return 42
"""


@pytest.fixture(scope="module")
def zoo(zoo_repo_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Repo:
    path = tmp_path_factory.mktemp("zoo-run") / "repo"
    shutil.copytree(zoo_repo_template, path)
    repo = Repo(path, path.parent / "cache")
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    return repo


@pytest.fixture
def zoo_init(zoo: Repo) -> Iterator[Path]:
    path = zoo.path / "zoo" / "__init__.py"
    original = path.read_bytes()
    yield path
    path.write_bytes(original)


def test_every_case_is_identical(zoo: Repo) -> None:
    done = zoo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "every case is bit-identical to the reference" in done.stdout


def test_second_gen_rewrites_no_stored_file(zoo: Repo) -> None:
    stamps = stored_files(zoo.cache)
    assert len(stamps) > 26  # the entry, and a record and a tensor file per case
    done = zoo.invoke("gen")
    assert "nothing generated" in done.stdout, output(done)
    assert stored_files(zoo.cache) == stamps


def test_linear_scaled_by_one_ulp_fails_and_names_the_cases(zoo: Repo, zoo_init: Path) -> None:
    zoo_init.write_text(zoo_init.read_text() + LINEAR_PATCH)
    done = zoo.invoke("test")
    text = output(done)
    assert done.returncode == 1, text
    assert "CHANGED tests/regression/test_zoo.py::test_forward[mlp-tiny]" in text
    assert "CHANGED tests/regression/test_zoo.py::test_forward[vit-tiny]" in text
    # the five test_init cases check weights only, which a patched linear leaves alone
    assert "26 cases: 5 identical, 21 changed, 0 not in reference, 0 errors" in text
    assert text.count("\nCHANGED tests/regression/test_zoo.py::") == 21
    assert "CHANGED tests/regression/test_zoo.py::test_init" not in text


def test_harmless_addition_passes(zoo: Repo, zoo_init: Path) -> None:
    zoo_init.write_text(zoo_init.read_text() + HARMLESS)
    done = zoo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "every case is bit-identical" in done.stdout


def test_two_workers_record_every_case_and_report_each_once(zoo: Repo, zoo_init: Path,
                                                            tmp_path: Path) -> None:
    fresh = Repo(zoo.path, tmp_path / "cache")  # an empty cache: the workers record it all
    gen = fresh.invoke("gen", "--workers", "2")
    assert gen.returncode == 0, output(gen)
    assert "recorded 26 cases, reused 0" in gen.stdout
    assert "nothing generated" in fresh.invoke("gen").stdout  # every case was stored
    zoo_init.write_text(zoo_init.read_text() + LINEAR_PATCH)
    # xdist in a real invoke: the workers check what the workers stored, the controller
    # reports each case, the summary and each annotation once
    changed = fresh.invoke("test", "--workers", "2", env={"GITHUB_ACTIONS": "true"},
                           process=True)
    text = output(changed)
    assert changed.returncode == 1, text
    assert text.count("26 cases: 5 identical, 21 changed, 0 not in reference, 0 errors") == 1
    assert text.count("CHANGED tests/regression/test_zoo.py::test_forward[mlp-tiny]") == 1
    # the controller writes one annotation per changed case, from what the workers sent it
    changed_cases = text.count("\nCHANGED tests/regression/test_zoo.py::")
    annotations = [line for line in changed.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == changed_cases > 0
    assert sum("%3A%3Atest_forward[mlp-tiny] changed" in a for a in annotations) == 1
