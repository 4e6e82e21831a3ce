"""Tests of regression.store.scratch: which process ids count as a run still going."""

from __future__ import annotations

import os
import sys
import time

import pytest

from regression.store.scratch import pid_alive


def test_this_process_runs() -> None:
    assert pid_alive(os.getpid())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_an_ended_child_that_nobody_reaped_yet_is_not_running() -> None:
    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while pid_alive(child):  # a zombie once it has ended, until waited for
            assert time.monotonic() < deadline, "the child never ended"
            time.sleep(0.01)
        os.kill(child, 0)  # the process table still holds it: only /proc says it ended
    finally:
        os.waitpid(child, 0)
    assert not pid_alive(child)
