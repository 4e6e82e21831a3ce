"""The one typed job a parent hands to the pytest process it starts, and what comes back.

The parent resolves the reference once and passes the SHA; the child writes its result, or
its error as data, to the job's result file, so an error in a child is the same error in
the parent.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from regression.errors import ConfigError, RegressionError, error_data
from regression.store.scratch import read_regular_file

MAX_JOB_BYTES = 64 << 20
"""A job names cases and environment parts: far below this."""

JOB_ENV = "REGRESSION_JOB"
COLLECT = "collect"
RECORD = "record"
CHECK = "check"
GEN_AUTO = "auto"    # record what is missing or invalid, then check
GEN_NEVER = "never"  # invoke test --no-gen: stop when a reference is missing
GEN_ONLY = "only"    # invoke gen: record what is missing, run no test
PROGRESS = "torch-regression progress: "
"""A line of a recording's output that its parent shows live (the rest only on an error)."""


@dataclass(frozen=True)
class Job:
    """What a collect, record or check process is to do, and where it writes its result."""

    mode: str
    result: str
    config: str = ""
    reference: str = ""
    """The full SHA of the reference, resolved by the parent."""
    revision: str = ""
    """The reference as the user named it (tag, branch, HEAD~1), for messages."""
    subject_root: str = ""
    """Record: the subject folder in the reference worktree. Collect and check: the
    candidate's subject folder in its worktree (`invoke compare`); empty for the working
    tree."""
    parts: dict[str, str] = field(default_factory=dict)
    """Record: the fingerprint the parent computed; the child must see the same."""
    cases: dict[str, str] = field(default_factory=dict)
    """Record: the wanted cases, node id -> harness digest."""
    shard: str = ""
    """Check: 'i/n' to run one shard."""
    gen: str = GEN_AUTO
    """Check: GEN_AUTO, GEN_NEVER or GEN_ONLY."""
    force: bool = False
    """Check with GEN_ONLY: record every case again."""
    workers: int = 0
    """Check and record: pytest-xdist workers for recording (0: one process)."""
    repeat: int = 0
    """Check: recordings of each case to record (0: config.yaml's `determinism.repeat`)."""
    verify: bool = False
    """Record: compare each case's outputs with the stored ones instead of storing them."""
    full_values: bool = False
    """Record: store every tensor's values, none as a digest (`invoke test --full-values`).
    Check: after the check, record the cases whose digests differ that way and check them
    again, for the full report."""
    trace: str = ""
    """Record: trace every module call of the one wanted case into this folder (`invoke
    explain`), with its checked outputs, instead of storing them in the cache."""
    workdir: str = ""
    """Record: the working folder of the recording, the project's folder in the reference's
    worktree (files read from the user's repository are then watched); empty: the working
    tree's own run (`invoke explain`'s candidate side)."""
    selection: str = ""
    """Check: how the user chose the cases to run (`-k EXPR`, node ids); empty for all. The
    cases it leaves out are neither recorded nor missed."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    def write_result(self, result: dict[str, object]) -> None:
        """Write the result atomically: xdist workers of one check run may each write it."""
        target = Path(self.result)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".result.")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(result, stream)
        os.replace(temporary, target)

    def write_error(self, error: RegressionError) -> None:
        self.write_result(error_data(error))

    @property
    def journal(self) -> Path:
        """Where the run notes each test as it starts and ends: what it was doing, should it
        end without writing its result."""
        return Path(self.result + ".journal")

    def note(self, line: str) -> None:
        """Append one line to the journal, straight to the file: a process that ends the
        next instant (os._exit) has still written it. Appends of one line do not interleave,
        so xdist workers may share the file. A journal that cannot be written only costs
        the name of the test an early end happened in."""
        try:
            handle = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            os.write(handle, (line.replace("\n", " ") + "\n").encode())
        except OSError:
            pass
        finally:
            os.close(handle)

    def read_journal(self) -> list[str]:
        """The journal's lines; none when the run wrote none."""
        try:
            return self.journal.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []

    def read_result(self) -> dict[str, Any] | None:
        """The child's result; None when it wrote none (it crashed or was killed)."""
        path = Path(self.result)
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None


def current_job() -> Job | None:
    """The job of this process, None in a plain pytest run."""
    path = os.environ.get(JOB_ENV)
    if not path:
        return None
    try:
        return _checked(json.loads(_read_regular(Path(path))))
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"${JOB_ENV}", f"{path!r} is no job of torch-regression ({exc}). "
                          "torch-regression sets this variable only for the pytest processes it "
                          f"starts; unset it (`unset {JOB_ENV}`) and run again") from None


def _read_regular(path: Path) -> str:
    """The text of a job file: a regular file, read without blocking (a pipe would hang)."""
    return read_regular_file(path, MAX_JOB_BYTES).decode("utf-8")


def _checked(data: object) -> Job:
    """A job from JSON, each field of its type, the mode one of ours."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kinds = {f.name: _KINDS[str(f.type)] for f in fields(Job)}
    for name, value in data.items():
        if name not in kinds or type(value) is not kinds[name]:
            raise ValueError(f"field {name!r} is unknown or of the wrong type")
    job = Job(**data)
    if job.mode not in (COLLECT, RECORD, CHECK):
        raise ValueError(f"mode {job.mode!r} is none of {COLLECT}, {RECORD}, {CHECK}")
    return job


_KINDS = {"str": str, "bool": bool, "int": int, "dict[str, str]": dict}
