"""A cancelled job: TERM or KILL to a real `python -m invoke test` while its cases run (the
check run, and beside it the recording in a worktree). No process of the run remains, no
worktree or scratch folder is left, and the cache entry's lock is free for the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock, Timeout
from helpers import Repo, output

SLOW_TESTS = """\
import os
import time

import pytest

import subj


@pytest.mark.parametrize("n", range(30))
def test_slow(n, regression):
    marks = os.environ.get("MARK_DIR")
    if marks:  # the test says when it runs, in which process; then takes its time
        open(os.path.join(marks, str(os.getpid())), "a").close()
        time.sleep(1)
    regression.check(subj.forward(regression.randn(2, 4)) * n, name="out")
"""

WAIT = 120.0
"""Seconds a run is given to start its cases: a bound that fails the test, not a measure."""
GONE = 30.0
"""Seconds the run's processes are given to end after the signal: they take about one; without
the parent-death signal they would run on for minutes (generous, so a busy machine passes)."""


def run_processes(token: str) -> list[int]:
    """The live processes whose environment holds `token`: the run's, all of them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if token.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # ended meanwhile, or a zombie's (empty) environment
            continue
    return found


def poll(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether `condition()` held within `seconds`, asked every tenth of a second."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.fixture
def slow_repo(subject_repo: Repo) -> Repo:
    subject_repo.write("tests/test_subj.py", SLOW_TESTS)
    subject_repo.commit("slow cases")
    return subject_repo


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_a_cancelled_run_leaves_no_process_worktree_or_lock(slow_repo: Repo, tmp_path: Path,
                                                            sig: signal.Signals) -> None:
    marks, scratch = tmp_path / "marks", tmp_path / "tmp"
    marks.mkdir()
    scratch.mkdir()
    token = f"cancelled-run-{uuid.uuid4().hex}"
    env = {**slow_repo.env(), "MARK_DIR": str(marks), "TMPDIR": str(scratch),
           "CANCEL_TOKEN": token}
    log = tmp_path / "output.txt"  # a file, not a pipe, which its children would hold open
    with open(log, "w", encoding="utf-8") as stream:
        invoke = subprocess.Popen([sys.executable, "-m", "invoke", "test"], cwd=slow_repo.path,
                                  env=env, stdout=stream, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        # both runs are in their cases: the check run and the recording beside it
        started = poll(lambda: len(list(marks.iterdir())) >= 2 or invoke.poll() is not None,
                       WAIT)
        assert started and invoke.poll() is None, log.read_text()
        invoke.send_signal(sig)
        invoke.wait(timeout=60)
        said = log.read_text()
        assert poll(lambda: not run_processes(token), GONE), \
            f"still running after {sig.name} to invoke: {run_processes(token)}\n{said}"
    finally:
        for pid in run_processes(token):
            os.kill(pid, signal.SIGKILL)
    if sig == signal.SIGTERM:
        assert invoke.returncode == 128 + signal.SIGTERM, said
    else:
        assert invoke.returncode == -signal.SIGKILL

    worktrees = slow_repo.git("worktree", "list", "--porcelain").splitlines()
    assert [line for line in worktrees if line.startswith("worktree ")] == \
        [f"worktree {slow_repo.path}"], worktrees
    assert not [p for p in (scratch / "torch-regression-worktrees").rglob("*")
                if p.is_dir() and "-" in p.name], "a worktree folder is left"
    if sig == signal.SIGTERM:  # the invoke process let go of its own folders too
        assert not left_in(scratch), said
    locks = list(slow_repo.cache.glob("*.lock"))
    assert locks, "the run took no entry lock: it did not reach its recording"
    for lock in locks:
        taken = FileLock(str(lock))
        try:
            taken.acquire(timeout=0)
            taken.release()
        except Timeout:
            pytest.fail(f"{lock} is still held after the run was cancelled")

    done = slow_repo.invoke("test", env={"TMPDIR": str(scratch)}, process=True)
    assert done.returncode == 0, output(done)  # no MARK_DIR: the cases run at once
    assert not left_in(scratch), "the next run reclaims what a killed invoke process held"


def left_in(scratch: Path) -> list[Path]:
    """The run's scratch folders (a job, a result) left in the temporary folder `scratch`."""
    return [p for p in scratch.iterdir() if p.name.startswith("torch-regression-")
            and p.name != "torch-regression-worktrees"]
