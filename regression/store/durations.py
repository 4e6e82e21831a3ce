"""The seconds each case took, kept in a JSON file for balancing shards."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping

from regression.errors import ShardError
from regression.store.files import write_atomic


def read_durations(path: Path) -> dict[str, float]:
    """Case id -> seconds; empty when the file does not exist."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
        for name, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name!r}: {value!r} is not a number of seconds")
        return {str(k): float(v) for k, v in data.items()}
    except (ValueError, TypeError, OSError) as exc:
        raise ShardError(f"{path} is not a durations file ({exc}); delete it and run "
                         "`invoke test --store-durations` to record it again") from None


def store_durations(path: Path, measured: Mapping[str, float]) -> None:
    """Merge `measured` into the file, atomically, keys sorted for small diffs."""
    merged = {**read_durations(path), **{k: round(v, 4) for k, v in measured.items()}}
    write_atomic(path, (json.dumps(merged, sort_keys=True, indent=1) + "\n").encode())
