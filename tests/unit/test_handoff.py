"""The pipe on which a recording hands each case over to the check run (run/handoff.py)."""

from __future__ import annotations

import os
import threading

from regression.run.handoff import Handoff, hand_over


def _pipe() -> tuple[Handoff, int]:
    read_end, write_end = os.pipe()
    return Handoff(os.fdopen(read_end, "rb")), write_end


def test_a_case_handed_over_is_returned_once_it_arrives_in_any_order() -> None:
    handoff, write_end = _pipe()
    assert hand_over(write_end, {"nodeid": "t::a", "status": "recorded"})
    assert hand_over(write_end, {"nodeid": "t::b", "status": "absent", "reason": "x" * 70000})
    assert handoff.wait_for("t::b", lambda: True)["reason"] == "x" * 70000  # past a pipe's buffer
    assert handoff.wait_for("t::a", lambda: True) == {"nodeid": "t::a", "status": "recorded"}
    os.close(write_end)
    handoff.close()


def test_the_wait_ends_when_the_case_comes_later_from_another_thread() -> None:
    handoff, write_end = _pipe()
    later = threading.Timer(0.2, hand_over, (write_end, {"nodeid": "t::late"}))
    later.start()
    assert handoff.wait_for("t::late", lambda: True, poll=0.05) == {"nodeid": "t::late"}
    later.join()
    os.close(write_end)
    handoff.close()


def test_none_once_the_pipe_ends_without_the_case() -> None:
    handoff, write_end = _pipe()
    hand_over(write_end, {"nodeid": "t::a"})
    os.write(write_end, b"not json\n[1, 2]\n{\"nodeid\": 3}\n")  # ignored, not fatal
    os.close(write_end)
    assert handoff.wait_for("t::missing", lambda: True) is None
    assert handoff.wait_for("t::a", lambda: True) == {"nodeid": "t::a"}  # kept past the end
    handoff.close()


def test_none_once_the_recording_died_though_the_pipe_stays_open() -> None:
    """A test's own child process may hold the pipe open after the recording ended."""
    handoff, write_end = _pipe()
    assert handoff.wait_for("t::a", lambda: False, poll=0.01) is None
    os.close(write_end)
    handoff.close()


def test_handing_over_to_a_reader_that_is_gone_says_so_and_does_not_raise() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    assert hand_over(write_end, {"nodeid": "t::a"}) is False
    os.close(write_end)
