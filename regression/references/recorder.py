"""Recording: plan which cases lack a valid reference, and record them in a new process at
the reference (in a worktree), under the cache entry's lock: the steps that
`NeededReferences.obtain` (references/needed.py) takes. Every record job is built here
(`record_job`).
"""

from __future__ import annotations

import signal
import subprocess
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from regression.errors import CacheError, CacheWriteError, ReadOnlyError, RegressionError, \
    StoreError, SubjectImportError
from regression.environment.harness import changed_helpers
from regression.run.job import RecordingJob, RecordJob, ReproduceJob, TraceJob
from regression.run.launch import run_pytest, tail
from regression.run.types import Echo, Generation, Pending, RecordResult, Reference, Suite
from regression.store.cache import Entry
from regression.store.record import NONDETERMINISTIC, Collection, StoredHarness
from regression.store.scratch import scratch_folder

Kind = TypeVar("Kind", RecordJob, ReproduceJob, TraceJob)

if TYPE_CHECKING:
    from regression.config.settings import Settings


def plan(suite: Suite, force: bool) -> dict[str, Pending]:
    """The cases that need recording, by node id: not recorded yet, stale or untrusted.
    Where nothing else is to be recorded and the check run stores collections, also those
    of a test file whose collection at the reference is missing, untrusted or taken with
    other test code: any recording stores every file's anew. One taken under other
    conditions (pytest's settings, PYTEST_ADDOPTS) is not judged, and not recorded for: a
    per-run value there would record every run."""
    entry, root = suite.entry, suite.reference.settings.root
    todo: dict[str, Pending] = {}
    unserved: dict[str, Pending] = {}
    known: dict[Path, str] = {}  # helper digests, read once for all cases
    files: dict[str, tuple[str, bool]] = {}  # why a file's collection does not serve
    for nodeid, harness in suite.cases.items():
        try:
            stored = None if force else entry.valid_harness(nodeid)
        except StoreError as exc:
            todo[nodeid] = Pending(harness, str(exc), fault=True)
            continue
        why = "forced" if force else "not recorded yet" if stored is None else \
            _stale(stored, harness, root, known)
        if why:
            todo[nodeid] = Pending(harness, why)
            entry.release(nodeid)  # recorded again: its record may name another file
        elif suite.conditions:
            file = nodeid.split("::", 1)[0]
            if file not in files:
                files[file] = _uncollected(entry, file, harness)
            if files[file][0]:
                unserved[nodeid] = Pending(harness, *files[file])
    if not todo:
        for nodeid in unserved:
            entry.release(nodeid)
        return unserved
    return todo


def _uncollected(entry: Entry, file: str, harness: str) -> tuple[str, bool]:
    """Why the collection of `file` at the reference does not serve the check run, and
    whether that is a fault; ("", False) when it serves."""
    try:
        stored = entry.collection(file)
    except StoreError as exc:
        return str(exc), True
    if stored is None:
        return "which cases its test file collects at the reference is not stored", False
    if stored.harness != harness:
        return "its test file's cases at the reference were stored for other test code", False
    return "", False  # taken under other conditions: not judged, till a recording takes it


def _stale(stored: StoredHarness, harness: str, root: Path, known: dict[Path, str]) -> str:
    """Why a stored case no longer matches its harness; "" when it does."""
    if stored.digest != harness:
        return "its test file, a conftest.py or pytest's settings changed"
    changed = changed_helpers(root, stored.helpers, known)
    if changed:
        return f"test code or environment it uses changed: {', '.join(changed)}"
    return ""


def require_valid(suite: Suite) -> None:
    """Raise unless every case has a valid stored reference (for `test --no-gen`); reads only."""
    try:
        suite.entry.verify_identity()
        todo = plan(suite, False)
    except CacheError as exc:
        raise CacheError(f"{exc}\nRun `invoke gen` to record the reference again.") from None
    if todo:
        lines = "\n".join(f"  {nodeid}: {p.why}" for nodeid, p in list(todo.items())[:20])
        more = f"\n  ... and {len(todo) - 20} more" if len(todo) > 20 else ""
        raise CacheError(f"{len(todo)} of {len(suite.cases)} cases have no valid reference at "
                         f"{suite.reference.label}:\n{lines}{more}\nRun `invoke gen` first.")


def _open_entry(entry: Entry, warnings: list[str]) -> None:
    """Create the entry; one whose identity file is wrong, or a link, is removed (a link
    alone, never its target) and made anew. A write that fails is no reason to discard."""
    try:
        entry.create()
    except CacheWriteError:
        raise
    except CacheError as exc:
        warnings.append(f"discarding the cache entry {entry.directory}: {exc}")
        entry.discard()
        entry.create()


def read_only_plan(suite: Suite, force: bool) -> dict[str, Pending] | None:
    """The cases to record, planned with no lock and no write (verified files need neither);
    None when the entry itself is missing or not trusted."""
    try:
        suite.entry.verify_identity()
    except CacheError:
        return None
    return plan(suite, force)


