"""`python -m invoke ARGS` (or `python -m pytest ARGS`), each run in a fork of one Python that
has already imported torch.

A warm `invoke test` is one process that imports torch (2-3 s of CPU here) and then does a
fraction of a second of work; the suite runs about a hundred of them. Each run here is a
fresh fork of a server process that imported torch, pytest, invoke and our package once and
has run nothing: a new process for every run (its own folder, environment, modules and torch
state, exit code and output), as `python -m invoke` would be, without the imports. Recording
still starts its own Python, as in real use.

Not for runs whose environment changes what torch reads when it loads (OMP_*, MKL_* and the
like): `Repo.invoke` starts a real process for those.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

# Read by torch or its libraries when they load, so a fork would not see a change of them.
READ_AT_LOAD = ("OMP_", "KMP_", "MKL_", "GOMP_", "ONEDNN_", "DNNL_", "ATEN_", "TORCH_",
                "PYTORCH_", "OPENBLAS_", "LD_", "PYTHON")  # PYTHONPATH and the like: at start
TIMEOUT = 600  # seconds a run may take, as the suite's subprocesses are given

SERVER = r'''
import json, os, sys, traceback
import invoke, pytest, torch
import regression.run.entry, regression.plugin, regression.cli.tasks
from invoke.main import program  # what `python -m invoke` runs

for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the run: as `python -m invoke ARGS` started in request["cwd"]
        code = 1
        try:
            for fd, name, flags in ((0, os.devnull, os.O_RDONLY),
                                    (1, request["out"], os.O_WRONLY),
                                    (2, request["err"], os.O_WRONLY)):
                os.dup2(os.open(name, flags), fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.path[0] = request["cwd"]
            sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
            sys.argv = [request.get("program", "invoke"), *request["args"]]
            try:
                if sys.argv[0] == "pytest":  # as `python -m pytest ARGS`
                    raise SystemExit(pytest.console_main())
                program.run(sys.argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
'''


class WarmPython:
    """One server per test process, started at first use; each run is a fork of it."""

    def __init__(self) -> None:
        self.server: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen([sys.executable, "-c", SERVER],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           text=True, cwd=Path(__file__).parent,
                                           start_new_session=True)  # its forks: one group
        return self.server

    def invoke(self, cwd: Path, args: Sequence[str],
               env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        """`python -m invoke ARGS` in `cwd` with exactly `env`, as a finished process."""
        return self.run("invoke", cwd, args, env)

    def pytest(self, cwd: Path, args: Sequence[str],
               env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        """`python -m pytest ARGS` in `cwd` with exactly `env`, as a finished process."""
        return self.run("pytest", cwd, args, env)

    def run(self, program: str, cwd: Path, args: Sequence[str],
            env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        """`python -m PROGRAM ARGS` (invoke or pytest) in `cwd` with exactly `env`."""
        server = self._started()
        assert server.stdin is not None and server.stdout is not None
        with tempfile.TemporaryDirectory(prefix="warm-python-") as folder:
            out, err = Path(folder) / "out", Path(folder) / "err"
            out.touch()
            err.touch()
            server.stdin.write(json.dumps({"program": program, "cwd": str(cwd),
                                           "args": list(args), "env": dict(env),
                                           "out": str(out), "err": str(err)}) + "\n")
            server.stdin.flush()
            if not select.select([server.stdout], [], [], TIMEOUT)[0]:
                self.stop()  # the run and its server: the next run starts a fresh one
                raise TimeoutError(f"{program} {' '.join(args)} ran over {TIMEOUT} s in {cwd}")
            reply = server.stdout.readline()
            if not reply:
                self.server = None
                raise RuntimeError(f"the warm Python ended (exit {server.wait()})")
            code = int(json.loads(reply)["code"])
            return subprocess.CompletedProcess([program, *args], code,
                                               out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def stop(self) -> None:
        """End the server and any run it has forked."""
        if self.server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
            self.server = None


WARM = WarmPython()


def reads_at_load(env: Mapping[str, str]) -> bool:
    """Whether `env` sets a variable that torch or its libraries read only when they load."""
    return any(name.startswith(READ_AT_LOAD) for name in env)


COMMAND = """\
#!{python} -S
# `invoke ARGS` run by the warm Python of the test that wrote this file (warm_python.py).
import json, os, socket, sys
with socket.socket(socket.AF_UNIX) as relay:
    relay.connect({address!r})
    request = {{"cwd": os.getcwd(), "args": sys.argv[1:], "env": dict(os.environ)}}
    relay.sendall(json.dumps(request).encode() + b"\\n")
    reply = json.loads(relay.makefile(encoding="utf-8").read())
sys.stdout.write(reply["stdout"])
sys.stderr.write(reply["stderr"])
sys.exit(reply["code"])
"""


def _run(request: Mapping[str, object]) -> subprocess.CompletedProcess[str]:
    """One run asked for by an `invoke` command: warm, unless its environment changes what
    torch reads as it loads (then a real process, as `Repo.invoke` does)."""
    cwd, args, env = Path(str(request["cwd"])), list(request["args"]), dict(request["env"])
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
    changed.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm run follows it too
    if reads_at_load(changed):
        return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=env,
                              text=True, capture_output=True, check=False, timeout=TIMEOUT)
    return WARM.invoke(cwd, args, env)


def _serve(listener: socket.socket, stop: threading.Event) -> None:
    """Answer each `invoke` command's request with its finished run, until `stop`."""
    while not stop.is_set():
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        with connection:
            connection.settimeout(None)
            try:
                done = _run(json.loads(connection.makefile(encoding="utf-8").readline()))
            except Exception as error:  # told to the command, which fails with it
                done = subprocess.CompletedProcess([], 1, "", f"warm Python: {error!r}\n")
            connection.sendall(json.dumps({"code": done.returncode, "stdout": done.stdout,
                                           "stderr": done.stderr}).encode())


@contextlib.contextmanager
def invoke_command(path: Path) -> Iterator[Path]:
    """An executable `invoke` at `path` for scripts that call it themselves (the workflow's
    steps): each run is a fork of the warm Python, as `Repo.invoke`'s are."""
    with tempfile.TemporaryDirectory(prefix="warm-") as folder:  # a short path: sockets' limit
        address = str(Path(folder) / "invoke.sock")
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(address)
            listener.listen()
            listener.settimeout(0.2)
            stop = threading.Event()
            server = threading.Thread(target=_serve, args=(listener, stop), daemon=True)
            server.start()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(COMMAND.format(python=sys.executable, address=address))
            path.chmod(0o755)
            try:
                yield path
            finally:
                stop.set()
                server.join()
