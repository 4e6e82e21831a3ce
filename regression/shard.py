"""Pure: which shard runs which case. Plain data in, plain data out; no pytest here."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

import xxhash

from regression.errors import ShardError


MAX_SHARDS = 1000


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index` of `count`, 1-based as on the command line."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """'2/4' -> ShardSpec(2, 4); anything else is a ShardError that shows the form."""
    if not text.strip():
        raise ShardError(f"--shard {text!r} is empty (an unset variable in CI?): give i/n, "
                         "e.g. --shard 2/4, or leave --shard out to run every case")
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", text)
    if not match:
        raise ShardError(f"--shard {text!r} is not of the form i/n, e.g. --shard 2/4")
    index, count = int(match.group(1)), int(match.group(2))
    if count > MAX_SHARDS:
        raise ShardError(f"--shard {text!r}: at most {MAX_SHARDS} shards")
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"--shard {text!r}: i must be between 1 and n (n at least 1), "
                         f"e.g. --shard 1/{max(count, 1)}")
    return ShardSpec(index, count)


def pinned_shard(case: str, pins: Mapping[str, int]) -> int | None:
    """The shard the first matching pin pattern names, if any."""
    for pattern, shard in pins.items():
        if fnmatch.fnmatchcase(case, pattern):
            return shard
    return None


def estimate(cases: Iterable[str], durations: Mapping[str, float]) -> dict[str, float]:
    """Seconds per case: the recorded duration, else the mean of the known ones (else 0)."""
    cases = sorted(set(cases))
    known = [durations[c] for c in cases if c in durations]
    mean = sum(known) / len(known) if known else 0.0
    return {c: float(durations.get(c, mean)) for c in cases}


def assign(cases: Iterable[str], count: int, durations: Mapping[str, float] | None = None,
           pins: Mapping[str, int] | None = None) -> list[list[str]]:
    """Every case into exactly one of `count` shards (index 0 is shard 1).

    Pins first; then, with durations, largest first onto the least loaded shard; with none,
    a stable hash. Depends only on the set of cases, never on their order.
    """
    durations, pins = durations or {}, pins or {}
    if count < 1:
        raise ShardError(f"there must be at least one shard, not {count}")
    for pattern, number in pins.items():
        if not 1 <= number <= count:
            raise ShardError(f"the pin {pattern!r} in config.yaml names shard {number}, "
                             f"but there are {count} shards; pin to 1..{count}")
    seconds = estimate(cases, durations)
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    free: list[str] = []
    for case in sorted(seconds):
        shard = pinned_shard(case, pins)
        if shard is None:
            free.append(case)
        else:
            shards[shard - 1].append(case)
            loads[shard - 1] += seconds[case]
    if any(c in durations for c in seconds):
        for case in sorted(free, key=lambda c: (-seconds[c], c)):
            target = min(range(count), key=lambda i: (loads[i], i))
            shards[target].append(case)
            loads[target] += seconds[case]
    else:
        for case in free:
            shards[xxhash.xxh64_intdigest(case.encode()) % count].append(case)
    return [sorted(shard) for shard in shards]


def select(cases: Iterable[str], spec: ShardSpec, durations: Mapping[str, float] | None = None,
           pins: Mapping[str, int] | None = None) -> list[str]:
    """The cases of one shard."""
    return assign(cases, spec.count, durations, pins)[spec.index - 1]


SHARD_START = 3.0
"""Seconds a shard spends before its first case, whatever its cases: Python, invoke, torch's
import, collecting the suite and planning. A fixed cost per process, which no case's
recorded duration holds; how it was measured: docs/performance.md, Shards."""


def table(cases: Iterable[str], count: int, durations: Mapping[str, float] | None = None,
          pins: Mapping[str, int] | None = None, start: float = 0.0
          ) -> list[tuple[int, int, float]]:
    """(shard, cases, estimated seconds) for each shard: its cases' seconds, and `start`
    (SHARD_START where the estimate is a shard's whole run), which every shard pays."""
    cases = list(cases)
    seconds = estimate(cases, durations or {})
    return [(i + 1, len(shard), start + sum(seconds[c] for c in shard))
            for i, shard in enumerate(assign(cases, count, durations, pins))]
