"""launch.before_exit: what must run as the check run ends, and only there; and how a
recording's process ended, said in words."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from regression.references.recorder import ended
from regression.run import launch


def test_a_callback_runs_at_the_check_run_s_end_once_and_not_once_forgotten(
        tmp_path: Path) -> None:
    ran: list[str] = []
    forget = launch.before_exit(lambda: ran.append("first"))
    launch.before_exit(lambda: ran.append("second"))()  # forgotten at once
    launch._run_at_exit()
    assert ran == ["first"]
    forget()
    launch._run_at_exit()
    assert ran == ["first"]


def test_a_process_a_test_forks_does_not_run_the_check_run_s_callbacks(
        tmp_path: Path) -> None:
    """A test's own fork that ends through Python's exit must not stop the recording."""
    marker = tmp_path / "ran"
    forget = launch.before_exit(lambda: marker.write_text(str(os.getpid())))
    try:
        pid = os.fork()
        if pid == 0:  # the test's child: Python's own end, atexit included
            try:
                launch._run_at_exit()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert not marker.exists()
        launch._run_at_exit()
        assert marker.read_text() == str(os.getpid())
    finally:
        forget()


@pytest.mark.parametrize(("code", "said"), [
    (0, "exit 0"), (3, "exit 3"), (-9, "killed by SIGKILL"), (-200, "killed by signal 200"),
    (-7, "killed by SIGBUS: a file it had mapped into memory"),
])
def test_how_a_recording_ended_is_said_in_words(code: int, said: str) -> None:
    text = ended(code)
    assert text.startswith(said)
    assert ("record_beside_check: false" in text) == (code == -7)  # the way out, for SIGBUS