def nothing_recordable(suite: Suite, todo: dict[str, Pending] | None,
                       exc: ReadOnlyError) -> ReadOnlyError:
    """A read-only cache that lacks what must be recorded: what is missing, and the fix."""
    missing = (f"{len(todo)} of {len(suite.cases)} cases have no valid reference"
               if todo else f"the cache entry {suite.entry.directory} is missing or unusable")
    return ReadOnlyError(exc.path, f"{missing}, and nothing can be recorded: {exc.reason}",
                         "make the cache folder writable, or point REGRESSION_CACHE_DIR at a "
                         "writable folder (copy this cache there to keep what it holds), "
                         "then run again.")


def planned_locked(suite: Suite, force: bool, echo: Echo) -> tuple[Generation, dict[str, Pending]]:
    """Holding the entry's lock: the entry made (or made anew), the plan made again, and
    what the entry held that could not be trusted said."""
    result = Generation()
    _open_entry(suite.entry, result.warnings)
    todo = plan(suite, force)
    result.warnings += [f"re-recording {nodeid}: {p.why}" for nodeid, p in todo.items()
                        if p.fault]
    for warning in result.warnings:
        echo(f"warning: {warning}")
    result.reused = len(suite.cases) - len(todo)
    return result, todo


def record_missing(suite: Suite, todo: dict[str, Pending], result: Generation,
                   held: ExitStack, echo: Echo) -> Generation:
    """Holding the entry's lock (in `held`): `todo` recorded in a worktree of the reference
    (held there too), every case of it accounted for, and `result` completed."""
    from regression.repository.worktree import reference_worktree

    reference = suite.reference
    root = held.enter_context(reference_worktree(reference.repo, reference.sha))
    recorded = record_cases(suite, root, {n: p.harness for n, p in todo.items()}, echo)
    result.recorded, result.absent = list(recorded.recorded), dict(recorded.absent)
    require_all_ran(todo, result)
    store_collections(suite, recorded)
    result.nondeterministic = find_nondeterministic(
        suite, root, {n: todo[n].harness for n in result.recorded}, echo)
    suite.entry.touch()
    return result


def store_collections(suite: Suite, recorded: RecordResult) -> None:
    """What the recording collected at the reference, for each test file the check run
    collected too, with that file's harness and the conditions here: a later check run
    with the same test code and conditions fails a case it no longer collects
    (plugin/end_of_run.py). Nothing where the check run's own options may decide what is
    collected (no conditions)."""
    collected = recorded.collected
    if not suite.conditions or collected is None:
        return
    with_cases = {case.split("::", 1)[0] for case in suite.cases}
    for file, harness in suite.files.items():
        if collected.get(file) or file in with_cases:  # (a file of no case either side: none)
            suite.entry.save_collection(Collection(file, harness, recorded.helpers,
                                                   tuple(collected.get(file, ())),
                                                   suite.conditions))


def find_nondeterministic(suite: Suite, worktree: Path, recorded: dict[str, str], echo: Echo
                          ) -> dict[str, str]:
    """Record `recorded` again, each time in a new process, `suite.repeat - 1` times; a case
    whose outputs differ from the first recording is stored as nondeterministic."""
    found: dict[str, str] = {}
    for again in range(2, suite.repeat + 1):
        wanted = {n: h for n, h in recorded.items() if n not in found}
        if not wanted:
            break
        echo(f"recording {counted_cases(len(wanted))} again ({again} of {suite.repeat}) to find "
             "nondeterministic ones ...")
        differ = record_cases(suite, worktree, wanted, echo, verify=True).differ
        for nodeid, names in differ.items():
            listed = ", ".join(repr(str(name)) for name in names)
            found[nodeid] = (f"outputs {listed} differed between recording 1 and recording "
                             f"{again}, each in its own process")
            record = suite.entry.load_case(nodeid)
            if record is not None:
                suite.entry.save_case(replace(record, status=NONDETERMINISTIC,
                                              reason=found[nodeid]))
    if recorded and suite.repeat > 1 and not found:
        echo(f"no nondeterministic case: each of the {len(recorded)} recorded gave the same "
             f"outputs {suite.repeat} times")
    return found


def counted_cases(count: int) -> str:
    return f"{count} case{'' if count == 1 else 's'}"


def require_all_ran(todo: dict[str, Pending], result: Generation) -> None:
    missing = [n for n in todo if n not in result.absent and n not in result.recorded
               and n not in result.doubtful]
    if missing:
        listed = "\n  ".join(missing[:10])
        raise RegressionError(
            f"{len(missing)} cases were collected at the reference but never ran, so nothing "
            f"was stored for them:\n  {listed}\nWas the run stopped early? Options such as -x, "
            "--maxfail, -k or -m in your pytest addopts stop or filter the recording; remove "
            "them from addopts, then run `invoke gen` again."
        )


