"""A check run passes only on its own completion record, whatever its exit code says."""

from __future__ import annotations

import pytest

from regression.outcomes import CHANGED, IDENTICAL, NEW, NONDETERMINISTIC, CaseOutcome
from regression.run.completion import Completion, settle, still_running
from regression.errors import RunIncompleteError

PASSED = Completion(0, 2)


def _refused(code: int, result: Completion | None, journal: list[str]
             ) -> RunIncompleteError:
    with pytest.raises(RunIncompleteError) as caught:
        settle(code, result, journal)
    return caught.value


def test_a_record_that_says_passed_and_exit_0_pass() -> None:
    assert settle(0, PASSED, ["start a", "end a"]) == 0


def test_a_failing_exit_code_stands_whatever_the_record_says() -> None:
    assert settle(1, PASSED, []) == 1
    assert settle(1, Completion(1, 2, outcomes=(CaseOutcome("a", CHANGED),)), []) == 1


def test_no_record_and_exit_0_names_the_case_that_was_running() -> None:
    error = _refused(0, None, ["start a", "end a", "start b"])
    assert error.exit_code == 2
    assert "its process exited with code 0 while running b, without the record" in str(error)
    assert "`pytest 'b'` shows what happens there" in str(error)


def test_no_record_says_where_the_run_ended_outside_a_case() -> None:
    killed = _refused(-9, None, ["start a", "end a"])
    assert "was killed by signal 9 (SIGKILL) after 1 tests had ended" in str(killed)
    assert killed.exit_code == 2
    usage = _refused(4, None, [])
    assert usage.exit_code == 4 and "before any test started" in str(usage)


def test_a_record_that_did_not_pass_fails_a_process_that_exited_0() -> None:
    record = Completion(0, 3, unjudged=["b: did not run"],
                        outcomes=(CaseOutcome("a", CHANGED), CaseOutcome("c", IDENTICAL)))
    error = _refused(0, record, [])
    assert error.exit_code == 1
    text = str(error)
    assert "the check run's process exited 0, but the run did not pass" in text
    assert "1 of 3 cases it was meant to check ended without a verdict:\n  b: did not run" in text
    assert "1 cases did not pass:\n  CHANGED a" in text
    assert _refused(0, Completion(3, 0), []).exit_code == 3


def test_the_record_holds_each_case_outcome_and_which_fail() -> None:
    outcomes = (CaseOutcome("a", CHANGED, "1 value"), CaseOutcome("b", IDENTICAL),
                CaseOutcome("c", NEW), CaseOutcome("d", NONDETERMINISTIC),
                CaseOutcome("e", CHANGED))
    lenient = Completion(1, 5, outcomes=outcomes)
    assert lenient.cases(CHANGED) == ["a", "e"] and lenient.cases(NEW) == ["c"]
    assert [o.nodeid for o in lenient.failing] == ["a", "e"]
    strict = Completion(1, 5, outcomes=outcomes, strict=True)
    assert [o.nodeid for o in strict.failing] == ["a", "c", "d", "e"]
    assert not Completion(0, 5, outcomes=outcomes[1:2] + outcomes[2:4]).failing
    assert not Completion(0, 5, outcomes=outcomes[2:4], strict=True).passed


def test_a_test_started_twice_in_the_journal_is_running_until_it_ends_twice() -> None:
    # an xdist controller and its worker each note the same test
    assert still_running(["start a", "start a", "end a"]) == ["a"]
    assert still_running(["start a", "start a", "end a", "end a", "start b"]) == ["b"]
