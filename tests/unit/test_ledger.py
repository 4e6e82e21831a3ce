"""Tests of regression.plugin.case_accounts: a run proves every case it was handed was judged."""

from __future__ import annotations

import json

from regression.plugin.case_accounts import CaseAccounts, RunFacts
from regression.outcomes import CHANGED, ERROR, IDENTICAL, NEW, NONDETERMINISTIC, CaseOutcome

CASES = {f"tests/test_m.py::test_{n}" for n in "abcd"}


def handed(*judged: tuple[str, str]) -> CaseAccounts:
    ledger = CaseAccounts(expected=set(CASES), collected=set(CASES))
    for letter, outcome in judged:
        ledger.judge(CaseOutcome(f"tests/test_m.py::test_{letter}", outcome))
    return ledger


def test_every_case_judged_leaves_none_unjudged() -> None:
    ledger = handed(*((n, IDENTICAL) for n in "abcd"))
    assert ledger.unjudged() == []


def test_a_case_without_a_verdict_is_unjudged_whatever_else_was_judged() -> None:
    ledger = handed(("a", IDENTICAL), ("b", CHANGED), ("z", IDENTICAL))
    assert ledger.unjudged() == ["tests/test_m.py::test_c", "tests/test_m.py::test_d"]


def test_no_expectation_means_nothing_to_prove() -> None:
    assert CaseAccounts().unjudged() == []


def test_failing_names_changed_and_errors_and_with_strict_new_and_nondeterministic() -> None:
    ledger = handed(("a", CHANGED), ("b", ERROR), ("c", NEW), ("d", NONDETERMINISTIC))
    assert [(o.outcome, o.nodeid) for o in ledger.failing(strict=False)] == [
        (CHANGED, "tests/test_m.py::test_a"), (ERROR, "tests/test_m.py::test_b")]
    assert len(ledger.failing(strict=True)) == 4
    assert handed(("a", IDENTICAL)).failing(strict=True) == []


def test_a_later_verdict_replaces_an_earlier_one() -> None:
    ledger = handed(("a", IDENTICAL), ("a", ERROR))
    assert ledger.outcome_of("tests/test_m.py::test_a") == ERROR
    assert ledger.outcome_of("tests/test_m.py::test_b") == ""


def test_why_a_case_was_not_run_names_the_cause() -> None:
    ledger = handed()
    a, b, c, d = sorted(CASES)
    ledger.deselected = {a}
    ledger.dropped = {b}
    ledger.collected = {a, b, d}
    plain = RunFacts()
    assert ledger.why_not_run(a, plain).startswith("deselected by -k, -m or --deselect")
    assert ledger.why_not_run(b, plain).startswith("removed from the run by a "
                                                   "pytest_collection_modifyitems hook")
    assert ledger.why_not_run(c, plain).startswith("not collected")
    assert ledger.why_not_run(d, plain) == "did not run"
    assert ledger.why_not_run(d, RunFacts(collect_only=True)) == "--collect-only: nothing ran"
    assert ledger.why_not_run(d, RunFacts(maxfail=1)) == \
        "the run stopped early (-x or --maxfail)"
    ledger.ran.add(d)
    assert "its verdict never reached the end of the run" in ledger.why_not_run(d, plain)


def test_a_stopped_run_names_the_case_it_stopped_in_and_those_after() -> None:
    ledger = handed()
    a, b, *_ = sorted(CASES)
    ledger.running = a
    ledger.stop("pytest.exit('x') was called")
    assert ledger.why_not_run(a, RunFacts()) == \
        "the run stopped in this case: pytest.exit('x') was called"
    assert ledger.why_not_run(b, RunFacts()) == \
        f"the run stopped before it: pytest.exit('x') was called in {a}"


def test_a_worker_s_ledger_merges_into_its_controller_s_through_json() -> None:
    worker = CaseAccounts(expected={"t::a", "t::b"}, label="v1 (abc)")
    worker.judge(CaseOutcome("t::a", CHANGED, "d", ("x: 1 differs",), "t.py", 3))
    worker.error("an error")
    worker.durations["t::a"] = 0.5
    worker.gone.add("t::gone")
    worker.notes += ["not judged", "a note"]
    controller = CaseAccounts(expected={"t::c"})
    controller.error("an error")
    controller.notes.append("not judged")  # each worker says it: said once
    controller.merge(json.loads(json.dumps(worker.data())))
    assert controller.notes == ["not judged", "a note"] and controller.gone == {"t::gone"}
    assert controller.expected == {"t::a", "t::b", "t::c"}
    assert controller.label == "v1 (abc)"
    assert controller.outcomes["t::a"] == worker.outcomes["t::a"]
    assert controller.errors == ["an error"]
    assert controller.durations == {"t::a": 0.5}
    assert controller.unjudged() == ["t::b", "t::c"]
