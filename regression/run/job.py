"""The typed jobs a parent hands to the pytest process it starts, and what comes back.

The parent reads config.yaml and resolves the reference once; each job carries both (the
validated settings, the commit and the repository), so the child reads and resolves neither
again. The child writes its result, or its error as data, next to the job: an error in a
child is the same error, attributes and all, in the parent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, Union, get_args, get_origin, \
    get_type_hints

from regression.declarations import Declaration
from regression.errors import ConfigError, RegressionError, StoreError, error_data, error_from_data
from regression.run.types import CheckResult, CollectResult, RecordResult, Reference, hint_names
from regression.store.regular import RUN, read_regular

if TYPE_CHECKING:
    from regression.config.settings import Settings
    from regression.shard import ShardSpec

MAX_JOB_BYTES = 64 << 20
"""A job names cases and environment parts: far below this."""

JOB_ENV = "REGRESSION_JOB"
COLLECT = "collect"
RECORD = "record"
REPRODUCE = "reproduce"
TRACE = "trace"
CHECK = "check"
GEN_AUTO = "auto"    # record what is missing or invalid, then check
GEN_NEVER = "never"  # invoke test --no-gen: stop when a reference is missing
GEN_ONLY = "only"    # invoke gen: record what is missing, run no test
PROGRESS = "torch-regression progress: "
"""A line of a recording's output that its parent shows live (the rest only on an error)."""

R = TypeVar("R", CollectResult, RecordResult, CheckResult)


@dataclass(frozen=True)
class _Job(Generic[R]):
    """What every job carries, and how its result comes back."""

    resolved: Reference
    """The reference the parent resolved, with the settings it read from config.yaml."""
    result: str = ""
    """Where the child writes its result (its error next to it)."""
    subject_root: str = ""
    """Record: the subject folder in the reference worktree. Collect and check: the
    candidate's subject folder in its worktree (`invoke compare`); empty for the working
    tree."""

    mode: ClassVar[str]

    @property
    def settings(self) -> Settings:
        return self.resolved.settings

    @property
    def config(self) -> str:
        return str(self.resolved.settings.path)

    @property
    def reference(self) -> str:
        """The full SHA of the reference."""
        return self.resolved.sha

    @property
    def revision(self) -> str:
        """The reference as the user named it (tag, branch, HEAD~1), for messages."""
        return self.resolved.revision

    def _result_type(self) -> type[R]:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"mode": self.mode, **encode(self)}), encoding="utf-8")

    def write_result(self, result: R) -> None:
        """Write the result atomically: xdist workers of one check run may each write it."""
        _write_atomically(Path(self.result), encode(result))

    def read_result(self) -> R | None:
        """The child's result; None when it wrote none (it crashed or was killed)."""
        path = Path(self.result)
        if not path.is_file():
            return None
        return decode(self._result_type(), json.loads(path.read_text(encoding="utf-8")))

    @property
    def error_file(self) -> Path:
        return Path(self.result + ".error")

    def write_error(self, error: RegressionError) -> None:
        """The child's error, for the parent to raise as the same error."""
        _write_atomically(self.error_file, error_data(error))

    def read_error(self) -> RegressionError | None:
        """The error the child wrote, rebuilt; None when it wrote none."""
        if not self.error_file.is_file():
            return None
        data = json.loads(self.error_file.read_text(encoding="utf-8"))
        return error_from_data(data if isinstance(data, dict) else {})

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
        handle = _journal_handle(self.result + ".journal")
        if handle is None:
            return
        try:
            os.write(handle, (line.replace("\n", " ") + "\n").encode())
        except OSError:
            pass

    def close_journal(self) -> None:
        """The run has ended: no more notes from this process."""
        if _JOURNAL and _JOURNAL[0][:2] == (self.result + ".journal", os.getpid()):
            _close_journal()

    def read_journal(self) -> list[str]:
        """The journal's lines; none when the run wrote none."""
        try:
            return self.journal.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []


_JOURNAL: list[tuple[str, int, int]] = []
"""The journal this process appends to, (path, process id, descriptor), open for the run:
opening it for each of the two notes of every case cost more than the notes."""


