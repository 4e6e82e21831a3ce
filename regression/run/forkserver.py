"""The fork server: the recordings a check run starts, and the xdist workers of both, each a
fork of a process at rest.

A recording is a process of its own, as `python -m pytest` in the project's root would start;
starting Python and importing torch again cost about 2 s of CPU each time. Before pytest
starts, the forked check run forks one more process, the server: no torch operation run (a
fork cannot take a thread pool along: a parallel operation in the child would wait for
threads that are not there), CUDA not started, and nothing of the user's code loaded but
invoke's tasks.py. At the first request it loads torch, pytest and the plugin, once. Each
recording the check run starts is a fork of the server, set up as a new `python -m pytest`
would be: its working folder, environment, `sys.path`, `sys.argv`, signals, standard streams
and the pipes it is handed; and each pytest-xdist worker of the check run and of its
recordings, set up as the `python -u -c CODE` xdist starts (worker_launcher.py asks for it):
nothing loaded twice, and yet a process of its own, which ends as Python ends (its threads
joined, its exit functions run). What a fork cannot take anew is its parent's string hashes
and memory layout: a repeat, which looks for nondeterminism, is a new Python, and so is a
run whose environment sets Python's start-up (PYTHONHASHSEED...) otherwise than the
server's. bisect, explain, compare and `--full-values` start a server in the invoke process at their
first recording, or at their first collect run in a worktree (a check run is not served).
Where a process is not at rest when it would start one (a check run that is itself a new
Python, or an xdist worker, has loaded the user's code by then), its recordings start a new
Python.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import fcntl
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import secrets
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import types
from contextlib import suppress
from pathlib import Path
from typing import Any, Mapping, NoReturn, Sequence

from regression.environment.fingerprint import loaded_library
from regression.environment.origins import stray_modules
from regression.run.lifeline import ending_with_this_process

_SERVERS: list[ForkServer] = []
_REFUSED: list[int] = []
"""The process that found itself not at rest: it asks no more."""


def server(root: Path, preload: Sequence[str]) -> ForkServer | None:
    """This process's fork server, started now if it has none and is at rest: Linux, one
    thread, CUDA not started, and no module of the user's repository at `root` loaded but
    what started it (invoke's script and tasks.py); OpenMP's threads are let go (a fork takes
    no thread along: a parallel operation in the child would wait for them forever). The
    server loads the `preload` modules (what each recording loads: torch, pytest, the
    plugin) at its first request, not before: the check run, which forks it before it loads
    torch itself, may need no recording, and where it does, both load torch at once. None
    where there is none (a server that is gone included: a new Python, then)."""
    me = os.getpid()
    if _SERVERS and _SERVERS[0].owner == me:
        return None if _SERVERS[0].gone else _SERVERS[0]
    if me in _REFUSED:
        return None
    if not _at_rest(root):
        _REFUSED.append(me)
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    address = f"torch-regression-{secrets.token_hex(16)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + address)  # abstract: no file; only this user's processes are served
    listener.listen(64)
    started_with = start_variables(started_environment())
    ending = ending_with_this_process()
    prepare_fork()
    pid = os.fork()
    if pid == 0:
        ours.close()
        if ending is not None:
            ending()
        _STARTED_WITH.update(started_with)
        _serve(theirs, listener, root, preload)
    theirs.close()
    listener.close()
    _SERVERS[:] = [ForkServer(ours, pid, address, started_with)]
    atexit.register(let_go)  # an owner that ends as Python does (invoke's); a check run
    return _SERVERS[0]  # ends with os._exit and lets go itself (launch._end)


def let_go(wait: float = 1.0) -> None:
    """End this process's server, if it has one, and wait up to `wait` seconds for it to
    end: a server its owner waited for is no orphan left for init to reap, and its CPU time,
    its recordings' included, counts in its owner's (as `time` and CI's accounting read
    it). One still stopping a recording then is ended by its parent-death signal as its
    owner exits."""
    if not _SERVERS or _SERVERS[0].owner != os.getpid():
        return
    served = _SERVERS.pop()
    with suppress(OSError):  # the server's end: it stops its forks and exits; shut down,
        served.connection.shutdown(socket.SHUT_RDWR)  # not only closed: a process a test
    with suppress(OSError):  # forked holds a copy, which would keep it open
        served.connection.close()
    deadline = time.monotonic() + wait
    while True:
        try:
            if os.waitpid(served.pid, os.WNOHANG)[0] or time.monotonic() >= deadline:
                return
        except ChildProcessError:
            return
        time.sleep(0.002)


EMULATED = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
"""Python's start-up variables a fork is set up by as a new Python would be (sys.path, the
bytecode flag, unbuffered streams); any other PYTHON* variable acts only as Python starts."""


def start_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The PYTHON* variables of `env` that act only as Python starts (its hash seed, -O,
    warnings, UTF-8 mode...): a fork has those its server started with."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k not in EMULATED}


def started_environment() -> dict[str, str]:
    """The environment this process was started with (Linux's /proc/self/environ, which a
    fork inherits): what Python read as it started, whatever os.environ says since."""
    try:
        data = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    pairs = (os.fsdecode(item).partition("=") for item in data.split(b"\0") if item)
    return {key: value for key, _, value in pairs}


ADDRESS_ENV = "REGRESSION_FORK_SERVER"
"""The address of the fork server that xdist workers of a check run or recording ask for a
worker (worker_launcher.py); a launcher that finds none starts a new Python."""
LAUNCHER = Path(__file__).with_name("worker_launcher.py")


def forked_workers(specs: list[str]) -> list[str]:
    """xdist's worker specs, each local one ("popen", as -n N makes them; a spec of the
    user's own, `--tx 2*popen//...`, is left as it is) started through
    the launcher, which asks the fork server named in the environment for a fork of it (a
    new Python where there is none): xdist then starts no Python importing torch."""
    if ADDRESS_ENV not in os.environ or not sys.platform.startswith("linux"):
        return specs
    launcher = f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(LAUNCHER))}"
    return [f"popen//python={launcher}" if spec == "popen" else spec for spec in specs]


def _at_rest(root: Path) -> bool:
    """Whether a fork of this process can start a recording as a new Python would."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux") \
            or threading.current_thread() is not threading.main_thread() \
            or threading.active_count() != 1:
        return False
    if cuda_started():
        return False
    return not _user_modules(root, allowed=_started_by(root))


