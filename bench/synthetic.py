"""A synthetic suite of N small regression cases in a git repository, for the scale benches.

Each case checks one float32 tensor of --kib KiB made from the case's own generator; the
subject package does almost nothing, so what is measured is the tool's cost per case.
"""

from __future__ import annotations

from pathlib import Path

from zoo_repo import NO_HYPOTHESIS, committed

__all__ = ["NO_HYPOTHESIS", "synthetic_repo"]

CONFIG = """reference: HEAD
subject:
  packages: [subject]
  path: .
tests: [tests]
determinism:
  seed: 0
  threads: 1
  deterministic_algorithms: true
"""

TEST = """import pytest
import subject


@pytest.mark.parametrize("i", range({count}))
def test_case(i, regression):
    regression.check(subject.scale(regression.randn({elements})))
"""

SUBJECT = """def scale(x):
    return x * 2
"""

# A stand-in for the plugin's fixture, for plain pytest: the same inputs and settings, a
# check() that does nothing: plain pytest at its fastest.
PLAIN_FIXTURE = '''
import os, random
import pytest, torch, xxhash


class Plain:
    def __init__(self, nodeid):
        seed = xxhash.xxh64_intdigest(f"0\\0{nodeid}".encode()) & (2**63 - 1)
        self.generator = torch.Generator().manual_seed(seed)

    def randn(self, *size):
        return torch.randn(*size, generator=self.generator)

    def check(self, value, name=None):
        pass


@pytest.fixture
def regression(request):
    random.seed(0)
    # the CPU generator only: torch.manual_seed also queues the seed, with a formatted stack
    # trace, for each accelerator not started yet (about 0.5-1 ms a case); the plugin seeds
    # that way once, then as here, so plain pytest is not made slower than it need be
    torch.default_generator.manual_seed(0)
    torch.set_num_threads(1)
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    torch._C._set_deterministic_algorithms(True, warn_only=False)
    return Plain(request.node.nodeid)
'''


def synthetic_repo(folder: Path, count: int, kib: int = 16) -> Path:
    """`count` cases of `kib` KiB each, committed (reference: HEAD) in `folder`."""
    files = {"config.yaml": CONFIG, "subject/__init__.py": SUBJECT,
             "tests/test_cases.py": TEST.format(count=count, elements=kib * 256),
             "tasks.py": "from regression.tasks import ns\n",
             "pyproject.toml": "[tool.pytest.ini_options]\n",
             "plain/fixture.py": PLAIN_FIXTURE,
             ".gitignore": "__pycache__/\n.regression-cache/\n"}
    return committed(folder, files, "suite")
