"""What a digest costs beside the hash it holds, measured side by side in one run.

A digest (regression.store.digest) is a tensor's xxh3 plus a summary (min, max, mean,
std, NaN and inf counts). The summary is made in the values' own precision, in three
passes (a sum, a min-max, a dot product); before, it went through a float64 copy and cost
ten times the hash. Rounds are interleaved; each figure is the median.

Usage: .venv/bin/python bench/digest_bench.py [--rounds N] [--millions M]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from regression.store.digest import digest_tensor, tensor_xxh3  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--millions", type=int, default=20, help="float32 elements, millions")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as config.yaml's determinism.threads: 1
    values = torch.randn(args.millions * 1_000_000, generator=torch.Generator().manual_seed(0))
    works: dict[str, Callable[[], object]] = {"hash": lambda: tensor_xxh3(values),
                                              "digest": lambda: digest_tensor(values)}
    times: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(args.rounds):
        for name, work in works.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name:7} median {median * 1000:8.1f} ms  (min {min(times[name]) * 1000:.1f}, "
              f"max {max(times[name]) * 1000:.1f})")
    print(f"digest / hash: {medians['digest'] / medians['hash']:.2f}")


if __name__ == "__main__":
    main()
