"""Recording in pytest-xdist workers: a cold `invoke gen --workers 2` against one process.

Builds a repository with the example zoo's config and one test file of CASES cases, each a
forward of about 0.2 s on one thread (threads: 1 in config.yaml, so two workers use two
cores), then times a cold `invoke gen` (empty cache) three ways, interleaved rounds, medians:
one process (the default, no xdist), `--workers 1` and `--workers 2`. Prints the ratios.

Usage: .venv/bin/python bench/workers_bench.py [--rounds N] [--cases N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zoo_repo import NO_HYPOTHESIS, zoo_repo

# About 0.2 s of matrix products per case (--steps 550) on one thread of the development
# machine.
TEST_FILE = '''
import pytest
import torch

CASES = int({cases})


@pytest.mark.parametrize("index", range(CASES))
def test_forward(regression, index):
    weight = regression.randn(384, 384)
    state = regression.randn(64, 384)
    for _ in range({steps}):
        state = torch.tanh(state @ weight) * 0.5
    regression.check(state)
'''


def build(folder: Path, cases: int, steps: int) -> Path:
    """A repository whose only regression tests are `cases` forwards of `steps` products."""
    repo = zoo_repo(folder, {"tests/regression/test_zoo.py":
                             TEST_FILE.format(cases=cases, steps=steps)})
    return repo


def timed_gen(repo: Path, cache: Path, workers: int | None) -> float:
    """Seconds of one cold `invoke gen` (the cache emptied first)."""
    shutil.rmtree(cache, ignore_errors=True)
    command = [str(Path(sys.executable).with_name("invoke")), "gen"]
    if workers is not None:
        command += ["--workers", str(workers)]
    env = {**os.environ, "REGRESSION_CACHE_DIR": str(cache), **NO_HYPOTHESIS}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--steps", type=int, default=550,
                        help="matrix products per case (550: about 0.2 s on one thread "
                             "of the 2-core development machine)")
    options = parser.parse_args()
    variants: dict[str, int | None] = {"one process": None, "--workers 1": 1, "--workers 2": 2}
    with tempfile.TemporaryDirectory(prefix="workers-bench-") as folder:
        repo = build(Path(folder), options.cases, options.steps)
        cache = Path(folder) / "cache"
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(options.rounds):
            for name, workers in variants.items():
                seconds[name].append(timed_gen(repo, cache, workers))
        median = {name: statistics.median(times) for name, times in seconds.items()}
    one = median["one process"]
    print(f"cold `invoke gen`, {options.cases} cases, medians of {options.rounds} "
          f"interleaved rounds, {os.cpu_count()} cores")
    for name, value in median.items():
        print(f"  {name:<12} {value / one:5.2f}x one process")
    print(f"--workers 2 / --workers 1: {median['--workers 2'] / median['--workers 1']:.2f}")


if __name__ == "__main__":
    main()
