"""The pipe on which a recording hands each case over to the check run (run/handoff.py)."""

from __future__ import annotations

import os
import threading

import pytest

from regression.run.handoff import HandedOverCases, hand_over


def _pipe() -> tuple[HandedOverCases, int]:
    read_end, write_end = os.pipe()
    return HandedOverCases(read_end), write_end


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


def test_a_wait_with_nothing_handed_over_for_its_patience_is_said_once() -> None:
    """Not timed: the wait goes on until the stall was said, then the recording 'ends'."""
    handoff, write_end = _pipe()
    said: list[float] = []
    assert handoff.wait_for("t::a", lambda: len(said) < 1, poll=0.01,
                            stalled=said.append, patience=0.05) is None
    assert len(said) == 1 and said[0] >= 0.05
    os.close(write_end)
    handoff.close()


def test_a_case_handed_over_meanwhile_restarts_the_patience() -> None:
    """Bodies of other cases keep arriving: the wait is long, not stalled."""
    handoff, write_end = _pipe()
    said: list[float] = []
    stop = threading.Event()

    def feed() -> None:
        index = 0
        while not stop.is_set():
            hand_over(write_end, {"nodeid": f"t::other{index}"})
            index += 1
            stop.wait(0.01)
        hand_over(write_end, {"nodeid": "t::a"})

    feeder = threading.Thread(target=feed)
    feeder.start()
    threading.Timer(0.5, stop.set).start()
    assert handoff.wait_for("t::a", lambda: True, poll=0.01, stalled=said.append,
                            patience=30.0) == {"nodeid": "t::a"}
    feeder.join()
    assert said == []
    os.close(write_end)
    handoff.close()


def test_close_ends_the_reader_though_a_process_left_behind_holds_the_pipe_open() -> None:
    """A test's own child of the recording may outlive it with the pipe's write end."""
    handoff, write_end = _pipe()
    hand_over(write_end, {"nodeid": "t::a"})
    handoff.close()  # the write end stays open
    assert not handoff._thread.is_alive()
    assert hand_over(write_end, {"nodeid": "t::b"}) is False  # the read end is closed
    os.close(write_end)


def test_a_pipe_on_a_descriptor_past_1024_is_read() -> None:
    """select.select refuses such descriptors; a reader that broke on one would read as a
    check run that is gone."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= 1500:
        pytest.skip(f"the limit of open files here is {soft}")
    read_end, write_end = os.pipe()
    os.dup2(read_end, 1500)
    os.close(read_end)
    handoff = HandedOverCases(1500)
    assert hand_over(write_end, {"nodeid": "t::a"})
    assert handoff.wait_for("t::a", lambda: True) == {"nodeid": "t::a"}
    os.close(write_end)
    handoff.close()
