"""Tests of regression.plugin.verdict: every row of the pass/fail table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from regression.plugin.verdict import ABSENT, CHECKED_NOTHING, FAIL, FOREIGN_FIXTURE, KEEP, \
    NOTE, RECORDED, SKIP, UNREPRODUCED, Case, Verdict, changes_nothing, fixture_verdict, \
    unchecked_message, verdict
from regression.outcomes import CHANGED, DECLARED, ERROR, IDENTICAL, NEW, NONDETERMINISTIC, \
    CaseOutcome
from regression.store import record

ID = "tests/test_m.py::test_case"
LABEL = "v1 (0123abc)"
FAILURE = "output 'out' is not bit-identical to the reference v1:\n  'out': 2 of 6 differ"


def body(report: str = "passed", **facts: object) -> Case:
    """The call phase of a case that ran with the plugin's fixture against a recorded
    reference and checked its one output, bit-identical unless told otherwise."""
    case = Case(ID, "call", report, LABEL, reason="", fixture=True, status=RECORDED,
                checked=True)
    return replace(case, **facts)  # type: ignore[arg-type]


def phase(when: str, report: str, **facts: object) -> Case:
    return replace(Case(ID, when, report, LABEL, reason="the reason"), **facts)  # type: ignore[arg-type]


def test_the_store_s_statuses_are_the_table_s() -> None:
    assert (RECORDED, ABSENT, UNREPRODUCED) == (record.RECORDED, record.ABSENT,
                                                record.NONDETERMINISTIC)


# The body ran with this plugin's fixture (the call phase).

def test_recorded_passed_and_every_output_identical_is_identical() -> None:
    assert verdict(body()) == Verdict(CaseOutcome(ID, IDENTICAL), KEEP, "")


def test_an_output_that_differs_is_changed_and_fails_once() -> None:
    case = body("failed", failure=FAILURE, detail="'out': 2 of 6 differ",
                differences=("'out': 2 of 6 differ",), failed_on_outputs=True,
                path="tests/test_m.py", line=7, relative=0.5)
    assert verdict(case) == Verdict(CaseOutcome(ID, CHANGED, "'out': 2 of 6 differ",
                                                ("'out': 2 of 6 differ",),
                                                "tests/test_m.py", 7, 0.5), KEEP, "")


def test_a_change_the_body_then_skipped_or_xfailed_still_fails() -> None:
    for report in ("skipped", "passed"):  # skip()/xfail() after a check; an xpass
        found = verdict(body(report, failure=FAILURE, detail="d"))
        assert found.outcome is not None and found.outcome.outcome == CHANGED
        assert (found.action, found.message) == (FAIL, FAILURE)


def test_a_change_in_a_body_that_failed_on_its_own_is_noted_under_its_failure() -> None:
    found = verdict(body("failed", failure=FAILURE, detail="d", reason="ValueError: x"))
    assert found.outcome is not None and found.outcome.outcome == CHANGED
    assert (found.action, found.message) == (NOTE, FAILURE)


def test_a_recorded_case_whose_body_skips_is_an_error() -> None:
    found = verdict(body("skipped", reason="skip() called"))
    message = f"skipped, but the reference {LABEL} recorded this case: skip() called"
    assert found == Verdict(CaseOutcome(ID, ERROR, message), FAIL, message)


def test_a_body_that_fails_is_an_error_with_its_reason() -> None:
    found = verdict(body("failed", reason="ValueError: bad shape (in tests/test_m.py:3)"))
    assert found == Verdict(CaseOutcome(ID, ERROR, "ValueError: bad shape (in "
                                                   "tests/test_m.py:3)"), KEEP, "")


def test_a_body_that_checks_nothing_is_an_error() -> None:
    found = verdict(body(checked=False))
    assert found == Verdict(CaseOutcome(ID, ERROR, CHECKED_NOTHING), FAIL, CHECKED_NOTHING)


def test_an_output_of_the_reference_left_unchecked_is_an_error() -> None:
    found = verdict(body(unchecked=("logits", "loss")))
    message = f"the reference {LABEL} has outputs this test did not check: 'logits', 'loss'"
    assert found == Verdict(CaseOutcome(ID, ERROR, message), FAIL, message)


def test_not_in_reference_and_passed_is_a_skip_or_with_strict_a_failure() -> None:
    case = body(status=ABSENT, stored_reason="failed at the reference: KeyError: 'new'")
    message = f"not in reference {LABEL}: failed at the reference: KeyError: 'new'"
    outcome = CaseOutcome(ID, NEW, "failed at the reference: KeyError: 'new'")
    assert verdict(case) == Verdict(outcome, SKIP, message)
    assert verdict(replace(case, strict=True)) == Verdict(outcome, FAIL, message)


def test_not_in_reference_and_skipped_stays_a_skip_or_with_strict_fails() -> None:
    case = body("skipped", status=ABSENT, stored_reason="does not exist at the reference")
    outcome = CaseOutcome(ID, NEW, "does not exist at the reference")
    assert verdict(case) == Verdict(outcome, KEEP, "")
    assert verdict(replace(case, strict=True)) == Verdict(
        outcome, FAIL, f"not in reference {LABEL}: does not exist at the reference")


def test_not_in_reference_that_checks_nothing_is_an_error() -> None:
    case = body(status=ABSENT, checked=False)
    assert verdict(case) == Verdict(CaseOutcome(ID, ERROR, CHECKED_NOTHING), FAIL,
                                    CHECKED_NOTHING)


def test_not_in_reference_and_failed_is_an_error() -> None:
    found = verdict(body("failed", status=ABSENT, reason="TypeError: t"))
    assert found == Verdict(CaseOutcome(ID, ERROR, "TypeError: t"), KEEP, "")


def test_a_body_run_with_a_foreign_regression_fixture_is_an_error() -> None:
    for report in ("passed", "failed", "skipped"):
        found = verdict(phase("call", report))
        assert found == Verdict(CaseOutcome(ID, ERROR, FOREIGN_FIXTURE), FAIL, FOREIGN_FIXTURE)


# Skipped before the body ran (the setup phase).

def test_skipped_in_setup_where_the_reference_recorded_it_is_an_error() -> None:
    found = verdict(phase("setup", "skipped", status=RECORDED))
    message = f"skipped, but the reference {LABEL} recorded this case: the reason"
    assert found == Verdict(CaseOutcome(ID, ERROR, message), FAIL, message)


def test_skipped_in_setup_and_not_in_reference_is_new_or_with_strict_fails() -> None:
    case = phase("setup", "skipped", status=ABSENT, stored_reason="skipped at the reference")
    outcome = CaseOutcome(ID, NEW, "skipped at the reference")
    assert verdict(case) == Verdict(outcome, KEEP, "")
    assert verdict(replace(case, strict=True)) == Verdict(
        outcome, FAIL, f"not in reference {LABEL}: skipped at the reference")


def test_skipped_in_setup_and_nondeterministic_at_the_reference_is_so_counted() -> None:
    case = phase("setup", "skipped", status=UNREPRODUCED, stored_reason="outputs differed")
    assert verdict(case) == Verdict(CaseOutcome(ID, NONDETERMINISTIC, "outputs differed"))


def test_skipped_in_setup_with_no_trusted_reference_is_an_error_that_says_why() -> None:
    found = verdict(phase("setup", "skipped", stored_reason="none is stored"))
    message = (f"skipped, and no trusted reference says whether {LABEL} ran this case "
               "(none is stored): the reason; run `invoke gen`")
    assert found == Verdict(CaseOutcome(ID, ERROR, message), FAIL, message)


def test_skipped_by_the_fixture_keeps_the_fixture_s_verdict() -> None:
    assert verdict(phase("setup", "skipped", judged=NONDETERMINISTIC,
                         status=RECORDED)) == Verdict(None)


# Errors in setup or teardown.

@pytest.mark.parametrize("judged", ["", IDENTICAL, NEW])
def test_an_error_in_setup_or_teardown_makes_the_case_an_error(judged: str) -> None:
    for when in ("setup", "teardown"):
        found = verdict(phase(when, "failed", judged=judged))
        assert found == Verdict(CaseOutcome(ID, ERROR, f"error in {when}: the reason"))


@pytest.mark.parametrize("judged", [CHANGED, ERROR, NONDETERMINISTIC])
def test_an_error_in_teardown_does_not_hide_a_verdict_that_says_more(judged: str) -> None:
    assert verdict(phase("teardown", "failed", judged=judged)) == Verdict(None)


def test_phases_that_passed_say_nothing() -> None:
    for when in ("setup", "teardown"):
        assert verdict(phase(when, "passed")) == Verdict(None)
    assert verdict(phase("teardown", "skipped")) == Verdict(None)


# Before the body: the fixture's verdict.

def test_the_fixture_fails_a_case_without_a_trusted_reference() -> None:
    problem = "no reference is recorded for this case at v1; run `invoke gen` to record it"
    assert fixture_verdict(ID, LABEL, problem, "", "", strict=False) == Verdict(
        CaseOutcome(ID, ERROR, problem), FAIL, problem)


def test_the_fixture_skips_a_nondeterministic_case_or_with_strict_fails_it() -> None:
    message = f"nondeterministic at the reference {LABEL}: outputs differed"
    outcome = CaseOutcome(ID, NONDETERMINISTIC, "outputs differed")
    assert fixture_verdict(ID, LABEL, "", UNREPRODUCED, "outputs differed", False) == \
        Verdict(outcome, SKIP, message)
    assert fixture_verdict(ID, LABEL, "", UNREPRODUCED, "outputs differed", True) == \
        Verdict(outcome, FAIL, message)


def test_the_fixture_lets_a_recorded_or_absent_case_run() -> None:
    for status in (RECORDED, ABSENT):
        assert fixture_verdict(ID, LABEL, "", status, "", strict=True) is None


def test_no_row_lets_a_recorded_case_that_did_not_run_to_its_checks_pass() -> None:
    """Whatever the report says, a recorded case passes only identical."""
    for report in ("passed", "failed", "skipped"):
        for checked in (True, False):
            for unchecked in ((), ("x",)):
                found = verdict(body(report, checked=checked, unchecked=unchecked))
                assert found.outcome is not None
                passes = found.outcome.outcome == IDENTICAL
                assert passes == (report == "passed" and checked and not unchecked), found
                if not passes:
                    assert found.action == FAIL or report == "failed", found


# The judge skips gathering the facts of a phase that changes_nothing() names: verdict()
# must keep every such phase as it is, whatever the facts.

FACTS = [{}, {"fixture": True}, {"status": RECORDED}, {"status": ABSENT},
         {"status": UNREPRODUCED}, {"judged": IDENTICAL}, {"judged": ERROR},
         {"judged": NEW, "strict": True}, {"failure": FAILURE, "checked": True},
         {"status": RECORDED, "unchecked": ("other",), "fixture": True}]


@pytest.mark.parametrize("when", ["setup", "call", "teardown"])
@pytest.mark.parametrize("report", ["passed", "failed", "skipped"])
def test_a_phase_that_changes_nothing_keeps_its_report_whatever_is_known(when: str,
                                                                       report: str) -> None:
    """Every row asserts: a phase the judge skips keeps its report whatever the facts; any
    other is judged on some of them (else skipping its facts would lose nothing)."""
    verdicts = {verdict(phase(when, report, **facts)) for facts in FACTS}
    if changes_nothing(when, report):
        assert verdicts == {Verdict(None)}
    else:
        assert verdicts != {Verdict(None)}, (when, report)


def test_a_passed_setup_or_teardown_changes_nothing_and_a_call_is_judged() -> None:
    assert changes_nothing("setup", "passed") and changes_nothing("teardown", "passed")
    assert not any(changes_nothing("call", report) for report in ("passed", "failed",
                                                                  "skipped"))
    assert not changes_nothing("setup", "skipped") and not changes_nothing("setup", "failed")


# A change that regression-changes.yaml declares (the judge then did not fail the body).

def declared_body(report: str = "passed", **facts: object) -> Case:
    return body(report, failure=FAILURE, detail="'out': 2 of 6 differ",
                differences=("'out': 2 of 6 differ",), path="tests/test_m.py", line=7,
                relative=0.5, names=("out",), size="rounding-level", declared="why",
                **facts)


def test_a_change_its_declaration_covers_is_declared_and_passes_with_its_reason() -> None:
    assert verdict(declared_body()) == Verdict(CaseOutcome(
        ID, DECLARED, "'out': 2 of 6 differ", ("'out': 2 of 6 differ",), "tests/test_m.py", 7,
        0.5, ("out",), "rounding-level", "why"), KEEP, "")


def test_a_declaration_never_hides_an_output_left_unchecked() -> None:
    found = verdict(declared_body(unchecked=("logits",)))
    assert found.outcome is not None and found.outcome.outcome == ERROR
    assert (found.action, found.message) == (FAIL, unchecked_message(
        declared_body(unchecked=("logits",))))


def test_a_declaration_never_excuses_a_body_that_failed_or_skipped_on_its_own() -> None:
    found = verdict(declared_body("failed", reason="ValueError: x"))
    assert found.outcome is not None and found.outcome.outcome == CHANGED
    assert found.action == NOTE
    found = verdict(declared_body("skipped"))
    assert found.outcome is not None and found.outcome.outcome == CHANGED
    assert found.action == FAIL


def test_a_change_beyond_its_declaration_is_changed_and_says_why() -> None:
    case = body("failed", failure=FAILURE, detail="'out': 2 of 6 differ",
                failed_on_outputs=True, names=("out",), size="behaviour",
                undeclared="declared rounding-level in regression-changes.yaml (line 2), but "
                           "now behaviour")
    found = verdict(case)
    assert found.outcome is not None and found.outcome.outcome == CHANGED
    assert found.outcome.detail == ("'out': 2 of 6 differ; declared rounding-level in "
                                    "regression-changes.yaml (line 2), but now behaviour")
    assert found.outcome.size == "behaviour" and found.action == KEEP
