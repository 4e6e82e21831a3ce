"""Devices: `regression.device` and --device, the refusal of `device: cuda` without a GPU,
torch's refusal of a nondeterministic operation, and (where a CUDA device is visible) the zoo
recorded, checked, changed, explained and repeated on the GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import Repo, output

NO_GPU = not torch.cuda.is_available()
gpu = pytest.mark.skipif(NO_GPU, reason="needs a CUDA device: none is visible here "
                                        "(torch.cuda.is_available() is False)")

PUT = """\
import torch
from subj.spread import spread


def test_put(regression):
    values = torch.zeros(4, device=regression.device)
    spread(values, torch.tensor([0, 0], device=regression.device), regression.randn(2))
    regression.check(values)
"""
# At the reference the subject adds the values with an operation torch runs deterministically;
# the working tree's subject puts them with put_, which it cannot: one recording, which
# succeeds, and the check run names the operation.
SPREAD = """\
import torch


def spread(values: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> None:
    values.{call}
"""


def _device_cuda(repo: Repo) -> None:
    repo.write("config.yaml", (repo.path / "config.yaml").read_text() + "device: cuda\n")


@pytest.mark.slow
@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a CUDA device")
def test_device_cuda_without_a_gpu_is_refused_not_run_on_the_cpu(subject_repo: Repo) -> None:
    _device_cuda(subject_repo)
    for done in (subject_repo.pytest("tests"), subject_repo.invoke("key"),
                 subject_repo.invoke("test"), subject_repo.invoke("key", "--device", "cuda")):
        text = output(done)
        assert done.returncode in (2, 4), text  # pytest's usage error; the tasks' 2
        assert "to run on device cuda (config.yaml's device, or --device), but no CUDA " \
               "device is visible" in text
        assert "CUDA_VISIBLE_DEVICES" in text and "(device: cpu)" in text
        assert "Traceback" not in text and "INTERNALERROR" not in text


def test_device_flag_overrides_config_and_a_bad_device_is_refused(subject_repo: Repo) -> None:
    _device_cuda(subject_repo)
    on_cpu = subject_repo.invoke("key", "--explain", "--device", "cpu")
    assert on_cpu.returncode == 0, output(on_cpu)
    assert "device: cpu" in on_cpu.stdout.splitlines()
    bad = subject_repo.invoke("key", "--device", "tpu")
    assert bad.returncode == 2 and "--device 'tpu': give one of cpu, cuda" in bad.stderr
    variable = subject_repo.invoke("key", env={"REGRESSION_DEVICE": "gpu"})
    assert variable.returncode == 2, output(variable)
    assert "$REGRESSION_DEVICE (or --device): 'gpu' is not a device" in variable.stderr


def test_an_operation_torch_cannot_run_deterministically_is_named_with_the_ways_out(
        subject_repo: Repo) -> None:
    subject_repo.write("subj/spread.py", SPREAD.format(call="index_add_(0, index, source)"))
    subject_repo.write("tests/test_put.py", PUT)
    subject_repo.commit("a subject function the test calls")
    subject_repo.git("tag", "-f", "v1")
    subject_repo.write("subj/spread.py", SPREAD.format(call="put_(index, source)"))
    done = subject_repo.invoke("test")
    text = output(done)
    assert done.returncode == 1, text
    assert "failed at the reference" not in text, text  # the reference recorded it
    assert "2 cases: 1 identical, 0 changed, 0 not in reference, 1 error" in text, text
    assert "ERROR tests/test_put.py::test_put: RuntimeError: put_ does not have a " \
           "deterministic implementation" in text
    assert "torch has no deterministic implementation of put_, which the case calls" in text
    assert "run `invoke gen --repeat 2`" in text


INDEX_ADD = """\
import torch


def test_index_add(regression):
    values = torch.zeros(64, device=regression.device)
    index = regression.randint(0, 8, (100_000,))
    values.index_add_(0, index, regression.randn(100_000))
    regression.check(values)
"""
SOFTMAX = "        attn = scores.softmax(dim=-1)\n"
TF32 = """\
import torch


def test_tf32_on(regression):
    torch.backends.cuda.matmul.allow_tf32 = True
    regression.check(regression.randn(2, 2) @ regression.randn(2, 2))
"""


@pytest.fixture
def zoo_on_gpu(zoo_repo_template: Path, tmp_path: Path) -> Repo:
    path = tmp_path / "repo"
    shutil.copytree(zoo_repo_template, path)
    repo = Repo(path, tmp_path / "cache")
    _device_cuda(repo)
    repo.commit("on the GPU")
    return repo


@gpu
def test_the_zoo_on_cuda_is_recorded_checked_and_a_change_caught_and_explained(
        zoo_on_gpu: Repo) -> None:
    keys = {d: zoo_on_gpu.invoke("key", "--device", d).stdout.strip() for d in ("cpu", "cuda")}
    assert keys["cpu"] != keys["cuda"], keys
    explained = zoo_on_gpu.invoke("key", "--explain").stdout
    assert "device: cuda " in explained and "cuBLAS" in explained and "driver" in explained
    assert "not in the key: GPU 0 of " in explained
    same = zoo_on_gpu.invoke("test")
    assert same.returncode == 0, output(same)
    assert "every case is bit-identical to the reference" in same.stdout
    layers = zoo_on_gpu.path / "zoo" / "layers.py"
    text = layers.read_text()
    layers.write_text(text.replace(SOFTMAX, SOFTMAX.rstrip() + " * (1 + 1e-6)\n"))
    changed = zoo_on_gpu.invoke("test")
    assert changed.returncode == 1, output(changed)
    assert "CHANGED tests/regression/test_zoo.py::test_forward[vit-tiny]" in changed.stdout
    why = zoo_on_gpu.invoke("explain", "tests/regression/test_zoo.py::test_forward[vit-tiny]")
    assert why.returncode == 0, output(why)
    assert "ViT.blocks.0.attn" in why.stdout


@gpu
def test_repeat_finds_index_add_nondeterministic_on_cuda_without_deterministic_algorithms(
        zoo_on_gpu: Repo) -> None:
    config = (zoo_on_gpu.path / "config.yaml").read_text()
    zoo_on_gpu.write("config.yaml", config.replace("determinism:\n",
                                                   "determinism:\n  deterministic_algorithms: "
                                                   "false\n"))
    zoo_on_gpu.write("tests/regression/test_scatter.py", INDEX_ADD)
    zoo_on_gpu.commit("index_add_, deterministic algorithms off")
    done = zoo_on_gpu.invoke("gen", "--repeat", "3", "-k", "index_add or mlp")
    assert done.returncode == 0, output(done)
    assert "nondeterministic: tests/regression/test_scatter.py::test_index_add" in done.stdout
    assert "nondeterministic: tests/regression/test_zoo.py" not in done.stdout


@gpu
def test_a_case_that_turns_tf32_on_is_stopped_with_the_setting_named(zoo_on_gpu: Repo) -> None:
    zoo_on_gpu.write("tests/regression/test_tf32.py", TF32)
    zoo_on_gpu.commit("a case that turns TF32 on")
    done = zoo_on_gpu.invoke("test", "-k", "tf32")
    assert done.returncode != 0, output(done)
    assert "TF32 is enabled" in output(done)