def _journal_handle(path: str) -> int | None:
    """A descriptor that appends to the journal `path`; None when it cannot be opened."""
    if _JOURNAL and _JOURNAL[0][:2] == (path, os.getpid()):
        return _JOURNAL[0][2]
    _close_journal()
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    _JOURNAL[:] = [(path, os.getpid(), handle)]
    return handle


def _close_journal() -> None:
    """Close the journal descriptor this process holds, its own or a fork's copy."""
    if _JOURNAL:
        try:
            os.close(_JOURNAL[0][2])
        except OSError:
            pass
    _JOURNAL.clear()


@dataclass(frozen=True)
class CollectJob(_Job[CollectResult]):
    """List the regression cases, their harness digests and the fingerprint parts."""

    mode: ClassVar[str] = COLLECT

    def _result_type(self) -> type[CollectResult]:
        return CollectResult


@dataclass(frozen=True)
class _RecordingJob(_Job[RecordResult]):
    """What every recording carries: it runs the wanted cases in a new process, the subject
    imported from `subject_root`."""

    cases: dict[str, str] = field(default_factory=dict)
    """The wanted cases, node id -> harness digest."""
    parts: dict[str, str] = field(default_factory=dict)
    """The fingerprint the parent computed; the child must see the same (a trace: none)."""
    workers: int = 0
    """pytest-xdist workers (0: one process)."""
    workdir: str = ""
    """The working folder of the recording, the project's folder in the reference's
    worktree (files read from the user's repository are then watched); empty: the working
    tree's own run (`invoke explain`'s candidate side)."""

    def _result_type(self) -> type[RecordResult]:
        return RecordResult


@dataclass(frozen=True)
class Beside:
    """The pipes (file descriptors, inherited) between a recording and the check run that
    started it and checks each case as it is stored (run/handoff.py)."""

    cases: int
    """The wanted cases arrive on it once the check run has collected them; the answer to
    `ask_shared` comes on it too."""
    handoff: int
    """Each case is handed over on it as it is stored."""


@dataclass(frozen=True)
class RecordJob(_RecordingJob):
    """Record the wanted cases as references, each stored in the cache as it ends."""

    full_values: bool = False
    """Store every tensor's values, none as a digest (`invoke test --full-values`)."""
    beside: Beside | None = None
    """Beside a check run: the pipes to it (the wanted cases come on one); None: `cases`
    holds them, and no run checks them meanwhile."""

    mode: ClassVar[str] = RECORD


@dataclass(frozen=True)
class ReproduceJob(_RecordingJob):
    """Record the wanted cases again and compare each one's outputs with the stored ones,
    storing nothing (`determinism.repeat`, `--repeat`)."""

    mode: ClassVar[str] = REPRODUCE


@dataclass(frozen=True)
class TraceJob(_RecordingJob):
    """Trace every module call of the one wanted case into `folder` (`invoke explain`),
    with its checked outputs; nothing goes into the cache."""

    folder: str = ""

    mode: ClassVar[str] = TRACE


RecordingJob = Union[RecordJob, ReproduceJob, TraceJob]
"""The kinds of recording."""


@dataclass(frozen=True)
class CheckJob(_Job[CheckResult]):
    """Check the working tree's cases against the reference, recording what is missing."""

    shard: ShardSpec | None = None
    """The one shard to run; None for every case."""
    gen: str = GEN_AUTO
    """GEN_AUTO, GEN_NEVER or GEN_ONLY."""
    force: bool = False
    """With GEN_ONLY: record every case again."""
    workers: int = 0
    """pytest-xdist workers for recording (0: one process)."""
    repeat: int = 0
    """Recordings of each case to record (0: config.yaml's `determinism.repeat`)."""
    selection: str = ""
    """How the user chose the cases to run (`-k EXPR`, node ids); empty for all. The cases
    it leaves out are neither recorded nor missed."""
    declarations: tuple[Declaration, ...] = ()
    """regression-changes.yaml's entries, read by the invoke process: every shard and
    xdist worker judges by the same."""

    mode: ClassVar[str] = CHECK

    def __post_init__(self) -> None:
        if self.gen not in (GEN_AUTO, GEN_NEVER, GEN_ONLY):
            raise ValueError(f"gen {self.gen!r} is none of {GEN_AUTO}, {GEN_NEVER}, {GEN_ONLY}")

    def _result_type(self) -> type[CheckResult]:
        return CheckResult


