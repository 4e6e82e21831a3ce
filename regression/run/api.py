"""Runs the pytest subprocesses behind gen, test and key."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Protocol, Sequence

import git

from regression import shard
from regression.store.cache import NONDETERMINISTIC, Entry, StoredHarness
from regression.run.completion import settle
from regression.config import CACHE_DIR_ENV, Settings
from regression.durations import read_durations
from regression.errors import CacheError, CacheWriteError, CollectionError, \
    ImportRedirectError, ReadOnlyError, RegressionError, RunIncompleteError, StoreError, \
    SubjectImportError, error_from_data
from regression.fingerprint import digest, environment_parts, files_digest
from regression.harness import changed_helpers, python_files_under
from regression.run.job import CHECK, COLLECT, GEN_AUTO, GEN_ONLY, JOB_ENV, PROGRESS, RECORD, Job
from regression.store.scratch import scratch_folder
from regression.shard import ShardSpec
from regression.revision import describe, git_environment, open_repo, prune_stale_worktrees, reference_worktree, resolve_revision, \
    short

Echo = Callable[[str], None]
# Plugins that reorder tests or reseed generators would make the two runs differ.
ISOLATION = ("-p", "no:cacheprovider", "-p", "no:randomly")


@dataclass(frozen=True)
class Reference:
    """A reference revision, resolved to a commit."""

    settings: Settings
    repo: git.Repo
    revision: str
    sha: str

    @property
    def label(self) -> str:
        return describe(self.revision, self.sha)


@dataclass(frozen=True)
class Suite:
    """The candidate's regression cases, and the cache entry of this environment."""

    reference: Reference
    cases: dict[str, str]
    entry: Entry
    shard: ShardSpec | None = None
    subject_root: Path | None = None
    """Set by `compare`: the candidate's subject comes from this worktree."""
    workers: int = 0
    """pytest-xdist workers for recording; 0 or 1 records in one process."""
    repeat: int = 1
    """Recordings of each case recorded; from 2, differing ones are stored nondeterministic."""


def select_shard(suite: Suite, spec: ShardSpec | None) -> Suite:
    """The suite narrowed to one shard (every case when `spec` is None)."""
    if spec is None:
        return suite
    settings = suite.reference.settings
    chosen = shard.select(suite.cases, spec, read_durations(settings.durations_file),
                          settings.pins)
    return replace(suite, cases={c: suite.cases[c] for c in chosen}, shard=spec)



@dataclass
class Generation:
    """What `gen` did."""

    reused: int = 0
    recorded: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    nondeterministic: dict[str, str] = field(default_factory=dict)
    """Recorded cases whose recordings differed, and how."""


def resolve(settings: Settings, reference: str | None) -> Reference:
    """Resolve the reference revision (config.yaml's unless given) to a commit."""
    revision = settings.revision_for(reference)
    repo = open_repo(settings.root)
    return Reference(settings, repo, revision, resolve_revision(repo, revision))


def _xdist_args(job: Job | None) -> tuple[str, ...]:
    """pytest-xdist as the job asks, whatever addopts says (-n 2 there): collecting and
    `invoke gen` run in one process, recording in `job.workers` workers or one process."""
    if job is None or (job.mode == CHECK and job.gen != GEN_ONLY):
        return ()  # the check run: the task passes --workers as -n, or addopts decides
    if importlib.util.find_spec("xdist") is None:
        return ()  # the tasks refuse --workers without it
    workers = job.workers if job.mode == RECORD and job.workers > 1 else 0
    return ("-n", str(workers))


