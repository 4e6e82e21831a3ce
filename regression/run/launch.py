"""Starts pytest for a job: in a new process, or in a fork of this one; and nothing else.

What the processes do is the plugins' (regression.plugin); what to ask of them is the API's
(regression.run.api) and the recording's (regression.references).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator, NoReturn, Protocol, Sequence, Union

from regression.config.settings import Settings
from regression.config.paths import CACHE_DIR_ENV
from regression.errors import RegressionError
from regression.run import forkserver
from regression.run.lifeline import ending_with_this_process
from regression.repository.gitcmd import git_environment
from regression.environment.start import in_run, start_environment, without_hand_on
from regression.run.job import GEN_ONLY, JOB_ENV, PROGRESS, CheckJob, CollectJob, Job, RecordJob, \
    ReproduceJob
from regression.run.types import Echo
from regression.store.scratch import scratch_folder

_AT_EXIT: list[Callable[[], None]] = []
"""What must run as this process ends, however: see before_exit."""


def before_exit(callback: Callable[[], None]) -> Callable[[], None]:
    """Run `callback` as this process ends, however it ends: a forked check run ends with
    os._exit, which skips atexit, and one whose conftest fails to import never reaches the
    plugins' last hooks. Not in a process a test forks from it. Returns the function that
    forgets it (once it has run its course)."""
    owner = os.getpid()

    def in_owner() -> None:
        if os.getpid() == owner:
            callback()

    _AT_EXIT.append(in_owner)
    atexit.register(in_owner)

    def forget() -> None:
        if in_owner in _AT_EXIT:
            _AT_EXIT.remove(in_owner)
        atexit.unregister(in_owner)
    return forget


def _run_at_exit() -> None:
    for callback in list(_AT_EXIT):
        try:
            callback()
        except Exception:  # noqa: BLE001 - the process ends anyway; the next run cleans up
            pass


# Plugins that reorder tests or reseed generators would make the two runs differ.
ISOLATION = ("-p", "no:cacheprovider", "-p", "no:randomly")


def _xdist_args(job: Job | None) -> tuple[str, ...]:
    """pytest-xdist as the job asks, whatever addopts says: collecting and `invoke gen` run
    in one process, recording in `job.workers` workers or one process."""
    if job is None or (isinstance(job, CheckJob) and job.gen != GEN_ONLY):
        return ()  # the check run: the task passes --workers as -n, or addopts decides
    if importlib.util.find_spec("xdist") is None:
        return ()  # the tasks refuse --workers without it
    workers = job.workers if not isinstance(job, (CheckJob, CollectJob)) and job.workers > 1 \
        else 0
    return ("-n", str(workers))


TOOL_VARIABLES = ("REGRESSION_",)
"""The tool's own variables, which a child takes as they are now (the fork server's
address is set once the run has started)."""


def _child_environment(settings: Settings, job_file: Path | None) -> dict[str, str]:
    """The environment of a pytest run for `settings`: this process's as its own run started
    (a recording started by the check run gets nothing its conftests, fixtures or subject
    set since: the working tree's code could pose as the reference's), with the tool's own
    variables as they are now; no GIT_* (a hook's), no xdist worker variables (a worker's
    child is none), our cache, and the job, if any. The fork server's address stays (a
    check worker's recording, a new Python, has its workers forked by the check run's
    server), but for a repeat, whose workers must be new Pythons too."""

    started = {**start_environment(), **{k: v for k, v in os.environ.items()
                                         if k.startswith(TOOL_VARIABLES)}}
    env = {k: v for k, v in git_environment(started).items()
           if k != JOB_ENV and not k.startswith("PYTEST_XDIST_")}
    if not in_run():
        env = without_hand_on(env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[CACHE_DIR_ENV] = str(settings.cache_dir)  # `compare` runs in a worktree: our cache
    if job_file is not None:
        env[JOB_ENV] = str(job_file)
    return env


def _pytest_args(settings: Settings, args: Sequence[str], job: Job | None) -> list[str]:
    return [*ISOLATION, "--rootdir", str(settings.root), *_xdist_args(job), *args]


def run_pytest(settings: Settings, args: Sequence[str], job: Job | None,
            capture: bool, progress: Echo | None = None) -> subprocess.CompletedProcess[str]:
    """Run pytest in a new process in the root (a recording or a collect run: a fork of this
    process's fork server, where it has one); with `progress`, its output is captured and
    its progress lines go to `progress` as they come."""
    with scratch_folder("job") as folder:
        job_file = None
        if job is not None:
            job_file = Path(folder) / "job.json"
            job.save(job_file)
        arguments = _pytest_args(settings, args, job)
        command = [sys.executable, "-m", "pytest", *arguments]
        env = _child_environment(settings, job_file)
        if job is None or isinstance(job, (CheckJob, CollectJob)):
            env = without_hand_on(env)  # a run on its own: it takes its own start
        if isinstance(job, ReproduceJob):  # a repeat, and its workers, are new Pythons: a
            env.pop(forkserver.ADDRESS_ENV, None)  # fork has its parent's string hashes and
            # memory layout, so it could not show nondeterminism that comes from them
        if (capture or progress is not None) and job is not None \
                and not isinstance(job, (CheckJob, ReproduceJob)) \
                and forkserver.server(settings.root, RECORDING_MODULES) is not None:
            read, write = os.pipe()  # after the server started: it holds no end of it
            try:
                served = _served(settings, arguments, env, write)
            finally:
                os.close(write)
            if served is not None:
                return _streamed(served, os.fdopen(read, "r", encoding="utf-8",
                                                   errors="replace"), progress)
            os.close(read)
        if progress is not None:
            return _streamed(*_started(command, settings.root, env), progress)
        return subprocess.run(command, cwd=settings.root, env=env, text=True,
                              capture_output=capture, check=False,
                              preexec_fn=ending_with_this_process())


Started = Union[subprocess.Popen[str], forkserver.ServedChild]
"""A recording started to run beside: a new Python, or a fork of the fork server."""


def start_pytest(settings: Settings, args: Sequence[str], job: RecordJob, folder: Path,
                 output: IO[str], pipes: Sequence[int]) -> Started:
    """Start pytest for `job` in a new process (a fork of this process's fork server, where
    it has one) and return at once: its job file in `folder`, its output into `output`, and
    `pipes` (file descriptors) inherited."""
    job_file = folder / "job.json"
    job.save(job_file)
    arguments = _pytest_args(settings, args, job)
    env = _child_environment(settings, job_file)
    output.flush()
    served = _served(settings, arguments, env, output.fileno(), pipes)
    if served is not None:
        return served
    return subprocess.Popen([sys.executable, "-m", "pytest", *arguments], cwd=settings.root,
                            env=env, text=True, stdout=output, stderr=subprocess.STDOUT,
                            pass_fds=tuple(pipes), preexec_fn=ending_with_this_process())


def _served(settings: Settings, arguments: list[str], env: dict[str, str], output: int,
            pipes: Sequence[int] = ()) -> forkserver.ServedChild | None:
    """A recording or a collect run forked by this process's fork server, its output into
    the file descriptor `output`; None where there is no server (or it is gone): a new
    Python, then."""
    server = forkserver.server(settings.root, RECORDING_MODULES)
    if server is None or not server.serves(env):
        return None
    try:
        return server.start([*ALREADY_IMPORTED, *arguments], settings.root,
                            {**env, forkserver.ADDRESS_ENV: server.address}, output, pipes)
    except OSError:
        return None


def _started(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[Child, IO[str]]:
    child = subprocess.Popen(command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, preexec_fn=ending_with_this_process())
    assert child.stdout is not None
    return child, child.stdout


def _streamed(child: Child, stdout: IO[str], progress: Echo | None
              ) -> subprocess.CompletedProcess[str]:
    """Wait for `child`, the progress lines of its output (`stdout`) shown live (where there
    is a `progress`), the rest kept. On Ctrl-C, the child (which a terminal interrupts too)
    is given time to store what it finished."""
    kept: list[str] = []
    with stdout:
        try:
            for line in stdout:
                before, marker, shown = line.partition(PROGRESS)  # after pytest's dots
                if marker and progress is not None:
                    progress(shown.rstrip("\n"))
                    line = before
                kept.append(line)
            code = child.wait()
        except KeyboardInterrupt:
            let_finish(child)
            raise
    return subprocess.CompletedProcess(getattr(child, "args", []), code, "".join(kept), "")


class Child(Protocol):
    """A child process as let_finish handles it: a subprocess.Popen, or a fork."""

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def let_finish(child: Child, first: float = 2.0) -> None:
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
def _started_as_pytest(settings: Settings, child: dict[str, str], args: Sequence[str]
                       ) -> Iterator[None]:
    """This process as `python -m pytest ARGS` in the root would start: that folder current
    and first on sys.path, the `child` environment, its `sys.argv`, no bytecode written; all
    restored after."""
    folder, path, environ = os.getcwd(), list(sys.path), dict(os.environ)
    bytecode, argv, orig_argv = sys.dont_write_bytecode, sys.argv, sys.orig_argv
    try:
        os.chdir(settings.root)
        sys.path.insert(0, str(settings.root))
        os.environ.clear()
        os.environ.update(child)
        sys.dont_write_bytecode = True
        sys.argv, sys.orig_argv = forkserver.pytest_argv(args)
        yield
    finally:
        sys.dont_write_bytecode = bytecode
        sys.argv, sys.orig_argv = argv, orig_argv
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        os.chdir(folder)


# invoke imported this package before pytest starts, so pytest cannot mark it for assertion
# rewriting (it has no asserts to rewrite) and warns; with `filterwarnings = error` in the
# project's settings that warning would stop the run. A command-line filter beats the ini's.
ALREADY_IMPORTED = ("-W", "ignore:Module already imported so cannot be rewritten; regression"
                          ":pytest.PytestAssertRewriteWarning")


RECORDING_MODULES = ("torch", "pytest", "regression.run.entry", "regression.plugin",
                     "regression.plugin.recording_mode")
"""What every recording loads: loaded once by the fork server, not in each of its forks."""


def load_before_forks() -> None:
    """For a task that reads outputs in its own process too (bisect, explain): what every
    recording loads (torch first), loaded here before the first fork, so that the forks of
    this process (its collections, its check run) and of its fork server (each recording)
    find it loaded: torch imported once, not once in each of three processes one after the
    other (about 2.5 s each). No torch operation runs here before a fork."""
    for name in RECORDING_MODULES:
        __import__(name)  # as an import statement does (audit hooks see it)


def forks(job: CheckJob | CollectJob) -> bool:
    """Whether `job` runs in a fork of this process (run_forked) rather than a new Python:
    not where the candidate's subject must be the first one loaded (compare: this process
    may have loaded another through tasks.py), nor where this process has started CUDA
    (`--full-values` on a GPU: the fork could not use it), nor where there is no fork."""
    return not job.subject_root and hasattr(os, "fork") and not forkserver.cuda_started()


def run_forked(settings: Settings, args: Sequence[str], job: CheckJob | CollectJob,
               output: Path | None = None) -> int:
    """Run pytest in a fork of this process, as `run_pytest` would in a new one: no second
    Python start, no second import of what this one has loaded (torch, our package),
    and yet a process of its own, so that a run that ends early (os._exit in a test) cannot
    end this one, which then reads the run's completion record. With `output`, what the
    run prints goes to that file (as `run_pytest` captures it), not to this one's."""
    with scratch_folder("job") as folder:
        job_file = Path(folder) / "job.json"
        job.save(job_file)
        environment = without_hand_on(_child_environment(settings, job_file))  # its errors
        # are this process's; the run takes its own start environment
        forkserver.prepare_fork()
        ending = ending_with_this_process()
        pid = os.fork()
        if pid == 0:
            if ending is not None:
                ending()  # a cancelled job's KILL of this process ends the child too
            _run_child(settings, _pytest_args(settings, args, job), environment, job, output)
        child = Forked(pid)
        try:
            with _terminate_passed_on(child):
                return child.wait()
        except KeyboardInterrupt:  # the child, in this process group, was interrupted too
            let_finish(child, first=30.0)
            if output is not None:  # a collection: it has nothing to store, the user stopped
                raise
            return child.wait()
        except Terminated:
            child.end(grace=10.0)
            raise SystemExit(128 + signal.SIGTERM) from None


