"""Seeds and kernel settings, applied identically before every case in both modes."""

from __future__ import annotations

import os
import random
import re
import sys
from typing import Any

import xxhash

from regression.config.settings import Determinism
from regression.errors import DeterminismError

CUBLAS_WORKSPACE = ":4096:8"


CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
_cublas_at_start: list[str] = []
"""CUBLAS_WORKSPACE_CONFIG as the process started on a GPU (the key holds it): cuBLAS reads
it as it makes each handle, so a later change would change kernels under the same key."""


def prepare_process(device: str) -> None:
    """Settings that must be in place before CUDA starts; a CUDA device must be visible."""
    if device == "cuda":
        _cublas_at_start[:] = [os.environ.setdefault(CUBLAS_VARIABLE, CUBLAS_WORKSPACE)]
        import torch

        if not torch.cuda.is_available():
            raise DeterminismError(no_cuda_message())


def no_cuda_message() -> str:
    """Why `device: cuda` cannot run here, and what to check."""
    import torch

    build = torch.version.cuda or "none: a CPU build"
    return ("the cases are to run on device cuda (config.yaml's device, or --device), but no "
            "CUDA device is visible to this process, so nothing would run on a GPU. Check "
            "`python -c 'import torch; print(torch.cuda.is_available())'`, that torch is a "
            "CUDA build (this one's CUDA: "
            f"{build}), that CUDA_VISIBLE_DEVICES does not hide the GPU and that the driver is "
            "loaded (nvidia-smi); or run on the cpu (device: cpu)")


def apply(settings: Determinism) -> None:
    """Seed every generator and fix thread count and algorithm choices."""
    import torch

    random.seed(settings.seed)
    _seed_torch(settings.seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(settings.seed)
    if torch.get_num_threads() != settings.threads:
        torch.set_num_threads(settings.threads)
    _use_deterministic_algorithms(settings.deterministic_algorithms)
    torch.backends.cudnn.deterministic = settings.deterministic_algorithms
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for flag in REDUCED_PRECISION:
        setattr(torch.backends.cuda.matmul, flag, False)


_queued: list[object] = []
"""What torch.manual_seed last queued for the accelerators not started yet: the seed, and
each one's queue of seeds as it left it (a seed queued since, by anyone, replaces it)."""
_BACKENDS = ("cuda", "xpu", "mtia")


def _seed_torch(seed: int) -> None:
    """torch.manual_seed(seed), without its cost where nothing would change: for each
    accelerator not started yet it queues the seed with a formatted stack trace (about 1 ms
    a case, most of the per-case cost), and the seed it queued last time is still queued."""
    import torch

    if _queued and _queued == [seed, _queues(torch)]:
        torch.default_generator.manual_seed(seed)
        return
    torch.manual_seed(seed)
    queues = _queues(torch)
    _queued[:] = [] if queues is None else [seed, queues]


def _queues(torch: Any) -> tuple[object, ...] | None:
    """Each accelerator's queue of seeds, by identity; None where one has started (so
    torch.manual_seed seeds it at once) or where torch keeps no such queue."""
    queues = []
    for name in _BACKENDS:
        backend = getattr(torch, name, None)
        tracker = getattr(backend, "_lazy_seed_tracker", None)
        if backend is None or tracker is None or backend.is_initialized():
            return None
        queues.append(_Same(tracker.call_order))
    if getattr(torch._C, "_has_mps", False) or \
            torch._C._get_privateuse1_backend_name() != "privateuseone":
        return None
    return tuple(queues)


class _Same:
    """An object compared by identity: a queue that torch replaced is another one."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    __hash__ = None  # type: ignore[assignment]


REDUCED_PRECISION = ("allow_fp16_reduced_precision_reduction",
                     "allow_bf16_reduced_precision_reduction")
"""Half-precision GPU matmuls that may reduce in half precision: off, as TF32 is, so a
reduction's precision is fixed by the key, not by whoever set the flag last."""


INDUCTOR_ENV = "TORCHINDUCTOR_DETERMINISTIC"


def _use_deterministic_algorithms(mode: bool) -> None:
    """torch.use_deterministic_algorithms(mode), without its import of TorchInductor's
    config (1.7 s, every process) when inductor is not loaded yet: inductor reads its
    `deterministic` setting from TORCHINDUCTOR_DETERMINISTIC when first imported."""
    import torch

    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if "torch._inductor.config" in sys.modules or set_flag is None:
        torch.use_deterministic_algorithms(mode)
        return
    value = "1" if mode else "0"
    if os.environ.get(INDUCTOR_ENV) != value:
        os.environ[INDUCTOR_ENV] = value
    set_flag(mode, warn_only=False)


def case_seed(seed: int, nodeid: str) -> int:
    """The seed of a case's own input generator: independent of order and other cases."""
    return xxhash.xxh64_intdigest(f"{seed}\0{nodeid}".encode()) & (2**63 - 1)


def drift(settings: Determinism) -> list[str]:
    """How torch's settings now differ from `settings`, as lines naming each setting."""
    import torch

    problems = []
    threads = torch.get_num_threads()
    if threads != settings.threads:
        problems.append(f"torch.get_num_threads() is {threads}, but config.yaml's "
                        f"determinism.threads is {settings.threads}")
    deterministic = torch.are_deterministic_algorithms_enabled()
    if deterministic != settings.deterministic_algorithms:
        problems.append(f"torch.are_deterministic_algorithms_enabled() is {deterministic}, but "
                        "config.yaml's determinism.deterministic_algorithms is "
                        f"{settings.deterministic_algorithms}")
    if torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32:
        problems.append("TF32 is enabled (torch.backends.cuda.matmul.allow_tf32 or "
                        "torch.backends.cudnn.allow_tf32), but the key says tf32=off")
    problems += [f"torch.backends.cuda.matmul.{flag} is True, but the key says reduced-"
                 "precision reductions are off" for flag in REDUCED_PRECISION
                 if getattr(torch.backends.cuda.matmul, flag, False)]
    now = os.environ.get(CUBLAS_VARIABLE) if _cublas_at_start else None
    if _cublas_at_start and now != _cublas_at_start[0]:
        problems.append(f"{CUBLAS_VARIABLE} is {now!r}, but the process started (and the key "
                        f"was made) with {_cublas_at_start[0]!r}")
    return problems


def require_unchanged(settings: Determinism) -> None:
    """Raise DeterminismError when something changed torch's settings after apply()."""
    problems = drift(settings)
    if problems:
        raise DeterminismError(
            "the determinism settings changed after torch-regression applied them, so this "
            "output would not match the cache key:\n  " + "\n  ".join(problems) +
            "\nSomething in the tests, a conftest.py (an autouse fixture) or the code under "
            "test changes them. Remove that call, or set the value you need in config.yaml's "
            "`determinism` section."
        )


_NO_DETERMINISTIC = re.compile(r"(\S+) does not have a deterministic implementation")


def nondeterministic_operation_hint(message: str) -> str:
    """What to do when torch refused an operation under deterministic algorithms; "" when
    `message` is not that refusal."""
    found = _NO_DETERMINISTIC.search(message)
    if not found:
        return ""
    return (f"torch has no deterministic implementation of {found.group(1)}, which the case "
            "calls, and config.yaml's determinism.deterministic_algorithms is true. Either use "
            "a deterministic alternative (for example index_add_/scatter_add_ with unique "
            "indices, or another operation that computes the same), or set "
            "determinism.deterministic_algorithms: false and run `invoke gen --repeat 2`: "
            "cases whose recordings then differ are stored as nondeterministic, never compared")
