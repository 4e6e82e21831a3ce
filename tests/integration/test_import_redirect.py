"""The reference's subject is imported from the worktree, whatever sys.path says; and what
else recording executes and reads of the subject is the reference's, or the recording stops
and names the file."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (CONFIG, SUBJECT, TASKS, TESTS, Repo, flat_subject_repo, init_repo,
                     installable_pyproject, output, venv_with_wheel)

ROOT_CONFTEST = """\
import subj  # imported while conftest loads: before any test, with rootdir first on sys.path


def pytest_report_header(config):
    return f"subj from {subj.__file__}"
"""


def _src_layout_repo(tmp_path: Path) -> Repo:
    repo = init_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("config.yaml", CONFIG.format(reference="HEAD", path="src"))
    repo.write("src/subj/__init__.py", SUBJECT.format(scale="1.0"))
    repo.write("tests/test_subj.py", TESTS)
    repo.write("conftest.py", ROOT_CONFTEST)
    repo.write("tasks.py", TASKS)
    repo.write(".gitignore", "__pycache__/\n*.egg-info/\nbuild/\n")
    repo.write("pyproject.toml", installable_pyproject("subj", "src"))
    repo.commit("src layout")
    return repo


def _venv_with_editable_install(repo: Repo, folder: Path) -> str:
    """A virtual environment that sees this one's packages, with the subject editable."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", where], check=True, capture_output=True,
                             text=True).stdout.strip()
    parent = sysconfig.get_path("purelib")
    Path(purelib, "parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-e", str(repo.path)], check=True, env=repo.env())
    return python


