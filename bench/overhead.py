"""What torch-regression costs over plain pytest, measured side by side in one run.

1. Warm `invoke test` (every reference cached) vs plain pytest running the same forwards
   with the plugin disabled and a stand-in `regression` fixture whose check() does nothing.
2. Cold `invoke test` (empty cache) vs the open_clip-style flow: one pytest process in a
   worktree of the reference that saves every output with torch.save, then one plain pytest
   process in the working tree that compares with torch.equal.
3. How many processes import torch in a warm and in a cold `invoke test`.

Rounds are interleaved (each round runs every variant once) and the medians are compared,
so machine noise hits all variants alike. Prints ratios of wall time and of CPU time
(user + system of the processes a variant starts: steadier on a busy machine); quote those,
not seconds.

Usage: .venv/bin/python bench/overhead.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from zoo_repo import NO_HYPOTHESIS, zoo_repo


# A stand-in for the plugin's fixture: the same inputs, a check() that records or compares
# with torch.save / torch.equal, as a project without torch-regression would do it.
PLAIN_FIXTURE = '''
import os, pathlib, random
import pytest, torch, xxhash

OUTPUTS = {}
MODE = os.environ.get("PLAIN_MODE", "none")
STORE = pathlib.Path(os.environ.get("PLAIN_STORE", "outputs.pt"))


class Plain:
    def __init__(self, nodeid):
        seed = xxhash.xxh64_intdigest(f"0\\0{nodeid}".encode()) & (2**63 - 1)
        self.generator = torch.Generator().manual_seed(seed)
        self.nodeid, self.count = nodeid, 0
        self.device = torch.device("cpu")  # the fixture's `device`, as the zoo uses it

    def randn(self, *size, dtype=None):
        return torch.randn(*size, generator=self.generator, dtype=dtype)

    def rand(self, *size, dtype=None):
        return torch.rand(*size, generator=self.generator, dtype=dtype)

    def randint(self, low, high, size, dtype=torch.int64):
        size = (size,) if isinstance(size, int) else tuple(size)
        return torch.randint(low, high, size, generator=self.generator, dtype=dtype)

    def check(self, value, name=None):
        key = f"{self.nodeid}::{name or self.count}"
        self.count += 1
        if MODE == "record":
            OUTPUTS[key] = value
        elif MODE == "compare":
            assert _equal(REFERENCE[key], value), key


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


REFERENCE = torch.load(STORE, weights_only=True) if MODE == "compare" else {}


@pytest.fixture
def regression(request):
    random.seed(0)
    # the CPU generator only, as the plugin seeds after its first case: torch.manual_seed
    # also queues the seed, with a formatted stack trace, for each accelerator not started
    # yet (0.5 to 1 ms a case), which made this baseline slower than need be
    torch.default_generator.manual_seed(0)
    torch.set_num_threads(1)
    # As the plugin does it: torch.use_deterministic_algorithms would first import
    # TorchInductor's config (1.7 s); measured that way, plain pytest would look slower.
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    torch._C._set_deterministic_algorithms(True, warn_only=False)
    return Plain(request.node.nodeid)


def pytest_sessionfinish(session):
    if MODE == "record":
        torch.save(OUTPUTS, STORE)
'''

# Appends the process id to a file when a process imports torch (found on PYTHONPATH).
SITECUSTOMIZE = '''
import os, sys
class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            with open(os.environ["TORCH_IMPORTS"], "a") as log:
                log.write(f"{os.getpid()}\\n")
            sys.meta_path.remove(self)
        return None
sys.meta_path.insert(0, _Watch())
'''


def run(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


class Bench:
    """The variants, as commands run in one zoo repository."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.repo = zoo_repo(folder, {
            ".gitignore": "__pycache__/\n.regression-cache/\n", "plain/fixture.py": PLAIN_FIXTURE})
        self.cache = folder / "cache"
        self.python = sys.executable
        watch = folder / "watch"
        watch.mkdir()
        (watch / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.imports = folder / "torch-imports.txt"
        self.env = {**{k: v for k, v in os.environ.items()
                       if not k.startswith(("REGRESSION_", "PYTEST_"))},
                    "REGRESSION_CACHE_DIR": str(self.cache), "PYTHONDONTWRITEBYTECODE": "1",
                    "PYTHONPATH": str(watch), "TORCH_IMPORTS": str(self.imports),
                    **NO_HYPOTHESIS}

    def invoke_test(self) -> None:
        run([self.python, "-m", "invoke", "test"], self.repo, self.env)

    def warm(self) -> None:
        self.invoke_test()

    def cold(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)
        self.invoke_test()

    def plain(self, mode: str = "none", cwd: Path | None = None) -> None:
        env = {**self.env, "PLAIN_MODE": mode, "PLAIN_STORE": str(self.folder / "outputs.pt")}
        where = cwd or self.repo
        run([self.python, "-m", "pytest", "-q", "-p", "no:regression", "-p", "no:cacheprovider",
             "-p", "plain.fixture", "tests/regression"], where,
            {**env, "PYTHONPATH": f"{where}:{env['PYTHONPATH']}"})

    def open_clip_flow(self) -> None:
        """Record at a worktree of the reference, then compare in the working tree."""
        worktree = self.folder / "reference"
        run(["git", "worktree", "add", "-q", "--detach", str(worktree), "HEAD"], self.repo,
            self.env)
        try:
            self.plain("record", cwd=worktree)
        finally:
            run(["git", "worktree", "remove", "--force", str(worktree)], self.repo, self.env)
        self.plain("compare")

    def torch_processes(self, work: Callable[[], None]) -> int:
        self.imports.unlink(missing_ok=True)
        work()
        return len(self.imports.read_text().split()) if self.imports.exists() else 0


def _children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def samples(works: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[tuple[float,
                                                                                        float]]]:
    """(wall, CPU) seconds of each variant in each round, the variants interleaved."""
    taken: dict[str, list[tuple[float, float]]] = {name: [] for name in works}
    for _ in range(rounds):
        for name, work in works.items():
            start, cpu = time.perf_counter(), _children_cpu()
            work()
            taken[name].append((time.perf_counter() - start, _children_cpu() - cpu))
    return taken


def ratio(taken: dict[str, list[tuple[float, float]]], over: list[str], under: str,
          which: int) -> float:
    """Median of the `over` variants' samples / median of `under`'s (which: 0 wall, 1 CPU)."""
    mine = statistics.median(sample[which] for name in over for sample in taken[name])
    return mine / statistics.median(sample[which] for sample in taken[under])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="torch-regression-overhead-") as folder:
        bench = Bench(Path(folder))
        bench.cold()  # the warm variant needs a filled cache; also warms the file cache
        taken = samples({"warm": bench.warm, "plain": bench.plain, "cold": bench.cold,
                         "open_clip": bench.open_clip_flow, "warm again": bench.warm},
                        rounds)
        warm_processes = bench.torch_processes(bench.warm)
        cold_processes = bench.torch_processes(bench.cold)
    print(f"medians of {rounds} interleaved rounds on the example zoo (seconds):")
    print(f"  {'variant':12} {'wall':>7} {'CPU':>7}")
    for name, values in taken.items():
        print(f"  {name:12} {statistics.median(v[0] for v in values):7.2f} "
              f"{statistics.median(v[1] for v in values):7.2f}")
    for label, over, under in (("warm invoke test / plain pytest:        ", ["warm", "warm again"],
                                "plain"),
                               ("cold invoke test / open_clip-style flow:", ["cold"],
                                "open_clip")):
        print(f"{label} {ratio(taken, over, under, 0):.2f} wall, "
              f"{ratio(taken, over, under, 1):.2f} CPU")
    print(f"processes importing torch: warm {warm_processes}, cold {cold_processes}")

if __name__ == "__main__":
    main()
