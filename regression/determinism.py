"""Seeds and kernel settings, applied identically before every case in both modes."""

from __future__ import annotations

import os
import random
import sys

import xxhash

from .config import Determinism

CUBLAS_WORKSPACE = ":4096:8"


def prepare_process(device: str) -> None:
    """Settings that must be in place before CUDA starts."""
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


def apply(settings: Determinism) -> None:
    """Seed every generator and fix thread count and algorithm choices."""
    import torch

    random.seed(settings.seed)
    torch.manual_seed(settings.seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(settings.seed)
    if torch.get_num_threads() != settings.threads:
        torch.set_num_threads(settings.threads)
    torch.use_deterministic_algorithms(settings.deterministic_algorithms)
    torch.backends.cudnn.deterministic = settings.deterministic_algorithms
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def case_seed(seed: int, nodeid: str) -> int:
    """The seed of a case's own input generator: independent of order and other cases."""
    return xxhash.xxh64_intdigest(f"{seed}\0{nodeid}".encode()) & (2**63 - 1)
