"""What recording executes and reads: the reference's code and data, or hashed test code,
or the recording stops and names the file. Each way in is one case of a shared run."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import CONFIG, SUBJECT, TASKS, Repo, init_repo, output

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


def _subject_repo(path: Path, cache: Path) -> Repo:
    """The tiny subject of helpers.py with a flat layout, its files at HEAD."""
    repo = init_repo(path, cache)
    repo.write("config.yaml", CONFIG.format(reference="HEAD", path="."))
    repo.write("subj/__init__.py", SUBJECT.format(scale="1.0"))
    repo.write("tasks.py", TASKS)
    repo.write("pyproject.toml", "[tool.pytest.ini_options]\n")
    repo.write(".gitignore", "__pycache__/\n")
    return repo


@dataclass
class Run:
    """A finished command and the cache it used."""

    done: subprocess.CompletedProcess[str]
    cache: Path


@pytest.fixture(scope="module")
def mechanisms(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One recording whose tests reach the working tree by every mechanism at once."""
    root = tmp_path_factory.mktemp("mechanisms")
    repo = _subject_repo(root / "repo", root / "cache")
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
    repo = _subject_repo(root / "repo", root / "cache")
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


HELPED_TESTS = """\
import json
from pathlib import Path

import subj
from models import build
from test_other import shift  # a test module, imported as a helper


def test_built(regression):
    regression.check(subj.forward(build(regression.randn(2, 4)) + shift()))


def test_lazy(regression):
    import lazy  # imported only while the case runs

    regression.check(subj.forward(regression.randn(2, 4)) * lazy.FACTOR)


def test_data(regression):
    shift = json.loads((Path(__file__).parent / "data" / "in.json").read_text())["shift"]
    regression.check(subj.forward(regression.randn(2, 4) + shift))
"""


@pytest.fixture(scope="module")
def helped(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """A recorded repository whose tests use a helper module, a helper imported inside a
    case, and a data file of the test folder. Tests copy it with `_copy`."""
    root = tmp_path_factory.mktemp("helped")
    repo = _subject_repo(root / "repo", root / "cache")
    repo.write("tests/models.py", "def build(x):\n    return x\n")
    repo.write("tests/lazy.py", "FACTOR = 1.0\n")
    repo.write("tests/data/in.json", '{"shift": 0.0}\n')
    repo.write("tests/test_helped.py", HELPED_TESTS)
    repo.write("tests/test_other.py", """\
        import subj


        def shift():
            return 0.0


        def test_other(regression):
            regression.check(subj.forward(regression.randn(2, 4)))
        """)
    repo.commit("tests with helpers")
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    return repo


def _copy(repo: Repo, to: Path) -> Repo:
    shutil.copytree(repo.path, to / "repo", symlinks=True)
    shutil.copytree(repo.cache, to / "cache", symlinks=True)
    return Repo(to / "repo", to / "cache")


def test_an_edited_helper_re_records_instead_of_a_false_change(helped: Repo,
                                                                tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("tests/models.py", "def build(x):\n    return x * 2\n")
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "recording 4 of 4 cases" in output(done)
    assert "4 identical" in output(done)


def test_a_helper_edit_compensated_in_the_subject_is_caught(helped: Repo,
                                                            tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("tests/models.py", "def build(x):\n    return x * 2\n")  # exact: a power of 2
    subject = (repo.path / "subj" / "__init__.py").read_text()
    repo.write("subj/__init__.py", subject.replace("linear(x,", "linear(x / 2,"))
    done = repo.invoke("test")
    assert done.returncode == 1, output(done)
    assert "CHANGED tests/test_helped.py::test_built" in output(done)


def test_a_lazy_helper_and_a_data_file_of_the_tests_are_in_the_key(helped: Repo,
                                                                   tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("tests/lazy.py", "FACTOR = 2.0\n")
    repo.write("tests/data/in.json", '{"shift": 1.0}\n')
    done = repo.invoke("test", "--no-gen")
    assert done.returncode == 2, output(done)
    assert "4 of 4 cases have no valid reference" in done.stderr
    assert ("tests/test_helped.py::test_lazy: test code it uses changed: tests/data/in.json, "
            "tests/lazy.py") in done.stderr


def test_plain_pytest_names_the_changed_helper(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("tests/models.py", "def build(x):\n    return x + 1\n")
    done = repo.pytest("-p", "no:xdist", "--regression-no-gen", "tests")
    assert done.returncode == 1, output(done)
    assert ("test code it uses changed since the reference was recorded (tests/models.py); "
            "run `invoke gen` to record it again") in done.stdout


def test_the_key_covers_the_test_code(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    before = repo.invoke("key", "--explain")
    repo.write("tests/models.py", "def build(x):\n    return x + 1\n")
    after = repo.invoke("key", "--explain")
    assert before.returncode == after.returncode == 0, output(before) + output(after)
    assert before.stdout.splitlines()[-1] != after.stdout.splitlines()[-1]
    assert "test code: 4 Python files under tests" in after.stdout


def test_a_test_module_imported_by_another_is_its_helper(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    other = (repo.path / "tests" / "test_other.py").read_text()
    repo.write("tests/test_other.py", other.replace("return 0.0", "return 1.0"))
    done = repo.invoke("test", "--no-gen")
    assert done.returncode == 2, output(done)
    assert ("tests/test_helped.py::test_built: test code it uses changed: "
            "tests/test_other.py") in done.stderr
    assert "tests/test_other.py::test_other: its test file or a conftest.py changed" in \
        done.stderr


@pytest.mark.slow
def test_xdist_workers_record_in_the_worktree_and_watch_it(helped: Repo, tmp_path: Path) -> None:
    repo = _copy(helped, tmp_path)
    repo.write("subj/scale.json", '{"scale": 1.0}\n')
    repo.write("tests/test_reads.py", """\
        import json
        from pathlib import Path

        import subj


        def test_relative(regression):
            scale = json.loads(Path("subj/scale.json").read_text())["scale"]
            regression.check(subj.forward(regression.randn(2, 4)) * scale)


        def test_absolute(regression):
            data = Path(__file__).resolve().parents[1] / "subj" / "__init__.py"
            regression.check(subj.forward(regression.randn(2, 4)) * len(data.read_text()))
        """)
    repo.commit("a relative and an absolute read")
    done = repo.invoke("gen", "--reference", "HEAD", "--workers", "2")
    assert done.returncode == 2, output(done)
    assert "  subj/__init__.py (run; the subject's)\n" in done.stderr
    assert "scale.json" not in done.stderr  # relative: the worktree's copy
    assert "Traceback" not in output(done)
