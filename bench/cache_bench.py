"""Cache benchmarks, measured side by side in one run; prints medians and ratios.

1. `invoke test` on the example zoo with an empty cache (cold) vs a cache hit (warm).
2. The store (safetensors + JSON + xxhash, atomic writes) vs torch.save / torch.load
   (weights_only=True), on the same tensors.
3. The cost of verifying content hashes, relative to loading.

Usage: .venv/bin/python bench/cache_bench.py [--rounds N] [--skip-invoke]
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
from typing import Callable

import torch

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from regression.store.cache import Entry  # noqa: E402
from regression.store.record import CaseRecord, Output  # noqa: E402
from regression.environment.fingerprint import digest  # noqa: E402
from zoo_repo import zoo_repo  # noqa: E402


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def median_times(works: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each work `rounds` times, interleaved so that machine noise hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(rounds):
        for name, work in works.items():
            samples[name].append(timed(work))
    return {name: statistics.median(values) for name, values in samples.items()}


def bench_invoke(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        repo = zoo_repo(Path(folder))
        cache = Path(folder) / "cache"
        env = {**os.environ, "REGRESSION_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}

        def run_test() -> None:
            subprocess.run([sys.executable, "-m", "invoke", "test"], cwd=repo, env=env,
                           check=True, capture_output=True)

        def cold() -> None:
            shutil.rmtree(cache, ignore_errors=True)
            run_test()

        times = median_times({"cold": cold, "warm": run_test}, rounds)
    print(f"invoke test, example zoo, median of {rounds}: cold {times['cold']:.1f} s, "
          f"warm {times['warm']:.1f} s; cold/warm = {times['cold'] / times['warm']:.2f}")


def sample_tensors() -> dict[str, torch.Tensor]:
    """About 64 MB in tensors of the sizes a model library checks, several dtypes."""
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for i in range(16):
        tensors[f"f32_{i}"] = torch.randn(512, 1024, generator=generator)
        tensors[f"bf16_{i}"] = torch.randn(256, 1024, generator=generator).to(torch.bfloat16)
        tensors[f"i64_{i}"] = torch.randint(0, 1000, (64, 512), generator=generator)
    return tensors


def bench_store(rounds: int) -> None:
    tensors = sample_tensors()
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    with tempfile.TemporaryDirectory() as folder:
        entry = Entry(Path(folder) / "cache", {"bench": "1"})
        entry.create()
        record = CaseRecord("bench::case", harness="h", outputs=(Output("all", tensors),))
        pt = Path(folder) / "tensors.pt"
        entry.save_case(record)
        stored = next(entry.cases.glob("*.safetensors"))
        works: dict[str, Callable[[], object]] = {
            "store save": lambda: entry.save_case(record),
            "torch.save": lambda: torch.save(tensors, pt),
            "store load": lambda: entry.load_case("bench::case"),
            "torch.load": lambda: torch.load(pt, weights_only=True),
            "hash only": lambda: digest(stored.read_bytes()),
            "read only": lambda: stored.read_bytes(),
        }
        times = median_times(works, rounds)
    mb = size / 1e6
    print(f"store vs torch, {mb:.0f} MB of tensors, median of {rounds}:")
    for ours, theirs in (("store save", "torch.save"), ("store load", "torch.load")):
        print(f"  {ours}: {mb / times[ours]:.0f} MB/s, {theirs}: {mb / times[theirs]:.0f} MB/s; "
              f"{ours}/{theirs} time = {times[ours] / times[theirs]:.2f}")
    hashing = times["hash only"] - times["read only"]
    print(f"  verifying the hash costs {max(hashing, 0.0) / times['store load']:.0%} of a "
          f"verified load ({times['hash only'] / times['read only']:.2f}x a plain read)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-invoke", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench_store(args.rounds)
    if not args.skip_invoke:
        bench_invoke(max(3, args.rounds // 2))


if __name__ == "__main__":
    main()
