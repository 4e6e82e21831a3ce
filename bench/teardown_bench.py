"""Why a warm `invoke test` can use less CPU than plain pytest: Python's teardown of torch.

On the synthetic suite of bench/scale.py (N cases, hypothesis's plugin off unless
--with-hypothesis), in interleaved rounds, the CPU seconds (user + system, GNU time) of:
plain pytest with the stand-in fixture; the same ending with os._exit as the forked check
run does; a warm `invoke test`; and a bare `import torch`, with and without os._exit.
Prints each variant's median, lowest and highest, and warm / plain.

Usage: .venv/bin/python bench/teardown_bench.py [--cases 50] [--rounds 5] [--with-hypothesis]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic import NO_HYPOTHESIS, synthetic_repo  # noqa: E402

PLAIN = ["-q", "-p", "no:regression", "-p", "no:cacheprovider", "-p", "plain.fixture", "tests"]
EXIT = ("import os, sys, pytest; code = pytest.main(sys.argv[1:]); sys.stdout.flush(); "
        "os._exit(int(code))")
VARIANTS = {
    "plain pytest": ["-m", "pytest", *PLAIN],
    "plain pytest, os._exit": ["-c", EXIT, *PLAIN],
    "warm invoke test": ["-m", "invoke", "test"],
    "import torch": ["-c", "import torch"],
    "import torch, os._exit": ["-c", "import os, torch; os._exit(0)"],
}


def cpu(args: list[str], repo: Path, env: dict[str, str]) -> float:
    """CPU seconds of `python args` and its children, in `repo`."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        done = subprocess.run(["/usr/bin/time", "-o", out.name, "-f", "%U %S", sys.executable,
                               *args], cwd=repo, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        user, system = out.read().split()[-2:]
    return float(user) + float(system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--with-hypothesis", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torch-regression-teardown-") as folder:
        repo = synthetic_repo(Path(folder) / "repo", options.cases)
        env = {**{k: v for k, v in os.environ.items()
                  if not k.startswith(("REGRESSION_", "PYTEST_"))},
               "REGRESSION_CACHE_DIR": str(Path(folder) / "cache"),
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(repo),
               **({} if options.with_hypothesis else NO_HYPOTHESIS)}
        cpu(VARIANTS["warm invoke test"], repo, env)  # fills the cache
        taken: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for number in range(options.rounds):
            order = list(VARIANTS) if number % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                taken[name].append(cpu(VARIANTS[name], repo, env))
    for name, samples in taken.items():
        print(f"{name:24} CPU {statistics.median(samples):.2f} s (from {min(samples):.2f} to "
              f"{max(samples):.2f}, {len(samples)} rounds)")
    ratio = statistics.median(taken['warm invoke test']) / statistics.median(taken['plain pytest'])
    print(f"warm / plain: {ratio:.2f}")


if __name__ == "__main__":
    main()
