"""Determinism settings in a fresh interpreter: what a test process cannot show, as it may
have loaded TorchInductor already (torch.use_deterministic_algorithms loads it)."""

from __future__ import annotations

import os
import subprocess
import sys

INDUCTOR_PROBE = """
import os, sys, torch
from regression.config.settings import Determinism
from regression.environment.determinism import apply

def inductor_loaded():
    return "torch._inductor.config" in sys.modules

os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"  # left over: the next apply must override it
apply(Determinism(seed=0, threads=1, deterministic_algorithms=False))
print(inductor_loaded(), torch.are_deterministic_algorithms_enabled(),
      os.environ["TORCHINDUCTOR_DETERMINISTIC"])
apply(Determinism(seed=0, threads=1, deterministic_algorithms=True))
print(inductor_loaded(), torch.are_deterministic_algorithms_enabled(),
      os.environ["TORCHINDUCTOR_DETERMINISTIC"])
import torch._inductor.config as inductor
print(inductor.deterministic)
"""


def test_apply_leaves_inductor_unloaded_and_inductor_follows_the_setting() -> None:
    # Both settings in one process: each leaves inductor unloaded and hands it the setting
    # through the variable it reads when it loads; loaded last, it follows the last one.
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    done = subprocess.run([sys.executable, "-c", INDUCTOR_PROBE], env=env,
                          capture_output=True, text=True, check=True, timeout=300)
    assert done.stdout.splitlines() == ["False False 0", "False True 1", "True"]