def _child_environment(settings: Settings, job_file: Path | None) -> dict[str, str]:
    """The environment of a pytest run for `settings`: no GIT_* (a hook's), no xdist worker
    variables (a worker's child is none), our cache, and the job, if any."""
    env = {k: v for k, v in git_environment(os.environ).items()
           if k != JOB_ENV and not k.startswith("PYTEST_XDIST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[CACHE_DIR_ENV] = str(settings.cache_dir)  # `compare` runs in a worktree: our cache
    if job_file is not None:
        env[JOB_ENV] = str(job_file)
    return env


def _pytest_args(settings: Settings, args: Sequence[str], job: Job | None) -> list[str]:
    return [*ISOLATION, "--rootdir", str(settings.root), *_xdist_args(job), *args]


def _pytest(settings: Settings, args: Sequence[str], job: Job | None,
            capture: bool, progress: Echo | None = None) -> subprocess.CompletedProcess[str]:
    """Run pytest in a new process in the root; with `progress`, its output is captured and
    its progress lines go to `progress` as they come."""
    with scratch_folder("job") as folder:
        job_file = None
        if job is not None:
            job_file = Path(folder) / "job.json"
            job.save(job_file)
        command = [sys.executable, "-m", "pytest", *_pytest_args(settings, args, job)]
        env = _child_environment(settings, job_file)
        if progress is not None:
            return _streamed(command, settings.root, env, progress)
        return subprocess.run(command, cwd=settings.root, env=env, text=True,
                              capture_output=capture, check=False)


def _streamed(command: list[str], cwd: Path, env: dict[str, str],
              progress: Echo) -> subprocess.CompletedProcess[str]:
    """Run `command`, its progress lines shown live, the rest kept. On Ctrl-C, the child
    (which a terminal interrupts too) is given time to store what it finished."""
    kept: list[str] = []
    with subprocess.Popen(command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT) as child:
        assert child.stdout is not None
        try:
            for line in child.stdout:
                before, marker, shown = line.partition(PROGRESS)  # after pytest's dots
                if marker:
                    progress(shown.rstrip("\n"))
                    line = before
                kept.append(line)
            child.wait()
        except KeyboardInterrupt:
            _let_finish(child)
            raise
    return subprocess.CompletedProcess(command, child.returncode, "".join(kept), "")


class Child(Protocol):
    """A child process as _let_finish handles it: a subprocess.Popen, or a fork."""

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def _let_finish(child: Child, first: float = 2.0) -> None:
    """Wait for an interrupted child to store what it finished: interrupt it if the signal
    did not reach it after `first` seconds, kill it if it does not end, or if the user
    interrupts again."""
    try:
        for signal_first, seconds in ((None, first), (signal.SIGINT, 60.0)):
            if signal_first is not None:
                child.send_signal(signal_first)
            try:
                child.wait(timeout=seconds)
                return
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:
        pass
    child.kill()
    child.wait()


@contextmanager
def _started_as_pytest(settings: Settings, child: dict[str, str]) -> Iterator[None]:
    """This process as `python -m pytest` in the root would start: that folder current and
    first on sys.path, the `child` environment, no bytecode written; all restored after."""
    folder, path, environ = os.getcwd(), list(sys.path), dict(os.environ)
    bytecode = sys.dont_write_bytecode
    try:
        os.chdir(settings.root)
        sys.path.insert(0, str(settings.root))
        os.environ.clear()
        os.environ.update(child)
        sys.dont_write_bytecode = True
        yield
    finally:
        sys.dont_write_bytecode = bytecode
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        os.chdir(folder)


# invoke imported this package before pytest starts, so pytest cannot mark it for assertion
# rewriting (it has no asserts to rewrite) and warns; with `filterwarnings = error` in the
# project's settings that warning would stop the run. A command-line filter beats the ini's.
ALREADY_IMPORTED = ("-W", "ignore:Module already imported so cannot be rewritten; regression"
                          ":pytest.PytestAssertRewriteWarning")


def _pytest_forked(settings: Settings, args: Sequence[str], job: Job) -> int:
    """Run pytest in a fork of this process, as `_pytest` would in a new one: no second
    Python start, no second import of what this one has loaded (GitPython, our package),
    and yet a process of its own, so that a run that ends early (os._exit in a test) cannot
    end this one, which then reads the run's completion record."""
    with scratch_folder("job") as folder:
        job_file = Path(folder) / "job.json"
        job.save(job_file)
        environment = _child_environment(settings, job_file)  # its errors are this process's
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(settings, _pytest_args(settings, args, job), environment, job)
        child = Forked(pid)
        try:
            return child.wait()
        except KeyboardInterrupt:  # the child, in this process group, was interrupted too
            _let_finish(child, first=30.0)
            return child.wait()


def _run_child(settings: Settings, args: list[str], environment: dict[str, str],
               job: Job) -> NoReturn:
    """The forked check run: pytest, set up as in the root, then the process ends with its
    exit code, never returning into the caller's code."""
    code = 1
    try:
        import pytest

        with _started_as_pytest(settings, environment):
            code = int(pytest.main([*ALREADY_IMPORTED, *args]))
    except RegressionError as exc:  # before pytest ran: the invoke process says it, as data
        job.write_error(exc)
        code = 2
    except SystemExit as exc:  # raised past pytest (a conftest's sys.exit), as Python ends
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: B036 - the child must end here, whatever happened
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing left to say
                pass
        os._exit(code)


class Forked:
    """A forked child, waited for as subprocess.Popen waits for one."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            flags = 0 if deadline is None else os.WNOHANG
            pid, status = os.waitpid(self.pid, flags)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            else:
                time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _tail(process: subprocess.CompletedProcess[str], lines: int = 30) -> str:
    text = (process.stdout or "") + (process.stderr or "")
    return "\n".join(text.strip().splitlines()[-lines:])


def collect(reference: Reference, subject_root: Path | None = None) -> Suite:
    """The candidate's regression cases and environment, as pytest itself sees them."""
    result = _collected(reference, subject_root)
    cases = {str(k): str(v) for k, v in result["cases"].items()}
    parts = {str(k): str(v) for k, v in result["parts"].items()}
    return Suite(reference, cases, Entry(reference.settings.cache_dir, parts),
                 subject_root=subject_root)


def matching_cases(reference: Reference, expression: str) -> list[str]:
    """The regression cases a pytest `-k` expression selects, as pytest itself matches."""
    return [str(c) for c in _collected(reference, None, ("-k", expression))["selected"]]


def _collected(reference: Reference, subject_root: Path | None,
               select: Sequence[str] = ()) -> dict[str, Any]:
    """What a collect run writes: every case with its harness digest, the cases `select`
    leaves selected, and the environment's parts."""
    settings = reference.settings
    with scratch_folder("result") as folder:
        job = Job(mode=COLLECT, result=str(Path(folder) / "result.json"),
                  config=str(settings.path), reference=reference.sha,
                  subject_root=str(subject_root or ""))
        process = _pytest(settings, ["--collect-only", "-q", *select, *settings.tests], job,
                          True)
        result = job.read_result()
        if result and "error" in result:
            raise _record_error(reference, str(result["error"]), str(result.get("message")))
        if process.returncode not in (0, 5) or result is None or "cases" not in result:
            raise CollectionError(
                f"pytest could not collect the tests in {', '.join(settings.tests)} "
                f"(exit {process.returncode}); fix the errors below, then run again:\n"
                f"{_tail(process)}"
            )
    return result


@dataclass(frozen=True)
class Pending:
    """A case to record, and why: missing, stale, forced, or a fault in what was stored."""

    harness: str
    why: str
    fault: bool = False


def plan(entry: Entry, cases: dict[str, str], force: bool, root: Path) -> dict[str, Pending]:
    """The cases that need recording, by node id (`root`: where their helpers are)."""
    todo: dict[str, Pending] = {}
    known: dict[Path, str] = {}  # helper digests, read once for all cases
    for nodeid, harness in cases.items():
        try:
            stored = None if force else entry.valid_harness(nodeid)
        except StoreError as exc:
            todo[nodeid] = Pending(harness, str(exc), fault=True)
            continue
        why = "forced" if force else "not recorded yet" if stored is None else \
            _stale(stored, harness, root, known)
        if why:
            todo[nodeid] = Pending(harness, why)
    return todo


def _stale(stored: StoredHarness, harness: str, root: Path, known: dict[Path, str]) -> str:
    """Why a stored case no longer matches its harness; "" when it does."""
    if stored.digest != harness:
        return "its test file or a conftest.py changed"
    changed = changed_helpers(root, stored.helpers, known)
    if changed:
        return f"test code it uses changed: {', '.join(changed)}"
    return ""


def require_valid(suite: Suite) -> None:
    """Raise unless every case has a valid stored reference (for `test --no-gen`); reads only."""
    try:
        suite.entry.verify_identity()
        todo = plan(suite.entry, suite.cases, False, suite.reference.settings.root)
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


def _read_only_plan(suite: Suite, force: bool) -> dict[str, Pending] | None:
    """The cases to record, planned with no lock and no write (verified files need neither);
    None when the entry itself is missing or not trusted."""
    try:
        suite.entry.verify_identity()
    except CacheError:
        return None
    return plan(suite.entry, suite.cases, force, suite.reference.settings.root)


def generate(suite: Suite, force: bool = False, echo: Echo = print) -> Generation:
    """Record the reference outputs of the cases that lack a valid one.

    Planning reads only, so a read-only cache (a restored CI cache, a shared mount) holding
    every case serves. Only when something must be recorded is the entry's lock taken, and
    the plan made again under it: a concurrent gen of the same key waits, then finds the work
    done.
    """
    prune_stale_worktrees(suite.reference.repo)  # git's bookkeeping, not the cache
    todo = _read_only_plan(suite, force)
    if todo == {}:
        suite.entry.touch()  # a hint for pruning; skipped where the cache is read-only
        return Generation(reused=len(suite.cases))
    try:
        return _generate_locked(suite, force, echo)
    except ReadOnlyError as exc:
        missing = (f"{len(todo)} of {len(suite.cases)} cases have no valid reference"
                   if todo else f"the cache entry {suite.entry.directory} is missing or unusable")
        raise ReadOnlyError(exc.path, f"{missing}, and nothing can be recorded: {exc.reason}",
                            "make the cache folder writable, or point REGRESSION_CACHE_DIR at a "
                            "writable folder (copy this cache there to keep what it holds), "
                            "then run again.") from None


def _generate_locked(suite: Suite, force: bool, echo: Echo) -> Generation:
    """Plan again and record, holding the entry's lock."""
    result = Generation()
    with suite.entry.lock():
        _open_entry(suite.entry, result.warnings)
        todo = plan(suite.entry, suite.cases, force, suite.reference.settings.root)
        result.warnings += [f"re-recording {nodeid}: {p.why}" for nodeid, p in todo.items()
                            if p.fault]
        for warning in result.warnings:
            echo(f"warning: {warning}")
        result.reused = len(suite.cases) - len(todo)
        if todo:
            echo(f"recording {len(todo)} of {len(suite.cases)} cases at "
                 f"{suite.reference.label} ...")
            reference = suite.reference
            with reference_worktree(reference.repo, reference.sha) as worktree:  # one for all
                wanted = {nodeid: p.harness for nodeid, p in todo.items()}
                recorded = _record(suite, worktree, wanted, echo)
                result.recorded = [str(n) for n in recorded.get("recorded", [])]
                result.absent = {str(k): str(v) for k, v in recorded.get("absent", {}).items()}
                _require_all_ran(todo, result)
                result.nondeterministic = _find_nondeterministic(
                    suite, worktree, {n: todo[n].harness for n in result.recorded}, echo)
        suite.entry.touch()
    return result


def _find_nondeterministic(suite: Suite, worktree: Path, recorded: dict[str, str], echo: Echo
                           ) -> dict[str, str]:
    """Record `recorded` again, each time in a new process, `suite.repeat - 1` times; a case
    whose outputs differ from the first recording is stored as nondeterministic."""
    found: dict[str, str] = {}
    for again in range(2, suite.repeat + 1):
        wanted = {n: h for n, h in recorded.items() if n not in found}
        if not wanted:
            break
        echo(f"recording {_cases(len(wanted))} again ({again} of {suite.repeat}) to find "
             "nondeterministic ones ...")
        differ = _record(suite, worktree, wanted, echo, verify=True).get("differ", {})
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


def _cases(count: int) -> str:
    return f"{count} case{'' if count == 1 else 's'}"


def find_nondeterministic(suite: Suite, echo: Echo) -> dict[str, str]:
    """Record the suite's cases, already stored, once more in a new process at its
    reference: those whose outputs differ from the stored ones are stored as
    nondeterministic and returned, each with how they differed."""
    reference = suite.reference
    with suite.entry.lock(), reference_worktree(reference.repo, reference.sha) as worktree:
        return _find_nondeterministic(replace(suite, repeat=2), worktree, dict(suite.cases),
                                      echo)


def _require_all_ran(todo: dict[str, Pending], result: Generation) -> None:
    missing = [n for n in todo if n not in result.absent and n not in result.recorded]
    if missing:
        listed = "\n  ".join(missing[:10])
        raise RegressionError(
            f"{len(missing)} cases were collected at the reference but never ran, so nothing "
            f"was stored for them:\n  {listed}\nWas the run stopped early? Options such as -x, "
            "--maxfail, -k or -m in your pytest addopts stop or filter the recording; remove "
            "them from addopts, then run `invoke gen` again."
        )


def record_values(reference: Reference, nodeids: Sequence[str], echo: Echo) -> list[str]:
    """`invoke test --full-values`: record again, keeping every tensor's values, the cases
    among `nodeids` whose stored reference keeps some only as a digest; returns those."""
    from regression import determinism

    settings = reference.settings
    determinism.prepare_process(settings.device)  # as the check run does: its key
    entry = Entry(settings.cache_dir, environment_parts(settings, reference.sha))
    wanted = {n: h for n in nodeids if (h := entry.digested_harness(n)) is not None}
    if wanted:
        echo(f"recording the values of {_cases(len(wanted))} whose digests differ, at "
             f"{reference.label}, for the full report ...")
        with entry.lock(), reference_worktree(reference.repo, reference.sha) as worktree:
            _record(Suite(reference, wanted, entry), worktree, wanted, echo, full_values=True)
    return sorted(wanted)


def _record(suite: Suite, worktree: Path, todo: dict[str, str], echo: Echo,
            verify: bool = False, full_values: bool = False) -> dict[str, Any]:
    """Record `todo` in a new process, the subject from `worktree` (of the reference)."""
    reference = suite.reference
    try:
        job = Job(mode=RECORD, result="", config=str(reference.settings.path),
                  reference=reference.sha,
                  subject_root=str(worktree / reference.settings.subject_path),
                  parts=suite.entry.parts, cases=todo, workers=suite.workers, verify=verify,
                  full_values=full_values, workdir=str(_project_in(reference, worktree)))
        return _recording(reference, job, echo)
    except KeyboardInterrupt:
        kept = _still_valid(suite.entry, todo)
        echo(f"recording interrupted: {kept} of {len(todo)} cases were stored and are kept; "
             "the reference worktree was removed. `invoke gen` records the rest.")
        raise


def _recording(reference: Reference, job: Job, echo: Echo, working_tree: bool = False
               ) -> dict[str, Any]:
    """Run a record job in a new process: its result, or its error raised here.
    `working_tree`: the job's subject is the working tree's, not the reference's."""
    settings = reference.settings
    with scratch_folder("result") as folder:
        job = replace(job, result=str(Path(folder) / "result.json"))
        tests = [str(settings.root / t) for t in settings.tests]  # the working folder moves
        process = _pytest(settings, ["-q", "--no-header", "-rN",
                                     "--continue-on-collection-errors", *tests],
                          job, True, progress=lambda line: echo(f"  {line}"))
        result = job.read_result()
    if result is None:
        raise RegressionError(
            f"recording {'in the working tree' if working_tree else f'at {reference.label}'}"
            f" stopped without a result "
            f"(exit {process.returncode}):\n{_tail(process)}"
        )
    if "error" in result:
        raise _record_error(reference, str(result["error"]), str(result.get("message", "")),
                            working_tree)
    return result


def trace_case(reference: Reference, nodeid: str, folder: Path, working_tree: bool,
               echo: Echo) -> None:
    """Run one case with every module call traced into `folder`: with the subject of the
    reference (from a worktree), or of the working tree. Nothing goes into the cache."""
    settings = reference.settings
    with ExitStack() as stack:
        root = settings.root if working_tree else stack.enter_context(
            reference_worktree(reference.repo, reference.sha))
        job = Job(mode=RECORD, result="", config=str(settings.path), reference=reference.sha,
                  subject_root=str(root / settings.subject_path), cases={nodeid: ""},
                  trace=str(folder),
                  workdir="" if working_tree else str(_project_in(reference, root)))
        result = _recording(reference, job, echo, working_tree)
    where = "in the working tree" if working_tree else f"at {reference.label}"
    fix = f"; `pytest '{nodeid}'` shows the whole error" if working_tree else \
        "; choose another --reference"
    absent = result.get("absent", {})
    if absent:
        raise RegressionError(f"{nodeid} cannot be traced {where}: {absent[nodeid]}{fix}")


def _project_in(reference: Reference, worktree: Path) -> Path:
    """The project's folder in a worktree of its repository: where the recording runs, as
    pytest would be run there, so that relative paths name the reference's files."""
    top = Path(reference.repo.working_dir).resolve()
    root = reference.settings.root.resolve()
    folder = worktree / root.relative_to(top) if root.is_relative_to(top) else worktree
    return folder if folder.is_dir() else worktree  # a folder the reference does not have


def _still_valid(entry: Entry, todo: dict[str, str]) -> int:
    """How many of `todo` the entry now holds a valid reference of."""
    count = 0
    for nodeid, harness in todo.items():
        try:
            stored = entry.valid_harness(nodeid)
            count += stored is not None and stored.digest == harness
        except RegressionError:
            continue
    return count


def _record_error(reference: Reference, kind: str, message: str,
                  working_tree: bool = False) -> RegressionError:
    packages = ", ".join(reference.settings.subject_packages)
    if kind == "subject_import" and working_tree:
        return SubjectImportError(
            f"the subject ({packages}) fails to import in the working tree:\n"
            f"{message.rstrip()}\nFix: make it import (`python -c 'import "
            f"{reference.settings.subject_packages[0]}'` shows the error), then run again.")
    if kind == "subject_import":
        return SubjectImportError(
            f"the subject ({packages}) fails to import at the reference {reference.label}, "
            f"so nothing can be recorded there:\n{message.rstrip()}\n"
            "Fix: choose a reference where it imports (--reference or config.yaml's "
            "`reference`), or check `subject.path` in config.yaml."
        )
    if kind == "ImportRedirectError":
        return ImportRedirectError(message)
    return RegressionError(message)


def check_job(reference: Reference, *, shard: ShardSpec | None = None,
              subject_root: Path | None = None, gen: str = GEN_AUTO, force: bool = False,
              workers: int = 0, selection: str = "", repeat: int = 0,
              result: str = "") -> Job:
    """The job of a check run: the resolved reference and what to do about its cache."""
    return Job(mode=CHECK, result=result, config=str(reference.settings.path),
               reference=reference.sha, revision=reference.revision,
               subject_root=str(subject_root or ""), shard=str(shard or ""), gen=gen,
               force=force, workers=workers, selection=selection, repeat=repeat)


def run_check(reference: Reference, job: Job, args: Sequence[str],
              paths: Sequence[str] = ()) -> tuple[int, dict[str, Any] | None]:
    """The one pytest run of `invoke test` or `invoke gen`, in a fork of this process, over `paths`
    (node ids or folders; config.yaml's `tests` when none).

    Returns its exit code and its result. An error it reports as data is raised here as the
    same error; a run that did not report at its very end that it judged every case and
    passed, whatever the exit code of its process, raises RunIncompleteError.
    """
    settings = reference.settings
    with scratch_folder("result") as folder:
        job = replace(job, result=str(Path(folder) / "result.json"))
        args = [*args, *(paths or settings.tests)]
        # compare: the candidate's subject must be the first one loaded, not tasks.py's
        if job.subject_root or not hasattr(os, "fork"):
            code = _pytest(settings, args, job, capture=False).returncode
        else:
            code = _pytest_forked(settings, args, job)
        result = job.read_result()
        journal = job.read_journal()
    if result and "error" in result:
        raise error_from_data(result)
    try:
        return settle(code, result, journal), result
    except RunIncompleteError:
        print(flush=True)  # the run may have ended mid-line
        raise


def cache_key(suite: Suite) -> str:
    """The key CI's cache uses: the environment entry, every case's harness, every Python file
    under the test folders (helpers are known only once recorded), the shard."""
    code = files_digest(suite.reference.settings.root, key_code_files(suite))
    harness = digest(json.dumps([sorted(suite.cases.items()), code]).encode())
    key = f"torch-regression-{short(suite.reference.sha)}-{suite.entry.key[:16]}-{harness[:16]}"
    return f"{key}-shard{suite.shard.index}of{suite.shard.count}" if suite.shard else key


def key_code_files(suite: Suite) -> list[Path]:
    """The Python files under the test folders, which the key hashes: which of them are
    helpers is known only once recorded, and the key is made before the cache is restored."""
    settings = suite.reference.settings
    return python_files_under(settings.root, settings.tests)


@contextmanager
def candidate_checkout(settings: Settings, revision: str) -> Iterator[Path]:
    """A candidate revision as a worktree: the folder its subject is imported from.

    Only the subject comes from the candidate: the working tree's config.yaml and tests
    drive the check, as they drive the reference's recording, so any revision whose subject
    they can call (a tag from before adoption too) can be a candidate."""
    repo = open_repo(settings.root)
    sha = resolve_revision(repo, revision)
    with reference_worktree(repo, sha) as worktree:
        yield worktree / settings.subject_path
