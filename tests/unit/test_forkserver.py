"""Forking a process that has run torch: the fork server's and the check run's forks."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from regression.run.forkserver import prepare_fork


def _fork_and_run_parallel(prepare: bool, alarm: int) -> int:
    """Exit status of a fork that runs parallel operations after this process ran some."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        big = torch.randn(2000, 2000)
        (big + 1).sum()  # OpenMP starts its thread pool here
        if prepare:
            prepare_fork()
        pid = os.fork()
        if pid == 0:
            signal.alarm(alarm)  # a wait for threads the fork did not take along ends here
            (big * 2).exp().sum()
            big @ big
            os._exit(0)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        torch.set_num_threads(threads)


def test_a_fork_after_a_parallel_operation_runs_parallel_operations() -> None:
    assert _fork_and_run_parallel(prepare=True, alarm=120) == 0
    (torch.randn(2000, 2000) + 1).sum()  # and this process still runs them


def test_without_letting_openmp_go_the_fork_would_hang() -> None:
    """What prepare_fork prevents: the fork waits forever (here, until its alarm)."""
    assert _fork_and_run_parallel(prepare=False, alarm=3) == -signal.SIGALRM


def test_a_process_that_started_cuda_forks_no_check_run_and_no_server(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fork could not use the GPU: the check run and the recordings start a new Python."""
    from regression.config.settings import Settings
    from regression.repository.gitcmd import Repository
    from regression.run import forkserver
    from regression.run.job import CheckJob
    from regression.run.launch import forks
    from regression.run.types import Reference

    settings = Settings(path=tmp_path / "config.yaml", reference="v1", subject_packages=("m",))
    job = CheckJob(Reference(settings, Repository(str(tmp_path), str(tmp_path / ".git")), "v1",
                             "a" * 40, "c" * 40), str(tmp_path / "result.json"))
    assert forks(job) and not forkserver.cuda_started()  # no GPU here: CUDA never starts
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as after a GPU's use
    assert forkserver.cuda_started() and not forks(job)


SIGNALS_TEST = """
import json, os, signal


def test_signals():
    names = {signal.SIG_IGN: "ignored", signal.SIG_DFL: "default",
             signal.default_int_handler: "python's"}
    seen = {n: names.get(signal.getsignal(getattr(signal, n)), "other")
            for n in ("SIGINT", "SIGTERM")}
    with open(os.environ["SEEN"], "w") as handle:
        json.dump(seen, handle)
"""

SERVE_AND_START = """
import json, os, subprocess, sys
from pathlib import Path
from regression.run import forkserver

root = Path(sys.argv[1])
seen = {}
for how in ("fork", "new"):
    env = {**os.environ, "SEEN": str(root / how), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    args = ["-q", "-p", "no:cacheprovider", "test_signals.py"]
    if how == "fork":
        server = forkserver.server(root, ())
        assert server is not None, "not at rest"
        with open(root / "fork.out", "wb") as out:
            code = server.start(args, root, env, out.fileno()).wait(timeout=120)
    else:
        code = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=root, env=env,
                              capture_output=True, check=False).returncode
    assert code == 0, (how, code)
    seen[how] = json.loads((root / how).read_text())
print(json.dumps(seen))
"""


@pytest.mark.parametrize("ignored", [(), (signal.SIGINT, signal.SIGTERM)],
                         ids=["handled", "ignored"])
def test_a_recording_keeps_the_signals_its_starter_ignored_as_a_new_python_does(
        tmp_path: Path, ignored: tuple[int, ...]) -> None:
    """A signal ignored where the check run started stays ignored in a new Python (exec
    keeps it so, and Python leaves an ignored SIGINT alone): a forked recording too."""
    import json
    import subprocess
    import sys

    (tmp_path / "test_signals.py").write_text(SIGNALS_TEST, encoding="utf-8")

    def ignore() -> None:  # and the others handled, whatever this process was started with
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN if number in ignored else signal.SIG_DFL)

    done = subprocess.run([sys.executable, "-c", SERVE_AND_START, str(tmp_path)],
                          preexec_fn=ignore, capture_output=True, text=True, check=False,
                          timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["fork"] == seen["new"]
    expected = "ignored" if ignored else None
    assert seen["new"]["SIGINT"] == (expected or "python's")
    assert seen["new"]["SIGTERM"] == (expected or "default")


WORKERS = """
import json, os, signal, subprocess, sys, time
from pathlib import Path
from regression.run import forkserver

root = Path(sys.argv[1])
import logging, weakref  # their exit functions are registered here, before the server
class Held:
    pass
held = Held()
weakref.finalize(held, int)
import atexit  # the parent's own exit function: never a fork's
atexit.register(lambda me=os.getpid(): os.getpid() == me or open(root / "theirs", "w").close())
server = forkserver.server(root, ())
assert server is not None, "not at rest"
served = {**os.environ, forkserver.ADDRESS_ENV: server.address}
unserved = {k: v for k, v in served.items() if k != forkserver.ADDRESS_ENV}
launcher = [sys.executable, "-I", "-S", str(forkserver.LAUNCHER), "-u", "-c"]


def run(code, env=served, **kwargs):
    return subprocess.run([*launcher, code], env=env, capture_output=True, text=True,
                          cwd=root, timeout=60, **kwargs)


seen = {"server": server.pid}
for garbage in (b"not json", b"[]"):  # a request no launcher sends: refused, server kept
    import socket
    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client.connect("\\0" + server.address)
    socket.send_fds(client, [garbage], [0, 1, 2])
    seen.setdefault("refused", []).append(client.recv(256))
    client.close()
done = run("import os, sys; print(os.getpid(), os.getppid(), sys.argv, os.getcwd());"
           "sys.exit(3)")
seen["exit"] = [done.returncode, *done.stdout.split(maxsplit=2)]
seen["signal"] = run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode
with open(root / "refused.out", "wb") as out:  # a recording the server cannot start
    refused = server.start(["-q"], root / "missing", dict(os.environ), out.fileno())
    seen["refused recording"] = [refused.wait(timeout=60), refused.pid]
seen["refused recording"].append((root / "refused.out").read_text())
ending = ("import atexit, threading, time\\n"
          "def late(): time.sleep(0.3); open('thread', 'w').close()\\n"
          "threading.Thread(target=late).start()\\n"
          "atexit.register(lambda: open('atexit', 'w').write(str(os.path.exists('thread'))))\\n"
          "import os\\n")
seen["ended"] = [run(ending).returncode, (root / "atexit").read_text()]
done = run("raise ValueError('uncaught')")
seen["uncaught"] = [done.returncode, done.stderr]
seen["interrupted"] = run("raise KeyboardInterrupt").returncode
ended = ("import logging, logging.handlers, weakref\\n"
         "memory = logging.handlers.MemoryHandler(100, target=logging.FileHandler('logged'))\\n"
         "logging.getLogger('w').addHandler(memory); logging.getLogger('w').warning('kept')\\n"
         "class A: pass\\n"
         "a = A(); weakref.finalize(a, open, 'finalized', 'w')\\n")
seen["stdlib exit"] = [run(ended).returncode, (root / "logged").read_text(),
                       (root / "finalized").exists()]
facts = ("import sys; print(repr(sys.stdin.readline()), sys.stdin.errors, sys.stdout.errors,"
         " sys.stderr.errors, sys.stdout.encoding, sys.stdin.name, sys.__stdout__ is sys.stdout,"
         " sys.stderr.line_buffering, sys.argv, sys.path[0] == '')")
seen["streams"] = [run(facts, input="ab\\r\\n").stdout, subprocess.run(
    [sys.executable, "-u", "-c", facts], env=unserved, cwd=root, input="ab\\r\\n",
    capture_output=True, text=True, timeout=60).stdout]
seen["interrupted output"] = subprocess.run(
    [*launcher[:4], "-c", "print('partial', end=''); raise KeyboardInterrupt"], env=served,
    cwd=root, capture_output=True, text=True, timeout=60).stdout
seen["stdin"] = run("import sys; print(sys.stdin.readline().strip()[::-1])",
                    input="abc\\n").stdout.strip()
alone = subprocess.Popen([*launcher, "import os; print(os.getpid())"], env=unserved,
                         stdout=subprocess.PIPE, text=True, cwd=root)
seen["unserved"] = [alone.pid, int(alone.communicate(timeout=60)[0])]
seeded = subprocess.Popen([*launcher, "import os, sys; print(os.getpid(), hash('x'))"],
                          env={**served, "PYTHONHASHSEED": "7"}, stdout=subprocess.PIPE,
                          text=True, cwd=root)
pid, hashed = seeded.communicate(timeout=60)[0].split()
seen["seeded"] = [seeded.pid, int(pid), int(hashed)]
seen["seed 7"] = int(subprocess.run([sys.executable, "-c", "print(hash('x'))"], text=True,
                                    env={**unserved, "PYTHONHASHSEED": "7"},
                                    capture_output=True).stdout)
for number in (signal.SIGKILL, signal.SIGTERM):  # a killed launcher; one asked to end
    (root / "pid").unlink(missing_ok=True)
    started = subprocess.Popen([*launcher, "import os, signal, time\\n"
                                "def ended(*_): open('ended', 'w').close(); os._exit(5)\\n"
                                "signal.signal(signal.SIGTERM, ended)\\n"
                                "open('pid', 'w').write(str(os.getpid())); time.sleep(60)"],
                               env=served, cwd=root)
    while not (root / "pid").exists() or not (root / "pid").read_text():
        time.sleep(0.05)
    worker = int((root / "pid").read_text())
    started.send_signal(number)
    started.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen[f"signal {number}"] = [worker, started.pid, Path(f"/proc/{worker}").exists(),
                                started.returncode, (root / "ended").exists()]
print(json.dumps(seen, default=bytes.decode))
"""


def test_an_xdist_worker_launched_through_the_server_is_its_fork_and_ends_as_it_does(
        tmp_path: Path) -> None:
    """The launcher xdist starts a worker with: a fork of the server, in the launcher's
    folder with its standard input, which ends as Python ends (its threads joined, its exit
    functions run, an uncaught error said, an interrupt ending it by SIGINT); the launcher
    ends as the worker did (an exit status, a signal); a killed launcher's worker is killed;
    with no server, the launcher is Python."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WORKERS, str(tmp_path)], capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    exit_status, pid, parent, rest = seen["exit"]
    assert exit_status == 3 and int(parent) == seen["server"] and int(pid) != seen["server"]
    assert rest.strip() == f"['-c'] {tmp_path}"
    assert seen["refused"] == ["", ""]  # told by the end of the connection; served after
    status, pid, said = seen["refused recording"]  # its cause said; the server serves on
    assert status == 1 and pid is None and said.startswith(
        "torch-regression: the fork server could not start this recording: FileNotFoundError")
    assert seen["signal"] == -signal.SIGTERM
    assert seen["stdin"] == "cba"
    assert seen["stdlib exit"] == [0, "kept\n", True]  # logging and weakref's exit functions
    assert not (tmp_path / "theirs").exists()  # and none of the process the server left
    forked, new = seen["streams"]
    assert forked == new and forked.startswith("'ab\\r\\n'")
    assert seen["interrupted output"] == "partial"  # flushed before it ends by SIGINT
    assert seen["ended"] == [0, "True"]  # as Python ends: threads joined, then exit functions
    status, said = seen["uncaught"]
    assert status == 1 and said.startswith("Traceback") and 'File "<string>", line 1' in said
    assert "forkserver" not in said and said.endswith("ValueError: uncaught\n")
    assert seen["interrupted"] == -signal.SIGINT  # Python ends by the signal itself
    worker, launcher, alive, status, ended = seen[f"signal {signal.SIGKILL}"]
    assert worker != launcher and not alive and status == -signal.SIGKILL and not ended
    worker, launcher, alive, status, ended = seen[f"signal {signal.SIGTERM}"]  # passed on
    assert worker != launcher and not alive and status == 5 and ended
    launched, ran, hashed = seen["seeded"]  # Python's start set otherwise: Python itself
    assert launched == ran and hashed == seen["seed 7"]
    launched, ran = seen["unserved"]
    assert launched == ran  # no server: the launcher became Python (exec), which ran the code


@pytest.mark.parametrize("variable, served", [
    ("PYTHONPATH", True), ("PYTHONDONTWRITEBYTECODE", True), ("PYTHONUNBUFFERED", True),
    ("PYTHONHASHSEED", False), ("PYTHONOPTIMIZE", False), ("PYTHONWARNINGS", False),
    ("PYTHONUTF8", False), ("REGRESSION_OTHER", True)])
def test_a_run_that_sets_python_s_start_otherwise_is_not_served(variable: str,
                                                                 served: bool) -> None:
    """Forks take the server's hash seed, optimisation level, warnings and modes; the
    variables a fork is set up by (sys.path, bytecode, buffering) do not matter."""
    from regression.run.forkserver import ForkServer, start_variables

    base = {"HOME": "/root", "PYTHONHASHSEED": "0"}
    server = ForkServer(None, 0, "", start_variables(base))  # type: ignore[arg-type]
    assert server.serves(base)
    changed = {**base, variable: "1"} if variable != "PYTHONHASHSEED" else {**base, variable: "5"}
    assert server.serves(changed) is served


def test_the_server_knows_the_environment_python_started_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable set in os.environ after Python started (a tasks.py's) did not set its start:
    a run that asks for it is not the server's to fork."""
    from regression.run.forkserver import started_environment

    monkeypatch.setenv("PYTHONHASHSEED", "12345")
    assert started_environment().get("PYTHONHASHSEED") != "12345"
    assert started_environment().get("PATH") == os.environ["PATH"]


def test_the_launcher_looks_for_the_server_where_the_server_says_it_is() -> None:
    """worker_launcher.py imports nothing of ours (it runs with -I -S): its copy of the
    variable's name must be the server's."""
    import importlib.util

    from regression.run import forkserver

    spec = importlib.util.spec_from_file_location("launcher", forkserver.LAUNCHER)
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    assert launcher.ADDRESS_ENV == forkserver.ADDRESS_ENV
