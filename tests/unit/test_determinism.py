"""Tests of regression.environment.determinism: per-case seeds and the global settings applied."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest
import torch

from regression.config.settings import Determinism
from regression.environment import determinism
from regression.environment.determinism import CUBLAS_WORKSPACE, REDUCED_PRECISION, apply, \
    case_seed, drift, nondeterministic_operation_hint, prepare_process, require_unchanged
from regression.errors import DeterminismError


@pytest.fixture(autouse=True)
def restore_torch_state() -> Iterator[None]:
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.cudnn.allow_tf32)
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    reduced = [getattr(torch.backends.cuda.matmul, flag) for flag in REDUCED_PRECISION]
    cublas = list(determinism._cublas_at_start)
    rng = torch.get_rng_state()
    python_rng = random.getstate()
    yield
    random.setstate(python_rng)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)
    (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
     torch.backends.cudnn.allow_tf32) = cudnn
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    for flag, value in zip(REDUCED_PRECISION, reduced):
        setattr(torch.backends.cuda.matmul, flag, value)
    determinism._cublas_at_start[:] = cublas
    torch.set_rng_state(rng)


def test_case_seed_is_stable_across_processes_and_versions() -> None:
    # Pinned: a change here changes the inputs of every recorded case.
    assert case_seed(0, "t.py::a") == 2819275836087815113
    assert case_seed(7, "tests/test_zoo.py::test_forward[mlp-tiny]") == 4917239416361623878


def test_case_seed_differs_by_nodeid_and_by_seed() -> None:
    seeds = {case_seed(0, "t.py::a"), case_seed(0, "t.py::b"), case_seed(1, "t.py::a")}
    assert len(seeds) == 3


def test_case_seed_does_not_confuse_seed_and_nodeid_boundaries() -> None:
    assert case_seed(1, "1t.py::a") != case_seed(11, "t.py::a")


def test_case_seed_fits_a_torch_generator() -> None:
    seed = case_seed(123, "t.py::a[param]")
    assert 0 <= seed < 2**63
    torch.Generator().manual_seed(seed)


def test_apply_makes_global_generators_reproducible() -> None:
    settings = Determinism(seed=11, threads=torch.get_num_threads())
    apply(settings)
    first = (torch.randn(5), random.random())
    torch.randn(100)
    random.random()
    apply(settings)
    second = (torch.randn(5), random.random())
    assert torch.equal(first[0], second[0])
    assert first[1] == second[1]


def _queued_seed(backend: str) -> int:
    """The seed torch queued for an accelerator that has not started (from its closure)."""
    tracker = getattr(torch, backend)._lazy_seed_tracker
    callback = tracker.call_order[-1][0]
    return int(next(c.cell_contents for c in callback.__closure__ if isinstance(
        c.cell_contents, int)))


@pytest.mark.skipif(torch.cuda.is_initialized(), reason="needs CUDA not started")
def test_apply_queues_the_seed_for_accelerators_once() -> None:
    """Queuing costs torch a formatted stack trace per accelerator, most of a case's cost:
    while the seed queued before is still queued, it is not queued again."""
    settings = Determinism(seed=21, threads=torch.get_num_threads())
    apply(settings)
    queues = [getattr(torch, b)._lazy_seed_tracker.call_order for b in ("cuda", "xpu")]
    apply(settings)
    assert all(now is before for now, before in zip(
        [getattr(torch, b)._lazy_seed_tracker.call_order for b in ("cuda", "xpu")], queues))
    assert _queued_seed("cuda") == 21


@pytest.mark.skipif(torch.cuda.is_initialized(), reason="needs CUDA not started")
@pytest.mark.parametrize("backend", ["cuda", "xpu"])
def test_apply_queues_its_seed_again_after_another_was_queued(backend: str) -> None:
    settings = Determinism(seed=22, threads=torch.get_num_threads())
    apply(settings)
    getattr(torch, backend).manual_seed_all(5)  # the code under test seeds a device itself
    assert _queued_seed(backend) == 5
    apply(settings)
    assert _queued_seed(backend) == 22
    apply(Determinism(seed=23, threads=torch.get_num_threads()))
    assert _queued_seed(backend) == 23


def test_apply_uses_the_seed() -> None:
    apply(Determinism(seed=1, threads=torch.get_num_threads()))
    one = torch.randn(5)
    apply(Determinism(seed=2, threads=torch.get_num_threads()))
    assert not torch.equal(one, torch.randn(5))


def test_apply_sets_the_thread_count() -> None:
    wanted = 2 if torch.get_num_threads() != 2 else 1
    apply(Determinism(threads=wanted))
    assert torch.get_num_threads() == wanted


def test_apply_sets_algorithm_choices() -> None:
    apply(Determinism(threads=torch.get_num_threads(), deterministic_algorithms=True))
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic is True
    assert torch.backends.cudnn.benchmark is False
    assert torch.backends.cuda.matmul.allow_tf32 is False
    apply(Determinism(threads=torch.get_num_threads(), deterministic_algorithms=False))
    assert not torch.are_deterministic_algorithms_enabled()


def test_apply_seeds_numpy_when_it_is_imported() -> None:
    numpy = pytest.importorskip("numpy")
    apply(Determinism(seed=3, threads=torch.get_num_threads()))
    first = numpy.random.rand()
    apply(Determinism(seed=3, threads=torch.get_num_threads()))
    assert numpy.random.rand() == first


def test_prepare_process_sets_cublas_workspace_only_for_cuda(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    prepare_process("cpu")
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    _prepare_cuda()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE


def _prepare_cuda() -> None:
    """prepare_process("cuda"): without a CUDA device it refuses, after setting variables."""
    import torch

    if torch.cuda.is_available():
        prepare_process("cuda")
        return
    with pytest.raises(DeterminismError, match="no CUDA device is visible"):
        prepare_process("cuda")


def test_prepare_process_keeps_a_user_cublas_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    _prepare_cuda()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_no_drift_right_after_apply() -> None:
    settings = Determinism(seed=3, threads=1, deterministic_algorithms=True)
    apply(settings)
    assert drift(settings) == []
    require_unchanged(settings)


def test_drift_names_each_changed_setting() -> None:
    settings = Determinism(threads=1, deterministic_algorithms=True)
    apply(settings)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.allow_tf32 = True
    problems = drift(settings)
    assert len(problems) == 3
    assert "torch.get_num_threads() is 2, but config.yaml's determinism.threads is 1" \
        in problems[0]
    assert "deterministic_algorithms is True" in problems[1]
    assert "TF32" in problems[2]
    with pytest.raises(DeterminismError, match="changed after torch-regression applied them"):
        require_unchanged(settings)


@pytest.mark.parametrize("flag", REDUCED_PRECISION)
def test_a_reduced_precision_reduction_turned_on_after_apply_is_named(flag: str) -> None:
    settings = Determinism(threads=torch.get_num_threads(),
                           deterministic_algorithms=torch.are_deterministic_algorithms_enabled())
    apply(settings)
    assert getattr(torch.backends.cuda.matmul, flag) is False
    setattr(torch.backends.cuda.matmul, flag, True)
    assert drift(settings) == [f"torch.backends.cuda.matmul.{flag} is True, but the key says "
                               "reduced-precision reductions are off"]


def test_cublas_workspace_changed_after_start_up_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    _prepare_cuda()
    settings = Determinism(threads=torch.get_num_threads(),
                           deterministic_algorithms=torch.are_deterministic_algorithms_enabled())
    apply(settings)
    assert drift(settings) == []
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert drift(settings) == ["CUBLAS_WORKSPACE_CONFIG is ':16:8', but the process started "
                               f"(and the key was made) with {CUBLAS_WORKSPACE!r}"]


def test_torch_s_refusal_of_a_nondeterministic_operation_gets_both_ways_out() -> None:
    torch.use_deterministic_algorithms(True)
    with pytest.raises(RuntimeError) as refused:  # put_ with repeated indices, on the CPU
        torch.zeros(3).put_(torch.tensor([0, 0]), torch.ones(2))
    hint = nondeterministic_operation_hint(str(refused.value))
    assert hint.startswith("torch has no deterministic implementation of put_, which the case "
                           "calls")
    assert "deterministic alternative" in hint
    assert "determinism.deterministic_algorithms: false and run `invoke gen --repeat 2`" in hint
    assert nondeterministic_operation_hint("RuntimeError: shapes do not match") == ""
