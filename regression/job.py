"""The instructions a runner hands to the pytest subprocess it starts, as a JSON file."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

JOB_ENV = "REGRESSION_JOB"
COLLECT = "collect"
RECORD = "record"


@dataclass(frozen=True)
class Job:
    """What a collect or record subprocess is to do, and where it writes its result."""

    mode: str
    result: str
    config: str = ""
    reference: str = ""
    subject_root: str = ""
    parts: dict[str, str] = field(default_factory=dict)
    cases: dict[str, str] = field(default_factory=dict)
    """Record: the wanted cases, node id -> harness digest."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    def write_result(self, result: dict[str, object]) -> None:
        Path(self.result).write_text(json.dumps(result), encoding="utf-8")


def current_job() -> Job | None:
    """The job of this process, None in a plain pytest run (check mode)."""
    path = os.environ.get(JOB_ENV)
    if not path:
        return None
    return Job(**json.loads(Path(path).read_text(encoding="utf-8")))