def cuda_started() -> bool:
    """Whether this process has started CUDA: a fork of it could not use the GPU ("Cannot
    re-initialize CUDA in forked subprocess")."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def prepare_fork() -> None:
    """Before a fork: output flushed, and OpenMP's thread pool let go, where torch has
    started one (a parallel operation in the child would wait forever for threads that a
    fork does not take along); it starts again at the next parallel operation."""
    sys.stdout.flush()
    sys.stderr.flush()
    library = loaded_library("libgomp") or loaded_library("libiomp")
    if library:
        pause = getattr(ctypes.CDLL(library), "omp_pause_resource_all", None)
        if pause is not None:
            pause.argtypes = [ctypes.c_int]
            pause(2)  # omp_pause_hard: the threads end


class ForkServer:
    """The check run's end of its server."""

    def __init__(self, connection: socket.socket, pid: int, address: str,
                 started_with: dict[str, str]) -> None:
        self.connection = connection
        self.pid = pid
        self.address = address
        """Where xdist workers ask for a fork (ADDRESS_ENV names it in their environment)."""
        self.started_with = started_with
        """Python's start-up variables the server was started with (start_variables)."""
        self.owner = os.getpid()
        self.gone = False

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a run with environment `env` can be a fork of the server: one that sets
        Python's start-up otherwise (a PYTHONHASHSEED of its own...) is a new Python."""
        return start_variables(env) == self.started_with

    def start(self, args: Sequence[str], cwd: Path, env: dict[str, str], output: int,
              pipes: Sequence[int] = ()) -> ServedChild:
        """Start pytest.main(ARGS) in a fork of the server, as `python -m pytest` would run: in
        `cwd`, with `env`, its output into the file descriptor `output`, and `pipes` as this
        process has them."""
        mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {"args": list(args), "cwd": str(cwd), "env": env, "pipes": list(pipes)}
        try:
            socket.send_fds(self.connection, [json.dumps(request).encode()],
                            [its.fileno(), output, *pipes])
            its.close()
            return ServedChild(mine, [sys.executable, "-m", "pytest", *args])
        except OSError:  # the server is gone (killed): the caller starts a new Python
            self.gone = True
            its.close()
            mine.close()
            raise


