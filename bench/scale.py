"""Suites of many small cases: what torch-regression costs per case, in memory and in cache.

Builds the synthetic suite (bench/synthetic.py: N cases, each checking one float32 tensor of
--kib KiB) at 50, 500 and 2,000 cases and runs, in interleaved rounds:

- plain: pytest with the plugin off and a stand-in fixture whose check() does nothing,
- warm:  `invoke test` with every reference cached,
- cold:  `invoke test` with an empty cache (records in a worktree beside the check run).

Each run is one process tree under GNU time, which gives its wall time and its peak resident
memory (the largest process of the tree). Printed per size, medians of the rounds: time per
case and the overhead per case over plain (and its spread: the same slope in each round
alone, lowest to highest), cold / warm, peak memory against plain, and the
cache's bytes per case. Then a simulation of a CI matrix: 1,200 cases of about 1 s each on
16 shards, assigned by regression/shard.py, with the overheads measured here: the slowest
shard's time / (its cases' seconds + one torch start), warm and cold.

Usage: .venv/bin/python bench/scale.py [--quick] [--rounds N] [--sizes 50,500,2000] [--kib K]
(--quick: one round, for a few minutes; the default: 3 rounds.)
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from synthetic import NO_HYPOTHESIS, synthetic_repo  # noqa: E402

from regression.shard import assign  # noqa: E402
from regression.store.cache import RACY_NS  # noqa: E402

GNU_TIME = "/usr/bin/time"
VARIANTS = ("plain", "warm", "cold")
MATRIX_CASES, MATRIX_SHARDS = 1200, 16
SETTLE_S = RACY_NS / 1e9 + 0.5


@dataclass(frozen=True)
class Sample:
    """One run: wall and CPU (user + system) seconds, and the peak resident memory of its
    process tree, in bytes. CPU time is the steadier on a busy machine."""

    wall: float
    cpu: float
    peak: int


class Suite:
    """One size of the synthetic suite, and the commands of each variant."""

    def __init__(self, folder: Path, count: int, kib: int) -> None:
        self.count = count
        self.repo = synthetic_repo(folder / "repo", count, kib)
        self.cache = folder / "cache"
        self.env = {**{k: v for k, v in os.environ.items()
                       if not k.startswith(("REGRESSION_", "PYTEST_"))},
                    "REGRESSION_CACHE_DIR": str(self.cache), "PYTHONDONTWRITEBYTECODE": "1",
                    **NO_HYPOTHESIS}

    def run(self, variant: str) -> Sample:
        if variant == "cold":
            shutil.rmtree(self.cache, ignore_errors=True)
        if variant == "plain":
            command = ["-m", "pytest", "-q", "-p", "no:regression", "-p", "no:cacheprovider",
                       "-p", "plain.fixture", "tests"]
        else:
            command = ["-m", "invoke", "test"]
        sample = timed([sys.executable, *command], self.repo,
                       {**self.env, "PYTHONPATH": str(self.repo)})
        if variant == "cold":  # the cache settles: a warm run reads a file written in the
            time.sleep(SETTLE_S)  # last 2 s again each time (store/cache.py's RACY_NS)
        return sample

    def cache_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.cache.rglob("*") if p.is_file())


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> Sample:
    """Run `command` under GNU time; its wall time and peak memory."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        start = time.perf_counter()
        done = subprocess.run([GNU_TIME, "-o", report.name, "-f", "%M %U %S", *command],
                              cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
        kib, user, system = re.findall(r"^(\d+) ([\d.]+) ([\d.]+)$", report.read(),
                                       re.MULTILINE)[-1]
    return Sample(wall, float(user) + float(system), int(kib) * 1024)


def torch_start() -> float:
    """CPU seconds for a fresh Python to import torch, median of three."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return statistics.median(timed([sys.executable, "-c", "import torch"], PROJECT, env).cpu
                             for _ in range(3))


def measure(suites: list[Suite], rounds: int) -> dict[tuple[int, str], list[Sample]]:
    """Every variant of every size, once per round, interleaved; a cold run first fills
    the cache (and the file cache) for the warm ones."""
    for suite in suites:
        suite.run("cold")
    taken: dict[tuple[int, str], list[Sample]] = {}
    for number in range(rounds):
        for suite in suites:
            for variant in VARIANTS if number % 2 == 0 else reversed(VARIANTS):
                taken.setdefault((suite.count, variant), []).append(suite.run(variant))
    return taken


def median(samples: list[Sample], field: str) -> float:
    return float(statistics.median(getattr(s, field) for s in samples))


def size_table(taken: dict[tuple[int, str], list[Sample]], caches: dict[int, int]
               ) -> list[str]:
    """Per size: each variant's whole run, cold/warm, peak memory and cache per case."""
    lines = [f"{'cases':>6} {'plain s':>8} {'warm s':>7} {'cold s':>7} {'cold/warm':>10} "
             f"{'(CPU)':>6} {'peak plain':>11} {'warm-plain':>11} {'cold-plain':>11} "
             f"{'cache/case':>11}"]
    for count in caches:
        plain, warm, cold = (median(taken[(count, v)], "wall") for v in VARIANTS)
        cpu = {v: median(taken[(count, v)], "cpu") for v in VARIANTS}
        memory = {v: median(taken[(count, v)], "peak") for v in VARIANTS}
        lines.append(
            f"{count:>6} {plain:>8.2f} {warm:>7.2f} {cold:>7.2f} {cold / warm:>10.2f} "
            f"{cpu['cold'] / cpu['warm']:>6.2f} "
            f"{memory['plain'] / 2**20:>8.0f} MB "
            f"{(memory['warm'] - memory['plain']) / 2**20:>8.0f} MB "
            f"{(memory['cold'] - memory['plain']) / 2**20:>8.0f} MB "
            f"{caches[count] / count / 1024:>8.1f} KB")
    return lines


def per_case(taken: dict[tuple[int, str], list[Sample]], sizes: list[int], field: str
             ) -> dict[str, float]:
    """Seconds each case adds to a run, per variant: the slope between the two largest
    sizes, so that start-up (torch, invoke, collection) does not count."""
    small, large = sorted(sizes)[-2:]
    return {v: (median(taken[(large, v)], field) - median(taken[(small, v)], field))
            / (large - small) for v in VARIANTS}


def slope_lines(taken: dict[tuple[int, str], list[Sample]], sizes: list[int]) -> list[str]:
    small, large = sorted(sizes)[-2:]
    lines = []
    for field in ("wall", "cpu"):
        slopes = {v: s * 1e3 for v, s in per_case(taken, sizes, field).items()}
        lines.append(f"per case, {field} (slope from {small} to {large} cases): plain "
                     f"{slopes['plain']:.2f} ms, warm {slopes['warm']:.2f} ms, cold "
                     f"{slopes['cold']:.2f} ms; warm - plain "
                     f"{slopes['warm'] - slopes['plain']:.2f} ms, cold - plain "
                     f"{slopes['cold'] - slopes['plain']:.2f} ms")
    return lines


def spread_lines(taken: dict[tuple[int, str], list[Sample]], sizes: list[int]) -> list[str]:
    """Warm - plain per case in each round on its own (the slope between the two largest
    sizes, both variants of that round): the median, and the lowest and highest round."""
    small, large = sorted(sizes)[-2:]
    lines = []
    for field in ("cpu", "wall"):
        extra = sorted(
            ((getattr(taken[(large, "warm")][r], field) - getattr(taken[(small, "warm")][r], field))
             - (getattr(taken[(large, "plain")][r], field)
                - getattr(taken[(small, "plain")][r], field))) / (large - small) * 1e3
            for r in range(len(taken[(large, "warm")])))
        lines.append(f"warm - plain per case, {field}, round by round: median "
                     f"{statistics.median(extra):.2f} ms, from {extra[0]:.2f} to "
                     f"{extra[-1]:.2f} ms ({len(extra)} rounds)")
    return lines


def matrix(taken: dict[tuple[int, str], list[Sample]], sizes: list[int], start: float
           ) -> list[str]:
    """1,200 cases of about 1 s (seeded spread) on 16 shards, balanced by recorded durations
    and by hash (no durations yet): the slowest shard's time / (its cases + one torch start),
    with the per-case and fixed costs over plain measured here (CPU seconds)."""
    slopes = per_case(taken, sizes, "cpu")
    large = max(sizes)
    # a cold run runs each case twice (at the reference, then here), as plain pytest would
    extra = {"warm": slopes["warm"] - slopes["plain"],
             "cold": slopes["cold"] - 2 * slopes["plain"]}
    fixed = {v: median(taken[(large, v)], "cpu") - median(taken[(large, "plain")], "cpu")
             - large * (slopes[v] - slopes["plain"]) for v in ("warm", "cold")}
    chance = random.Random(0)
    seconds = {f"tests/test_models.py::test_forward[m{i:04d}]": chance.lognormvariate(0, 0.5)
               for i in range(MATRIX_CASES)}
    mean = statistics.mean(seconds.values())
    seconds = {case: s / mean for case, s in seconds.items()}  # about 1 s each on average
    lines = [f"{MATRIX_CASES} cases of about 1 s (lognormal, sigma 0.5) on {MATRIX_SHARDS} "
             f"shards; torch start {start:.2f} s; over plain pytest (CPU), per case: warm "
             f"{extra['warm'] * 1e3:.2f} ms, cold {extra['cold'] * 1e3:.2f} ms; per run: warm "
             f"{fixed['warm']:.2f} s, cold {fixed['cold']:.2f} s (beyond running each case a "
             "second time, at the reference)"]
    for label, durations in (("balanced by durations", seconds), ("by hash, no durations", {})):
        shards = assign(seconds, MATRIX_SHARDS, durations)
        slowest = max(shards, key=lambda shard: sum(seconds[c] for c in shard))
        own = sum(seconds[c] for c in slowest)
        warm = start + own + fixed["warm"] + len(slowest) * extra["warm"]
        cold = start + 2 * own + fixed["cold"] + len(slowest) * extra["cold"]
        mean_shard = sum(seconds.values()) / MATRIX_SHARDS
        lines.append(f"  {label:22}: slowest shard {len(slowest)} cases, {own:.1f} s of cases "
                     f"({own / mean_shard:.3f} x the mean shard); slowest / (its cases + one "
                     f"torch start): warm {warm / (own + start):.3f}, cold "
                     f"{cold / (own + start):.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round (a few minutes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="50,500,2000")
    parser.add_argument("--kib", type=int, default=16, help="KiB each case checks")
    options = parser.parse_args()
    rounds = 1 if options.quick else options.rounds
    sizes = [int(size) for size in options.sizes.split(",")]
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"cases of {options.kib} KiB; medians of {rounds} interleaved rounds", flush=True)
    start = torch_start()
    with tempfile.TemporaryDirectory(prefix="torch-regression-scale-") as folder:
        suites = [Suite(Path(folder) / str(n), n, options.kib) for n in sizes]
        taken = measure(suites, rounds)
        caches = {suite.count: suite.cache_bytes() for suite in suites}
    lines = [*size_table(taken, caches), *slope_lines(taken, sizes),
             *spread_lines(taken, sizes), *matrix(taken, sizes, start)]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