@pytest.mark.slow
def test_editable_src_layout_with_root_conftest_records_the_reference(tmp_path: Path) -> None:
    repo = _src_layout_repo(tmp_path)
    python = _venv_with_editable_install(repo, tmp_path / "venv")
    where = subprocess.run([python, "-c", "import subj; print(subj.__file__)"], cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where == str(repo.path / "src" / "subj" / "__init__.py")  # the editable install
    repo.write("src/subj/__init__.py", SUBJECT.format(scale="1.5"))
    before = repo.snapshot()
    done = repo.invoke("test", python=python)
    assert done.returncode == 1, output(done)  # the candidate's change is seen: the
    assert "1 changed" in output(done)          # reference really came from the worktree
    assert repo.snapshot() == before


def test_subject_imported_around_the_redirect_fails_the_recording(subject_repo: Repo) -> None:
    subject_repo.write("conftest.py", """\
        import importlib.util
        import sys
        from pathlib import Path

        spec = importlib.util.spec_from_file_location(
            "subj", Path(__file__).parent / "subj" / "__init__.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["subj"] = module
        spec.loader.exec_module(module)
        """)
    done = subject_repo.invoke("gen")
    assert done.returncode == 2, output(done)
    assert "imported from outside the reference worktree" in done.stderr
    assert "subj:" in done.stderr
    assert "Nothing was stored" in done.stderr
    assert not list(subject_repo.cache.rglob("*.safetensors"))


@pytest.mark.slow
def test_installed_from_a_wheel_with_warnings_as_errors(subject_repo: Repo, tmp_path: Path,
                                                        our_wheel: Path) -> None:
    python = venv_with_wheel(our_wheel, tmp_path / "venv")
    where = subprocess.run([python, "-c", "import regression; print(regression.__file__)"],
                           cwd=subject_repo.path, check=True, capture_output=True,
                           text=True).stdout.strip()
    assert where.startswith(str(tmp_path / "venv"))  # the wheel's copy, not this checkout
    subject_repo.write("pyproject.toml", '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    subject_repo.commit("warnings are errors")
    for task in ("gen", "test"):
        done = subject_repo.invoke(task, "--reference", "HEAD", python=python)
        assert done.returncode == 0, output(done)
        assert "Warning" not in output(done)


# What recording executes and reads: the reference's code and data, or the recording stops
# and names the file. Each way in is one case of a shared run.


ROOT_OF_TESTS = "ROOT = Path(__file__).resolve().parents[1]  # the working tree\n"

# Each test reaches one file of the subject's folder by an absolute path into the working
# tree, by a mechanism that is not an import by name: (test file body, file it reaches).
MECHANISMS = {
    "spec_from_file_location": ("""\
        import importlib.util
        spec = importlib.util.spec_from_file_location("other_name", ROOT / "subj" / "alt.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # never put into sys.modules
        VALUE = module.FACTOR
        """, "subj/alt.py (run; the subject's)"),
    "runpy_run_path": ("""\
        import runpy
        VALUE = runpy.run_path(str(ROOT / "subj" / "runme.py"))["FACTOR"]
        """, "subj/runme.py (run; the subject's)"),
    "exec_of_open": ("""\
        space = {}
        exec(open(ROOT / "subj" / "execme.py").read(), space)
        VALUE = space["FACTOR"]
        """, "subj/execme.py (run; the subject's)"),
    "source_file_loader": ("""\
        import importlib.machinery
        import importlib.util
        loader = importlib.machinery.SourceFileLoader("loaded", str(ROOT / "subj" / "sfl.py"))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader("loaded", loader))
        loader.exec_module(module)
        VALUE = module.FACTOR
        """, "subj/sfl.py (run; the subject's)"),
    "sys_path_insert": ("""\
        import sys
        sys.path.insert(0, str(ROOT / "subj"))  # as a .pth file would
        import inner
        VALUE = inner.FACTOR
        """, "inner (subj/inner.py)"),  # in sys.modules: named as a module
    "path_read_text": ("""\
        import json
        VALUE = json.loads((ROOT / "subj" / "scale.json").read_text())["scale"]
        """, "subj/scale.json (read; the subject's)"),
    "torch_load": ("""\
        import torch
        VALUE = float(torch.load(ROOT / "subj" / "weights.pt")[0])
        """, "subj/weights.pt (read; the subject's)"),
    "safetensors_load_file": ("""\
        from safetensors.torch import load_file
        VALUE = float(load_file(str(ROOT / "subj" / "w.safetensors"))["w"][0])
        """, "subj/w.safetensors (read; the subject's)"),
    "binary_open": ("""\
        with open(ROOT / "subj" / "raw.bin", "rb") as stream:
            VALUE = stream.read()[0] / 2.0
        """, "subj/raw.bin (read; the subject's)"),
    "os_open": ("""\
        import os
        handle = os.open(ROOT / "data" / "offsets.txt", os.O_RDONLY)
        VALUE = float(os.read(handle, 8))
        os.close(handle)
        """, "data/offsets.txt (read)"),
}

TEST_TEMPLATE = """\
from pathlib import Path

import subj

{root}{body}

def test_{name}(regression):
    regression.check(subj.forward(regression.randn(2, 4)) * VALUE)
"""


def _write_binaries(repo: Repo) -> None:
    import torch
    from safetensors.torch import save_file

    torch.save(torch.ones(3), repo.path / "subj" / "weights.pt")
    save_file({"w": torch.ones(3)}, str(repo.path / "subj" / "w.safetensors"))
    (repo.path / "subj" / "raw.bin").write_bytes(b"\x02\x00")


@dataclass
class Run:
    """A finished command and the cache it used."""

    done: subprocess.CompletedProcess[str]
    cache: Path


@pytest.fixture(scope="module")
def mechanisms(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One recording whose tests reach the working tree by every mechanism at once."""
    root = tmp_path_factory.mktemp("mechanisms")
    repo = flat_subject_repo(root / "repo", root / "cache")
    for name in ("alt", "runme", "execme", "sfl", "inner", "runmod"):
        repo.write(f"subj/{name}.py", "FACTOR = 1.0\n")
    repo.write("subj/scale.json", '{"scale": 1.0}\n')
    repo.write("data/offsets.txt", "1.0\n")
    _write_binaries(repo)
    for name, (body, _) in MECHANISMS.items():
        repo.write(f"tests/test_{name}.py", TEST_TEMPLATE.format(
            root=ROOT_OF_TESTS, body=textwrap.dedent(body), name=name))
    repo.write("tests/test_run_module.py", """\
        import runpy

        import subj


        def test_run_module(regression):  # by name: through the redirect, the reference's
            factor = runpy.run_module("subj.runmod")["FACTOR"]
            regression.check(subj.forward(regression.randn(2, 4)) * factor)
        """)
    repo.commit("tests that reach the subject's files by path")
    return Run(repo.invoke("gen"), root / "cache")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_a_file_reached_by_path_stops_the_recording(mechanisms: Run, name: str) -> None:
    done = mechanisms.done
    assert done.returncode == 2, output(done)
    assert "read while recording at the reference" in done.stderr
    assert f"  {MECHANISMS[name][1]}\n" in done.stderr
    assert "Nothing was stored" in done.stderr and "`harness`" in done.stderr
    assert "Traceback" not in output(done)
    assert not list(mechanisms.cache.rglob("*.safetensors"))


def test_a_subject_module_run_by_name_is_the_reference_s(mechanisms: Run) -> None:
    done = mechanisms.done
    assert done.returncode == 2, output(done)
    assert "subj/runme.py (run; the subject's)" in done.stderr  # runpy.run_path: named
    assert "runmod" not in done.stderr  # runpy.run_module goes through the redirect


RELATIVE_TESTS = """\
import json
import runpy

import torch

import subj
from subj import data


def test_open_relative(regression):
    with open("subj/scale.json") as stream:  # relative to the working folder
        scale = json.load(stream)["scale"]
    regression.check(subj.forward(regression.randn(2, 4)) * scale)


def test_subject_reads_relative(regression):
    regression.check(subj.forward(regression.randn(2, 4)) * data.scale())


def test_torch_load_relative(regression):
    regression.check(subj.forward(regression.randn(2, 4)) * torch.load("subj/weights.pt"))


def test_run_module(regression):
    factor = runpy.run_module("subj.runmod")["FACTOR"]
    regression.check(subj.forward(regression.randn(2, 4)) * factor)
"""


@pytest.fixture(scope="module")
def relative_reads(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The subject's files, read by relative paths, changed in the working tree only."""
    import torch

    root = tmp_path_factory.mktemp("relative")
    repo = flat_subject_repo(root / "repo", root / "cache")
    repo.write("subj/data.py", """\
        import json
        from pathlib import Path


        def scale():
            return json.loads(Path("subj/scale.json").read_text())["scale"]
        """)
    repo.write("subj/runmod.py", "FACTOR = 1.0\n")
    repo.write("subj/scale.json", '{"scale": 1.0}\n')
    torch.save(torch.ones(3), repo.path / "subj" / "weights.pt")
    repo.write("tests/test_relative.py", RELATIVE_TESTS)
    repo.commit("the subject reads its data by relative paths")
    repo.write("subj/runmod.py", "FACTOR = 2.0\n")
    repo.write("subj/scale.json", '{"scale": 2.0}\n')
    torch.save(torch.full((3,), 2.0), repo.path / "subj" / "weights.pt")
    return Run(repo.invoke("test", "--reference", "HEAD"), root / "cache")


@pytest.mark.parametrize("case", ["test_open_relative", "test_subject_reads_relative",
                                  "test_torch_load_relative", "test_run_module"])
@pytest.mark.slow
def test_relative_reads_while_recording_are_the_reference_s(relative_reads: Run,
                                                            case: str) -> None:
    done = relative_reads.done
    assert done.returncode == 1, output(done)
    assert f"CHANGED tests/test_relative.py::{case}" in output(done)
    assert "4 changed" in output(done)