class ServedChild:
    """A recording forked by the server, waited for and signalled as a subprocess.Popen. It
    is asked for and the caller goes on: the server may first load torch (seconds), which the
    check run meanwhile loads too."""

    def __init__(self, channel: socket.socket, args: list[str]) -> None:
        self.channel = channel
        self.args = args
        self.returncode: int | None = None
        self._pid: int | None = None
        self.lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The recording's process id, once the server has started it (None if it never
        did)."""
        if self._pid is None and self.returncode is None:
            self._status(None, until_started=True)
        return self._pid

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def _status(self, timeout: float | None, until_started: bool = False) -> int | None:
        """Read what the server said of the recording (its pid, then its exit status) for
        up to `timeout` seconds; its exit status, once it has one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.returncode is None and not (until_started and self._pid is not None):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not select.select([self.channel], [], [], left)[0]:
                    break
                message = self.channel.recv(256)
                if not message:  # the server died (killed), and its children with it
                    self.returncode = -signal.SIGKILL
                    self.channel.close()
                    break
                said = json.loads(message)
                if "pid" in said:
                    self._pid = int(said["pid"])
                else:
                    self.returncode = int(said["status"])
                    self.channel.close()
            return self.returncode

    def send_signal(self, sig: int) -> None:
        pid = self.pid  # a recording still being started: once it is
        if pid is not None and self.poll() is None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_STARTED_WITH: dict[str, str] = {}
"""In the server: Python's start-up variables it was started with (start_variables)."""
_IGNORED: list[int] = []
"""The signals the server's parent ignored: ignored in a new Python it started too (exec
keeps a signal ignored; Python then leaves SIGINT alone), as in each recording."""


def _serve(connection: socket.socket, listener: socket.socket, root: Path,
           preload: Sequence[str]) -> NoReturn:
    """The server: a fork for each request, each one's exit status sent back on its own
    channel (a recording's, from the check run; an xdist worker's, from its launcher, whose
    end ends the worker); when the check run is gone, its forks are stopped and the server
    ends."""
    _IGNORED[:] = [s for s in (signal.SIGINT, signal.SIGTERM)
                   if signal.getsignal(s) == signal.SIG_IGN]  # before the server's own
    _fresh_exit_functions()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the runs, not for this
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _close_inherited(keep=(connection.fileno(), listener.fileno()))
    channels: dict[int, socket.socket] = {}
    workers: dict[socket.socket, int] = {}
    code = 0
    try:
        while True:
            ready = select.select([connection, listener, *workers], [], [], 0.05)[0]
            held = (connection, listener, *workers)
            if connection in ready:
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 64)
                if not message:
                    break
                _serve_recording(message, fds, held, channels, root, preload)
            if listener in ready:
                served = _serve_worker(listener, held, channels, root, preload)
                if served is not None:
                    workers[served[0]] = served[1]
            for launcher in [w for w in ready if w in workers]:
                if not _said(launcher):  # its launcher is gone (killed): the worker too
                    _signal(workers.pop(launcher), signal.SIGKILL)
            _reap(channels)
            for launcher in [w for w, pid in workers.items() if pid not in channels]:
                del workers[launcher]  # ended, its status said, its channel closed
        _stop_all(channels)
    except BaseException:  # noqa: B036 - the server ends here, whatever happened
        code = 1
        _stop_all(channels)
    os._exit(code)


def _fork_for(request: dict[str, Any], fds: list[int], held: Sequence[socket.socket | int],
              channels: dict[int, socket.socket], root: Path, preload: Sequence[str]) -> int:
    """Fork what `request` asks for, handed `fds`, which are the fork's alone then; `held`:
    what the fork closes first (the server's sockets)."""
    for name in preload:
        importlib.import_module(name)
    gc.freeze()  # what the server loaded is shared with its forks: their collections skip it
    request["path"] = _new_python_path(request["cwd"], request["env"],
                                       "-c" if "code" in request else "-m")
    pid = _fork_run(request, fds, [*held, *channels.values()], root)
    for fd in fds:
        os.close(fd)
    return pid