def record_cases(suite: Suite, worktree: Path, todo: dict[str, str], echo: Echo,
                 verify: bool = False, full_values: bool = False) -> RecordResult:
    """Record `todo` in a new process, the subject from `worktree` (of the reference)."""
    reference = suite.reference
    try:
        job = record_job(ReproduceJob, reference, worktree, parts=suite.entry.parts,
                         cases=todo, workers=suite.workers) if verify else record_job(
            RecordJob, reference, worktree, parts=suite.entry.parts, cases=todo,
            workers=suite.workers, full_values=full_values)
        return run_recording(reference, job, echo)
    except KeyboardInterrupt:
        kept = still_valid(suite.entry, todo)
        echo(f"recording interrupted: {kept} of {len(todo)} cases were stored and are kept; "
             "the reference worktree was removed. `invoke gen` records the rest.")
        raise


def run_recording(reference: Reference, job: RecordingJob, echo: Echo,
                  working_tree: bool = False) -> RecordResult:
    """Run a record job in a new process: its result, or its error raised here.
    `working_tree`: the job's subject is the working tree's, not the reference's."""
    settings = reference.settings
    with scratch_folder("result") as folder:
        job = replace(job, result=str(Path(folder) / "result.json"))
        process = run_pytest(settings, recording_args(settings), job, True,
                             progress=lambda line: echo(f"  {line}"))
        return outcome(reference, job, process, working_tree)


def outcome(reference: Reference, job: RecordingJob, process: subprocess.CompletedProcess[str],
            working_tree: bool = False) -> RecordResult:
    """What an ended record job handed back: its result, or its error raised here (one that
    left neither: its exit and last lines)."""
    error, result = job.read_error(), job.read_result()
    if error is not None:
        raise in_context(reference, error, working_tree)
    if result is None:
        where = "in the working tree" if working_tree else f"at {reference.label}"
        raise RegressionError(f"recording {where} stopped without a result "
                              f"({ended(process.returncode)}):\n{tail(process)}")
    return result


def ended(code: int) -> str:
    """How a process ended, in words: its exit code, or the signal that killed it."""
    if code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"killed by signal {-code}"
    if -code == signal.SIGBUS:
        return (f"killed by {name}: a file it had mapped into memory, as safetensors and numpy "
                "loads do, shrank while it read it. If a test rewrites in place a file that "
                "the check run beside the recording writes too, give each process its own "
                "file, or set `record_beside_check: false` in config.yaml to record first")
    return f"killed by {name}"


def recording_args(settings: Settings) -> list[str]:
    """pytest's arguments for a recording: quiet, every case collectable run."""
    tests = [str(settings.root / t) for t in settings.tests]  # the working folder moves
    return ["-q", "--no-header", "-rN", "--continue-on-collection-errors", *tests]


def record_job(kind: type[Kind], reference: Reference, root: Path, working_tree: bool = False,
               **fields: Any) -> Kind:
    """The one place a recording's job is built, of any kind (record, reproduce, trace): the
    subject imported from `root` (a worktree of the reference, or with `working_tree` the
    working tree's own), run in the project's folder there; `fields` are the kind's others
    (cases, parts, the pipes beside a check run, the trace's folder...)."""
    return kind(reference, subject_root=str(root / reference.settings.subject_path),
                workdir="" if working_tree else str(project_in(reference, root)), **fields)


def project_in(reference: Reference, worktree: Path) -> Path:
    """The project's folder in a worktree of its repository: where the recording runs, as
    pytest would be run there, so that relative paths name the reference's files."""
    top = Path(reference.repo.working_dir).resolve()
    root = reference.settings.root.resolve()
    folder = worktree / root.relative_to(top) if root.is_relative_to(top) else worktree
    return folder if folder.is_dir() else worktree  # a folder the reference does not have


def still_valid(entry: Entry, todo: dict[str, str]) -> int:
    """How many of `todo` the entry now holds a valid reference of."""
    count = 0
    for nodeid, harness in todo.items():
        try:
            stored = entry.valid_harness(nodeid)
            count += stored is not None and stored.digest == harness
        except RegressionError:
            continue
    return count


def in_context(reference: Reference, error: RegressionError,
                working_tree: bool = False) -> RegressionError:
    """A recording's error as the user needs it: the subject failing to import says where
    and what to do; any other error is the child's own, attributes and all."""
    if not isinstance(error, SubjectImportError):
        return error
    packages = ", ".join(reference.settings.subject_packages)
    if working_tree:
        return SubjectImportError(
            f"the subject ({packages}) fails to import in the working tree:\n"
            f"{str(error).rstrip()}\nFix: make it import (`python -c 'import "
            f"{reference.settings.subject_packages[0]}'` shows the error), then run again.")
    return SubjectImportError(
        f"the subject ({packages}) fails to import at the reference {reference.label}, "
        f"so nothing can be recorded there:\n{str(error).rstrip()}\n"
        "Fix: choose a reference where it imports (--reference or config.yaml's "
        "`reference`), or check `subject.path` in config.yaml."
    )