class Terminated(Exception):
    """This process was sent TERM (a cancelled CI job) while its check run ran."""


@contextmanager
def _terminate_passed_on(child: Forked) -> Iterator[None]:
    """While the check run runs, TERM to this process is passed on to it (which stops its
    recording and lets go of the worktree and the lock), then raises Terminated here, so that
    this process too lets go of what it holds. Only on the main thread, where signals go."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def passed_on(signum: int, frame: object) -> None:
        child.send_signal(signal.SIGTERM)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, passed_on)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _end_at_once(signum: int, frame: object) -> None:
    """TERM to the forked check run (passed on by the invoke process, or its parent-death
    signal): its recording is stopped and its worktree, folders and lock let go (the
    before_exit callbacks), and it ends now, without finishing the run."""
    _end(128 + signum)


def _end(code: int) -> NoReturn:
    """End the forked check run now: what must run as it ends, its output flushed."""
    _run_at_exit()
    forkserver.let_go()
    forkserver.exit_now(code)


def _run_child(settings: Settings, args: list[str], environment: dict[str, str],
               job: CheckJob | CollectJob, output: Path | None) -> NoReturn:
    """The forked run: pytest, set up as in the root (its output into `output`, if any),
    then the process ends with its exit code, never returning into the caller's code."""
    code = 1
    signal.signal(signal.SIGTERM, _end_at_once)
    try:
        import pytest

        if output is not None:
            captured = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for stream in (1, 2):
                os.dup2(captured, stream)
            os.close(captured)

        if isinstance(job, CheckJob):
            served = forkserver.server(settings.root, RECORDING_MODULES)  # before pytest
            if served is not None:  # the check run's xdist workers are forks of it too
                environment[forkserver.ADDRESS_ENV] = served.address
        arguments = [*ALREADY_IMPORTED, *args]
        with _started_as_pytest(settings, environment, arguments):
            code = int(pytest.main(arguments))
    except RegressionError as exc:  # before pytest ran: the invoke process says it, as data
        job.write_error(exc)
        code = 2
    except SystemExit as exc:  # raised past pytest (a conftest's sys.exit), as Python ends
        code = forkserver.exit_code(exc)
    except BaseException:  # noqa: B036 - the child must end here, whatever happened
        traceback.print_exc()
    finally:
        _end(code)


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

    def end(self, grace: float) -> None:
        """Wait `grace` seconds for the child to end (it was told to), then kill it."""
        try:
            self.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()


def tail(process: subprocess.CompletedProcess[str], lines: int = 30) -> str:
    """The last lines a captured run printed: where it says why it failed."""
    text = (process.stdout or "") + (process.stderr or "")
    return "\n".join(text.strip().splitlines()[-lines:])