def _started(channel: socket.socket, pid: int, channels: dict[int, socket.socket]) -> None:
    """`pid` said on its channel, which will say its exit status."""
    channels[pid] = channel
    try:
        channel.send(json.dumps({"pid": pid}).encode())
    except OSError:
        pass  # its asker is gone: the fork's status is not waited for


def _serve_recording(message: bytes, fds: list[int], held: Sequence[socket.socket],
                     channels: dict[int, socket.socket], root: Path,
                     preload: Sequence[str]) -> None:
    """The check run's request for a recording (its channel, output and pipes in `fds`). One
    that cannot be forked (a preload that fails to import, a sys.path probe that fails) ends
    with its cause in its output and status 1, and the server serves on."""
    channel = socket.socket(fileno=fds[0])
    try:
        pid = _fork_for(json.loads(message), fds[1:], (*held, channel), channels, root,
                        preload)
    except Exception as exc:  # noqa: BLE001 - said where the recording's output goes
        import traceback

        said = "".join(traceback.format_exception(exc))
        with suppress(OSError):
            os.write(fds[1], (f"torch-regression: the fork server could not start this "
                              f"recording: {exc!r}\n{said}").encode())
        for fd in fds[1:]:
            with suppress(OSError):
                os.close(fd)
        with suppress(OSError):
            channel.send(json.dumps({"status": 1}).encode())
        channel.close()
        return
    _started(channel, pid, channels)


REQUEST_WAIT = 0.5
"""Seconds the server waits for a connected launcher's request, every other run waiting."""


def _serve_worker(listener: socket.socket, held: Sequence[socket.socket],
                  channels: dict[int, socket.socket], root: Path,
                  preload: Sequence[str]) -> tuple[socket.socket, int] | None:
    """A launcher's request for an xdist worker: a fork set up as `python ARGS` would start
    with the launcher's folder, environment and standard streams; the launcher's connection
    is the channel of its pid and exit status. Only a process of this user is served."""
    launcher, _ = listener.accept()
    _, uid, _ = struct.unpack("iII", launcher.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("iII")))
    if uid != os.getuid():
        launcher.close()
        return None
    launcher.settimeout(REQUEST_WAIT)  # a launcher sends at once: one that stalls is refused
    try:
        message, fds, _, _ = socket.recv_fds(launcher, 1 << 20, 3)
    except OSError:
        launcher.close()
        return None
    if len(fds) != 3 or not message:
        for fd in fds:
            os.close(fd)
        launcher.close()
        return None
    launcher.settimeout(None)
    try:
        request = {**json.loads(message), "pipes": [0, 1, 2]}
        if start_variables(request["env"]) != _STARTED_WITH:
            raise ValueError("Python's start-up variables differ: a new Python starts it")
        pid = _fork_for(request, fds, [*held, launcher], channels, root, preload)
    except Exception:  # noqa: BLE001 - not served: the launcher, told so, starts Python
        for fd in fds:
            with suppress(OSError):
                os.close(fd)  # where _fork_for did not
        launcher.close()
        return None
    _started(launcher, pid, channels)
    return launcher, pid


def _said(launcher: socket.socket) -> bool:
    """Whether a launcher that woke the server is still there (it says nothing more)."""
    try:
        return bool(launcher.recv(16))
    except OSError:
        return False


