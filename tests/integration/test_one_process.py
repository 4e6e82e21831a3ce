"""A warm `invoke test` is one torch process that reads config.yaml once, also in a
repository whose pytest settings are this project's own (its suite's xdist options)."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from helpers import PROJECT, TASKS, Repo, output, with_addopts

# Every Python process started with this folder on PYTHONPATH notes, in the file $COUNT_LOG
# names, that it started, that it imported torch, each time it opened config.yaml and each git
# it started to resolve a revision or to ask git's version (GitPython's import would). A fork
# notes no start of its own, but the rest, under its own pid.
SITECUSTOMIZE = """\
import os
import sys

LOG = os.environ.get("COUNT_LOG")
CONFIG = os.environ.get("COUNT_CONFIG", "")


def note(what):
    handle = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(handle, f"{what} {os.getpid()}\\n".encode())
    os.close(handle)


def audit(event, args):
    if event == "import" and args[0] == "torch":
        note("torch")
    elif event == "open" and isinstance(args[0], str) and args[0].endswith("config.yaml") \\
            and os.path.realpath(args[0]) == CONFIG:
        note("config")
    elif event == "subprocess.Popen" and os.path.basename(str(args[0])) == "git":
        argv = [str(a) for a in args[1]]
        if "version" in argv:
            note("git-version")
        elif any(a.endswith("^{commit}") for a in argv):
            note("git-resolve")


if LOG:
    note("start")
    sys.addaudithook(audit)