Job = Union[CollectJob, RecordJob, ReproduceJob, TraceJob, CheckJob]
JOBS: dict[str, type[Job]] = {
    COLLECT: CollectJob, RECORD: RecordJob, REPRODUCE: ReproduceJob, TRACE: TraceJob,
    CHECK: CheckJob}


def current_job() -> Job | None:
    """The job of this process, None in a plain pytest run."""
    path = os.environ.get(JOB_ENV)
    if not path:
        return None
    try:
        return _checked(json.loads(read_regular(Path(path), MAX_JOB_BYTES, RUN)))
    except (StoreError, ValueError, TypeError) as exc:
        raise ConfigError(f"${JOB_ENV}", f"{path!r} is no job of torch-regression ({exc}). "
                          "torch-regression sets this variable only for the pytest processes it "
                          f"starts; unset it (`unset {JOB_ENV}`) and run again") from None


def _checked(data: object) -> Job:
    """A job from JSON, each field of its type, the mode one of ours."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    fields = dict(data)
    mode = fields.pop("mode", None)
    if mode not in JOBS:
        raise ValueError(f"mode {mode!r} is none of {', '.join(JOBS)}")
    job: Job = decode(JOBS[mode], fields)
    return job


def _write_atomically(target: Path, data: object) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".result.")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(data))  # one write: json.dump writes each piece (0.1 ms a case)
    os.replace(temporary, target)


def encode(value: Any) -> Any:
    """A dataclass (and what it holds) as JSON-ready data; a Path as its text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.init}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return str(value) if isinstance(value, Path) else value


T = TypeVar("T")


def decode(kind: type[T], data: object, name: str = "") -> T:
    """The `kind` dataclass `encode` wrote, every field checked against its type: a job file
    is read before anything trusts it. ValueError names a field that does not fit."""
    if not isinstance(data, dict):
        raise ValueError(f"field {name!r} is unknown or of the wrong type" if name
                         else "not a JSON object")
    hints, known = _schema(kind)
    prefix = f"{name}." if name else ""
    values = {}
    for key, value in data.items():
        if key not in known:
            raise ValueError(f"field {prefix + key!r} is unknown or of the wrong type")
        values[key] = _value(hints[key], value, prefix + key)
    for key, spec in known.items():
        if key not in values and spec.default is dataclasses.MISSING \
                and spec.default_factory is dataclasses.MISSING:
            raise ValueError(f"field {prefix + key!r} is missing")
    return kind(**values)


Schema = tuple[dict[str, Any], dict[str, "dataclasses.Field[Any]"]]
_SCHEMAS: dict[object, Schema] = {}


def _schema(kind: object) -> Schema:
    """A dataclass's field types and its fields set at init, worked out once per kind: a
    result holds a record per case, and resolving type hints costs more than reading one."""
    found = _SCHEMAS.get(kind)
    if found is None:
        hints = get_type_hints(kind, localns=hint_names())
        fields = {f.name: f for f in dataclasses.fields(kind) if f.init}  # type: ignore[arg-type]
        found = _SCHEMAS[kind] = (hints, fields)
    return found


def _value(hint: Any, value: object, name: str) -> Any:
    """`value` as a `hint`, checked; ValueError names the field where it is not one."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        origin, args = get_origin(hint), get_args(hint)
    if dataclasses.is_dataclass(hint):
        return decode(hint, value, name)  # type: ignore[arg-type]
    if hint is Path:
        return Path(_exact(str, value, name))
    if origin in (list, tuple):
        items = [_value(args[0], v, name) for v in _exact(list, value, name)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        return {k: _value(args[1], v, name) for k, v in _exact(dict, value, name).items()}
    return _exact(hint, value, name)


def _exact(kind: type[T], value: object, name: str) -> T:
    if type(value) is not kind:  # a bool is no int here
        raise ValueError(f"field {name!r} is unknown or of the wrong type")
    return value