def _close_inherited(keep: Sequence[int]) -> None:
    """Close what the server took from its parent but its standard streams and `keep`: a
    pipe whose reader waits for its end (a recording's output), a lock, as a new process
    started with subprocess's close_fds would not hold them."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own, gone already


def _reap(channels: dict[int, socket.socket]) -> None:
    """Send the exit status of each recording that ended to its channel."""
    while channels:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        channel = channels.pop(pid, None)
        if channel is not None:
            try:
                channel.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass  # the check run let go of it
            channel.close()


def _stop_all(channels: dict[int, socket.socket], grace: float = 10.0) -> None:
    """The check run is gone: its recordings are asked to end, then killed."""
    for pid in channels:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while channels and time.monotonic() < deadline:
        _reap(channels)
        time.sleep(0.05)
    for pid in channels:
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _fork_run(request: dict[str, Any], fds: list[int], held: Sequence[socket.socket | int],
              root: Path) -> int:
    """Fork the run `request` asks for: pytest.main(args) (a recording) or Python's `-c`
    code (an xdist worker), with `fds` at the numbers `request["pipes"]` names."""
    ending = ending_with_this_process()
    pid = os.fork()
    if pid:
        return pid
    code, interrupted = 1, False
    try:
        if ending is not None:
            ending()
        for one in held:
            one.close() if isinstance(one, socket.socket) else os.close(one)
        _as_new_python(request, fds, root)
        try:
            if "code" in request:
                exec(compile(request["code"], "<string>", "exec"),  # noqa: S102 - python -c
                     sys.modules["__main__"].__dict__)
                code = 0
            else:
                import pytest

                code = int(pytest.main(request["args"]))
        except SystemExit as exc:
            code = exit_code(exc)
        except BaseException as exc:  # noqa: B036 - uncaught: said as Python says it
            interrupted = isinstance(exc, KeyboardInterrupt)
            frames = exc.__traceback__  # from what exec or pytest.main ran on
            exc.__traceback__ = frames.tb_next if frames else None
            sys.excepthook(type(exc), exc, exc.__traceback__)
        _end_as_python()
    except BaseException:  # noqa: B036 - the child must end here, whatever happened
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        if interrupted:  # Python ends by the signal itself, once its exit functions ran
            _flush_output()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        exit_now(code)


def _fresh_exit_functions() -> None:
    """The server's exit functions as a new Python that loaded what it has loaded would hold
    them, for its forks to run as they end: its parent's (invoke's, the check run's) go, and
    those the standard library registers as it loads come back for what is loaded (logging
    flushes its handlers, multiprocessing ends its children, weakref.finalize registers
    again); what the server loads next (torch, the plugin) registers its own."""
    atexit._clear()
    logging_module = sys.modules.get("logging")
    if logging_module is not None:
        atexit.register(logging_module.shutdown)
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        atexit.register(util._exit_function)
    weakref = sys.modules.get("weakref")
    if weakref is not None:
        weakref.finalize._registered_with_atexit = False


def _end_as_python() -> None:
    """What Python does as it ends, that a fork would skip: wait for the threads that are not
    daemons, then run the exit functions registered in this process (its parent's were
    cleared as it started)."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except KeyboardInterrupt as exc:  # as Python: said, and the end goes on
            sys.unraisablehook(types.SimpleNamespace(
                exc_type=type(exc), exc_value=exc, exc_traceback=exc.__traceback__,
                err_msg="Exception ignored on threading shutdown", object=None))
    atexit._run_exitfuncs()


def exit_code(exc: SystemExit) -> int:
    """The exit status Python gives a SystemExit; a message is printed, as Python does."""
    if isinstance(exc.code, str):
        print(exc.code, file=sys.stderr)
    return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1


def exit_now(code: int) -> NoReturn:
    """End this forked process now, its output flushed, skipping what a fork must not run
    (the exit functions and finalizers it took from its parent)."""
    _flush_output()
    os._exit(code)


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed stream: nothing left to say
            stream.flush()


