"""Shard balance on the example zoo: slowest shard's estimated time over the mean.

Uses the recorded durations (`invoke test --store-durations` writes them to the file named in
config.yaml) and compares the tool's assignment (pins, then largest first onto the least
loaded shard) with plain round-robin over the sorted case ids, for 2, 3 and 4 shards.

Usage: .venv/bin/python bench/shard_bench.py
"""

from __future__ import annotations

import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from regression.config.settings import load_settings  # noqa: E402
from regression.store.durations import read_durations  # noqa: E402
from regression.shard import assign, estimate  # noqa: E402


def imbalance(shards: list[list[str]], seconds: dict[str, float]) -> float:
    """The slowest shard's time over the mean shard time (1.0 is perfect)."""
    loads = [sum(seconds[c] for c in shard) for shard in shards]
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


def main() -> None:
    settings = load_settings(PROJECT / "config.yaml")
    durations = read_durations(settings.durations_file)
    if not durations:
        sys.exit(f"no durations in {settings.durations_file}: run "
                 "`invoke test --store-durations` first")
    cases = sorted(durations)
    seconds = estimate(cases, durations)
    print(f"{len(cases)} cases, {sum(seconds.values()):.2f} s in all "
          f"(from {settings.durations_file.name})")
    print(f"{'shards':>6}  {'balanced max/mean':>17}  {'round-robin max/mean':>20}")
    for count in (2, 3, 4):
        balanced = assign(cases, count, durations, settings.pins)
        round_robin = [cases[i::count] for i in range(count)]
        print(f"{count:>6}  {imbalance(balanced, seconds):>17.3f}  "
              f"{imbalance(round_robin, seconds):>20.3f}")


if __name__ == "__main__":
    main()
