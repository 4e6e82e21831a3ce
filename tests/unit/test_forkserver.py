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
seen["stdin"] = run("import sys; print(sys.stdin.readline().strip()[::-1])",
                    input="abc\\n").stdout.strip()
alone = subprocess.Popen([*launcher, "import os; print(os.getpid())"], env=unserved,
                         stdout=subprocess.PIPE, text=True, cwd=root)
seen["unserved"] = [alone.pid, int(alone.communicate(timeout=60)[0])]
started = subprocess.Popen([*launcher, f"open({str(root / 'pid')!r}, 'w').write("
                            "str(__import__('os').getpid())); __import__('time').sleep(60)"],
                           env=served, cwd=root)
while not (root / "pid").exists() or not (root / "pid").read_text():
    time.sleep(0.05)
worker = int((root / "pid").read_text())
started.kill()
started.wait()
deadline = time.monotonic() + 10
while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
seen["killed"] = [worker, started.pid, Path(f"/proc/{worker}").exists()]
print(json.dumps(seen, default=bytes.decode))
"""


def test_an_xdist_worker_launched_through_the_server_is_its_fork_and_ends_as_it_does(
        tmp_path: Path) -> None:
    """The launcher xdist starts a worker with: a fork of the server, in the launcher's
    folder with its standard input; the launcher ends as the worker did (an exit status, a
    signal); a killed launcher's worker is killed; with no server, the launcher is Python."""
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
    assert seen["signal"] == -signal.SIGTERM
    assert seen["stdin"] == "cba"
    worker, launcher, alive = seen["killed"]
    assert worker != launcher and not alive
    launched, ran = seen["unserved"]
    assert launched == ran  # no server: the launcher became Python (exec), which ran the code