"""


def _pytest_settings() -> str:
    """This project's own [tool.pytest.ini_options] section, as its pyproject.toml has it."""
    text = (PROJECT / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[tool\.pytest\.ini_options\]\n(?:(?!\[).*\n)*", text, re.M)
    assert section is not None and "addopts" in section.group(0)
    return section.group(0)


def _counting(repo: Repo, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a run whose Python processes note what they do, and the log."""
    counting = tmp_path / "counting"
    counting.mkdir()
    (counting / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    log = tmp_path / "log"
    return {"PYTHONPATH": str(counting), "COUNT_LOG": str(log),
            "COUNT_CONFIG": str((repo.path / "config.yaml").resolve())}, log


def test_a_warm_test_run_is_one_torch_process_that_reads_config_and_resolves_once(
        recorded_subject_repo: Repo, tmp_path: Path) -> None:
    repo = recorded_subject_repo
    repo.write("pyproject.toml", _pytest_settings())
    # pytest's settings may decide what a test file collects: the first run records again
    assert repo.invoke("test").returncode == 0
    env, log = _counting(repo, tmp_path)
    done = repo.invoke("test", env=env, process=True)
    assert done.returncode == 0, output(done)
    assert "1 identical" in output(done), output(done)  # warm: nothing recorded
    notes = Counter(line.split()[0] for line in log.read_text().splitlines())
    torch_processes = {line.split()[1] for line in log.read_text().splitlines()
                       if line.startswith("torch ")}
    assert notes["start"] == 1, log.read_text()  # invoke; the check run is its fork
    assert len(torch_processes) == 1, log.read_text()
    assert notes["config"] == 1, log.read_text()
    assert notes["git-resolve"] == 1 and notes["git-version"] == 0, log.read_text()


def test_key_collects_in_a_fork_of_the_invoke_process(recorded_subject_repo: Repo,
                                                     tmp_path: Path) -> None:
    """`invoke key` collects the cases in a fork of itself, as the check run does: one
    Python start, one torch."""
    repo = recorded_subject_repo
    env, log = _counting(repo, tmp_path)
    done = repo.invoke("key", env=env, process=True)
    assert done.returncode == 0, output(done)
    assert re.fullmatch(r"torch-regression-[0-9a-f-]+\n", done.stdout), output(done)
    notes = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert notes["start"] == 1, log.read_text()  # invoke; the collection is its fork
    assert notes["torch"] >= 1, log.read_text()  # the collection did import torch


FROZEN = """\
import gc
import os

import torch


def test_frozen(regression):
    with open(os.environ["FROZEN"], "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()} case {gc.get_freeze_count()}\\n")
    regression.check(torch.zeros(1), name="x")
"""

FROZEN_CONFTEST = """\
import gc
import os


def pytest_configure(config):
    with open(os.environ["FROZEN"], "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()} configure {gc.get_freeze_count()}\\n")
"""


def test_runs_of_ours_set_what_they_loaded_aside_from_the_collector_but_no_user_s_pytest(
        subject_repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check run and its recording freeze what they loaded before the session (torch's
    objects at least), so their full collections do not walk it; the recording, a fork of
    the fork server, starts with what the server loaded frozen. A user's own pytest run, the
    plugin in it, freezes nothing."""
    repo = subject_repo
    repo.write("tests/test_frozen.py", FROZEN)
    repo.write("tests/conftest.py", FROZEN_CONFTEST)
    repo.commit("frozen")
    repo.git("tag", "-f", "-a", "v1", "-m", "frozen")
    log = tmp_path / "frozen"
    monkeypatch.setenv("FROZEN", str(log))
    done = repo.invoke("test")
    assert done.returncode == 0 and "2 identical" in done.stdout, output(done)
    seen = {(pid, when): int(count) for pid, when, count in
            (line.split() for line in log.read_text().splitlines())}
    processes = {pid for pid, _ in seen}
    assert len(processes) == 2, seen  # the recording and the check run
    assert all(seen[pid, "case"] > 10_000 for pid in processes), seen
    assert sorted(seen[pid, "configure"] > 10_000 for pid in processes) == [False, True], seen
    log.unlink()
    plain = repo.pytest("tests/test_frozen.py")
    assert plain.returncode == 0 and "1 identical" in output(plain), output(plain)
    assert [line.split()[2] for line in log.read_text().splitlines()] == ["0", "0"]


def test_a_session_inside_a_session_of_ours_freezes_nothing_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pytester's session in a run of ours inherits its job: the process froze once, at its
    first session, and a later one leaves what the first one's run made to the collector."""
    from regression.run import entry
    from regression.run.job import JOB_ENV

    monkeypatch.setenv(JOB_ENV, "job.json")
    monkeypatch.setattr(entry, "_FROZE", [])
    assert gc.get_freeze_count() == 0  # this suite's own process is no run of ours
    try:
        entry.pytest_sessionstart(None)  # type: ignore[arg-type]
        first = gc.get_freeze_count()
        made = [[index] for index in range(1000)]  # what the first session's run made
        entry.pytest_sessionstart(None)  # type: ignore[arg-type]
        assert first > 0 and gc.get_freeze_count() == first, len(made)
    finally:
        gc.unfreeze()


@pytest.mark.slow
@pytest.mark.parametrize("args, repeats", [(("test",), 0), (("gen", "--repeat", "3"), 2),
                                           (("test", "--workers", "2"), 0)],
                         ids=["beside", "repeat", "workers"])
def test_recordings_are_forks_of_the_fork_server_which_imports_torch_once(
        subject_repo: Repo, tmp_path: Path, args: tuple[str, ...], repeats: int) -> None:
    """A recording, beside the check run or before it, starts no Python: it is a fork of the
    fork server, which the check run forked before it imported torch, and which imports it
    once, at its first recording (the two import torch at once). With workers, the check
    run's workers are its forks, and so are those of the recording a worker starts (a new
    Python, which as xdist's controller imports no torch). A repeat is a new Python: it
    looks for nondeterminism, and a fork has its parent's string hashes and memory."""
    repo = subject_repo
    env, log = _counting(repo, tmp_path)
    done, orphans = _invoke_reaping(repo, args, env)
    assert done.returncode == 0, output(done)
    assert "recorded 1 case" in output(done), output(done)
    assert len(_new_torch_pythons(log)) == repeats, log.read_text()
    assert orphans == 0, output(done)  # the fork server too was waited for by its owner


LINGER = """\
import os
import time


def test_linger():
    if os.fork() == 0:  # still running as the run ends, holding what the run held
        time.sleep(3)
        os._exit(0)
"""


@pytest.mark.slow
def test_a_process_a_test_forked_does_not_keep_the_fork_server_from_ending(
        subject_repo: Repo, tmp_path: Path) -> None:
    """The check run ends its server by shutting their connection down, not only by closing
    its end of it, of which a process a test forked holds a copy: the server ends and is
    waited for, and only the test's own process is left to the reaper."""
    repo = subject_repo
    repo.write("tests/test_linger.py", LINGER)
    repo.commit("a test that forks")
    done, orphans = _invoke_reaping(repo, ("test",), {})
    assert done.returncode == 0, output(done)
    assert orphans == 1, output(done)


@pytest.mark.slow
def test_bisect_collects_at_good_and_records_in_forks_of_one_server(subject_repo: Repo,
                                                                   tmp_path: Path) -> None:
    """bisect's collect runs (here and with good's subject) and its recordings at each
    commit are forks of bisect's process or of the server it forked, and it loaded torch
    before the first fork: one process imports torch, bisect's own, which reads the outputs
    it compares."""
    repo = subject_repo
    env, log = _counting(repo, tmp_path)
    done, orphans = _invoke_reaping(repo, ("bisect", "--good", "v1"), env)
    assert done.returncode == 0 and orphans == 0, output(done)
    assert "collecting the cases at good" in done.stdout, output(done)
    assert "recording 1 of 1 cases at" in done.stdout, output(done)
    notes = [line.split() for line in log.read_text().splitlines()]
    assert _new_torch_pythons(log) == {pid for what, pid in notes if what == "torch"}, notes
    assert len(_new_torch_pythons(log)) == 1, log.read_text()


# Runs its arguments as a child subreaper (Linux): a process of the run whose parent ended
# without waiting for it is handed to this one, not to init, and counted as it is reaped.
# Its CPU time would count in nobody's (`time invoke test` would under-report it).
REAPER = """\
import ctypes, os, subprocess, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed")
code = subprocess.call(sys.argv[1:])
orphans = 0
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
    orphans += 1
print(f"orphans reaped: {orphans}", file=sys.stderr)
sys.exit(code)
"""


def _invoke_reaping(repo: Repo, args: tuple[str, ...], env: dict[str, str]
                    ) -> tuple[subprocess.CompletedProcess[str], int]:
    """`python -m invoke ARGS` in a new Python, under REAPER (isolated: it notes nothing in
    the counting log); the run, and how many of its processes were left to the reaper."""
    done = subprocess.run([sys.executable, "-I", "-c", REAPER, sys.executable, "-m", "invoke",
                           *args], cwd=repo.path, env=with_addopts({**repo.env(), **env}),
                          text=True, capture_output=True, check=False, timeout=600)
    found = re.findall(r"^orphans reaped: (\d+)$", done.stderr, re.MULTILINE)
    assert found, output(done)
    return done, int(found[-1])


def _new_torch_pythons(log: Path) -> set[str]:
    """The processes that started a Python and imported torch in it: not invoke (its check
    run, a fork, imports torch), not the server's `python -c` that tells it sys.path, and
    not a forked recording; a recording that starts a new Python does."""
    notes = [line.split() for line in log.read_text().splitlines()]
    return {pid for what, pid in notes if what == "start"} & \
        {pid for what, pid in notes if what == "torch"}


FACTS = """\
import json
import os
import signal
import sys

import torch


def _ran_as(argv):  # a fork is given the warning filter for modules already loaded too
    left = [a for a in argv[1:] if a != "-W" and "already imported" not in a]
    return [os.path.basename(argv[0]), *left]


def _kind(fd):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "gone"  # listdir's own
    return target.split(":")[0] if ":" in target else "file"


def test_facts(regression):
    cwd = os.getcwd()
    main = sys.modules["__main__"]
    facts = {
        "path": [p.replace(cwd, "<cwd>") for p in sys.path],
        "modules": sorted(n for n in ("tasks", "invoke", "invoke.main") if n in sys.modules),
        "main": getattr(getattr(main, "__spec__", None), "name", None),
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "environ": {k: v[:2] if k == "PYTEST_XDIST_WORKER" else v  # gw0 or gw1: either
                    for k, v in os.environ.items()
                    if k not in ("REGRESSION_JOB", "FACTS", "COUNT_LOG",
                                 "REGRESSION_FORK_SERVER",  # where a server is, its address
                                 "REGRESSION_START_ENVIRON",  # the check run's, its pid
                                 "PYTEST_XDIST_TESTRUNUID")},  # a new one each run
        "threads": torch.get_num_threads(),
        "seed": torch.initial_seed(),
        "bytecode": sys.dont_write_bytecode,
        "argv": _ran_as(sys.argv),
        "orig_argv": _ran_as(sys.orig_argv),
        "fds": sorted(_kind(fd) for fd in os.listdir("/proc/self/fd")),
    }
    with open(os.environ["FACTS"], "w", encoding="utf-8") as handle:
        json.dump(facts, handle)
    regression.check(torch.zeros(1), name="x")
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["recording", "worker"])
def test_a_forked_recording_starts_as_a_new_python_would(subject_repo: Repo, tmp_path: Path,
                                                          workers: tuple[str, ...]) -> None:
    """What a recording's code can see of how its process started is the same in a fork of
    the fork server as in a new Python (which records where the server is not started: a
    tasks.py that loads a module of the project); so is what a case sees in an xdist worker
    of the recording, which xdist starts as `python -u -c CODE`, forked by the same server."""
    repo = subject_repo
    repo.write("tests/test_facts.py", FACTS)
    repo.commit("facts")
    repo.git("tag", "-f", "-a", "v1", "-m", "facts")
    seen = {}
    env, _ = _counting(repo, tmp_path)
    for how in ("fork", "new"):
        if how == "new":
            repo.write("project_tasks.py", "")
            repo.write("tasks.py", "import project_tasks  # noqa: F401\n" + TASKS)
        log = tmp_path / f"{how}.log"
        env.update(COUNT_LOG=str(log), FACTS=str(tmp_path / f"{how}.json"))
        done = repo.invoke("gen", "--force", *workers, env=env, process=True)
        assert done.returncode == 0, output(done)
        assert len(_new_torch_pythons(log)) == (how == "new") * (2 if workers else 1), \
            (how, log.read_text())
        seen[how] = json.loads((tmp_path / f"{how}.json").read_text(encoding="utf-8"))
    assert seen["fork"]["modules"] == []
    assert seen["fork"]["main"] == (None if workers else "pytest.__main__")
    for name in seen["fork"]:
        assert seen["fork"][name] == seen["new"][name], name