def pytest_argv(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """`sys.argv` and `sys.orig_argv` as `python -m pytest ARGS` has them (code that asks
    `sys.argv` whether it runs under pytest sees what it would see there, not invoke's)."""
    spec = importlib.util.find_spec("pytest.__main__")
    origin = spec.origin if spec and spec.origin else "-m"
    return [origin, *args], [sys.executable, "-m", "pytest", *args]


def _as_new_python(request: dict[str, Any], fds: list[int], root: Path) -> None:
    """This fork set up as `python -m pytest` would start in `request['cwd']`: signals as
    Python sets them, its output and pipes at their numbers, its folder, environment and
    `sys.path`, invoke's and tasks.py's modules and the exit functions gone, and pytest as
    `__main__`."""
    for number, started in ((signal.SIGINT, signal.default_int_handler),
                            (signal.SIGTERM, signal.SIG_DFL)):
        signal.signal(number, signal.SIG_IGN if number in _IGNORED else started)
    targets: Sequence[int] = request["pipes"]
    above = max([2, *targets]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds]  # out of every target's way
    for fd in fds:
        os.close(fd)
    if "code" not in request:  # a recording: its output on both streams, then its pipes
        moved = [moved[0], *moved]
        targets = [1, 2, *targets]
    for fd, target in zip(moved, targets):
        os.dup2(fd, target)  # the number the job names
    for fd in set(moved):
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = request["path"]
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    for name in [*_user_modules(root, allowed=("__main__",)),
                 *(n for n in sys.modules if n == "invoke" or n.startswith("invoke."))]:
        del sys.modules[name]  # the program that started the check run: invoke, tasks.py
    main = types.ModuleType("__main__")
    if "code" in request:  # python -u -c CODE: unbuffered streams, an empty __main__
        _new_streams(unbuffered="-u" in request["flags"]
                     or bool(request["env"].get("PYTHONUNBUFFERED")))
        sys.dont_write_bytecode = sys.dont_write_bytecode or "-B" in request["flags"]
        sys.argv = ["-c"]
        sys.orig_argv = [sys.executable, *request["flags"], "-c", request["code"]]
        main.__loader__ = importlib.machinery.BuiltinImporter
        main.__annotations__ = {}
    else:
        spec = importlib.util.find_spec("pytest.__main__")
        main.__spec__, main.__file__ = spec, spec.origin if spec else None
        sys.argv, sys.orig_argv = pytest_argv(request["args"])
    sys.modules["__main__"] = main
    importlib.invalidate_caches()


def _new_streams(unbuffered: bool) -> None:
    """sys.stdin, stdout and stderr (and their sys.__std*__) made anew on descriptors 0, 1 and
    2, as Python makes them at its start: nothing read ahead of what the new process is
    handed; with `unbuffered` (-u) its output written through, else stderr line-buffered."""
    streams = []
    for number, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        made = getattr(sys, f"__{name}__")  # as Python made it for this locale and variables
        raw = io.FileIO(number, "r" if number == 0 else "w", closefd=False)
        raw.name = f"<{name}>"  # as Python names them
        buffered: io.BufferedIOBase | io.FileIO
        if number == 0:
            buffered = io.BufferedReader(raw)
        else:
            buffered = raw if unbuffered else io.BufferedWriter(raw)
        streams.append((name, io.TextIOWrapper(
            buffered, encoding=getattr(made, "encoding", None) or "utf-8",
            errors=getattr(made, "errors", None) or "strict", newline="\n",
            write_through=unbuffered,
            line_buffering=not unbuffered and (number == 2 or os.isatty(number)))))
    for name, stream in streams:
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


_PATHS: dict[str, list[str]] = {}


def _new_python_path(cwd: str, env: dict[str, str], how: str) -> list[str]:
    """`sys.path` as `python -m pytest` (how: "-m") or `python -c CODE` ("-c") would start
    with in `cwd` under `env`: asked of a new Python (without torch: a few milliseconds),
    once per folder and set of PYTHON* variables (the only ones that change it)."""
    key = json.dumps([cwd, sorted((k, v) for k, v in env.items() if k.startswith("PYTHON"))])
    if key not in _PATHS:
        shown = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps("
                                "sys.path))"], cwd=cwd, env=env, capture_output=True,
                               text=True, check=True, timeout=60)
        _PATHS[key] = json.loads(shown.stdout)
    if how == "-c":
        return list(_PATHS[key])
    return [cwd if p == "" else p for p in _PATHS[key]]  # -m puts the folder where -c has ""


def _started_by(root: Path) -> set[str]:
    """What started this process (`__main__`: invoke's script, which may sit in a venv in
    the project) and invoke's tasks module of the project: replaced and dropped in each fork."""
    module = sys.modules.get("tasks")
    origin = getattr(module, "__file__", None) if module is not None else None
    if isinstance(origin, str) and Path(origin).resolve().is_relative_to(root.resolve()):
        return {"__main__", "tasks"}
    return {"__main__"}


def _user_modules(root: Path, allowed: set[str] | Sequence[str]) -> list[str]:
    """Modules loaded from the user's repository (not from an installed package, nor this
    package), but `allowed`."""
    return [name for name in stray_modules(root, []) if name not in allowed]

