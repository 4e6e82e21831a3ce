"""The pass/fail table of a check run: what the reference holds for a case, and how its
test ended, give the case's outcome and what its pytest report must say.

Pure: plain data in, plain data out, nothing of pytest. The judge plugin gathers the facts
of each phase of a case and applies the verdict to the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from regression.outcomes import CHANGED, DECLARED, ERROR, IDENTICAL, NEW, NONDETERMINISTIC, \
    CaseOutcome

RECORDED = "recorded"
ABSENT = "absent"
UNREPRODUCED = "nondeterministic"
"""The statuses of a stored case (as regression.store.cache names them)."""

KEEP = "keep"
"""The report stays as pytest made it."""
FAIL = "fail"
"""The report fails with the message; an xfail mark no longer excuses it."""
SKIP = "skip"
"""The report is a skip with the message."""
NOTE = "note"
"""The report (already failed on its own) gets the message as a section."""

CHECKED_NOTHING = ("the test called regression.check() zero times, so it checks nothing; "
                   "call regression.check(output) on what the case should keep stable")
FOREIGN_FIXTURE = ("the test's `regression` fixture is not torch-regression's (a conftest.py "
                   "or plugin defines its own), so nothing was compared; rename that fixture")


@dataclass(frozen=True)
class Case:
    """What is known of a case when one phase of it (setup, call, teardown) is reported."""

    nodeid: str
    when: str
    report: str
    """pytest's outcome of the phase: passed, failed or skipped."""
    label: str = ""
    """The reference, as messages name it."""
    reason: str = ""
    """Why the phase failed or skipped, in one line."""
    strict: bool = False
    """--regression-strict: not in reference and nondeterministic fail."""
    judged: str = ""
    """The case's outcome before this phase ("" when none): the fixture's, or the call's."""
    fixture: bool = False
    """Whether this plugin's `regression` fixture ran (it compares what the body checks)."""
    status: str | None = None
    """The stored case's status; None when no trusted reference says anything of it."""
    stored_reason: str = ""
    """The stored case's reason (why not in reference); with no trusted one, why not."""
    checked: bool = False
    """Whether the body called regression.check() at least once."""
    failure: str = ""
    """Every output that differs, in full; "" when none does."""
    detail: str = ""
    """A changed case in one line."""
    differences: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()
    """Outputs the reference has that the body did not check."""
    failed_on_outputs: bool = False
    """Whether the body's failure is this plugin's, for differing outputs."""
    path: str = ""
    line: int = 0
    relative: float | None = None
    """A changed case: the largest relative difference of its float tensors, if measured."""
    names: tuple[str, ...] = ()
    """The outputs that differ."""
    size: str = ""
    """The change's size: rounding-level or behaviour."""
    declared: str = ""
    """The reason of the declaration that covers the change; "" when none does."""
    undeclared: str = ""
    """Why the case's declaration does not cover its change; "" when it has none or it does."""


@dataclass(frozen=True)
class Verdict:
    """The case's outcome (None: it stays as it was) and what its report must say."""

    outcome: CaseOutcome | None
    action: str = KEEP
    message: str = ""


def changes_nothing(when: str, report: str) -> bool:
    """Whether every phase reported so is kept as it is, with no outcome, whatever else is
    known of the case (verdict() says so too): a setup or teardown that passed, a teardown
    that skipped. Most phases are such; the judge skips gathering their facts."""
    return when != "call" and (report == "passed" or (when, report) == ("teardown", "skipped"))


def verdict(case: Case) -> Verdict:
    """The verdict of one reported phase of a regression case."""
    if case.when == "call" and case.fixture:
        return Verdict(_body_outcome(case), *_body_action(case))
    if case.when == "call":
        return _failed(case, ERROR, FOREIGN_FIXTURE)
    if case.report == "skipped" and case.when == "setup":
        return _setup_skip(case)
    if case.report == "failed" and case.judged in ("", IDENTICAL, NEW):
        return Verdict(CaseOutcome(case.nodeid, ERROR, f"error in {case.when}: {case.reason}"))
    return Verdict(None)


def fixture_verdict(nodeid: str, label: str, problem: str, status: str, reason: str,
                    strict: bool) -> Verdict | None:
    """Before the body runs: a case without a trusted reference is an error, one the
    reference does not reproduce is never compared; None when the body may run."""
    if problem:
        return Verdict(CaseOutcome(nodeid, ERROR, problem), FAIL, problem)
    if status == UNREPRODUCED:
        message = f"nondeterministic at the reference {label}: {reason}"
        return Verdict(CaseOutcome(nodeid, NONDETERMINISTIC, reason),
                       FAIL if strict else SKIP, message)
    return None


def skipped_message(case: Case) -> str:
    return f"skipped, but the reference {case.label} recorded this case: {case.reason}"


def unchecked_message(case: Case) -> str:
    names = ", ".join(map(repr, case.unchecked))
    return f"the reference {case.label} has outputs this test did not check: {names}"


def _failed(case: Case, outcome: str, message: str) -> Verdict:
    return Verdict(CaseOutcome(case.nodeid, outcome, message), FAIL, message)


def _setup_skip(case: Case) -> Verdict:
    """A case skipped before its body ran (a skipif, xfail(run=False), a fixture that skips)
    fails when the reference recorded it: it would otherwise pass unchecked."""
    if case.judged:  # skipped by the fixture: nondeterministic
        return Verdict(None)
    if case.status == ABSENT:
        outcome = CaseOutcome(case.nodeid, NEW, case.stored_reason)
        return Verdict(outcome, *_not_in_reference(case, skip=False))
    if case.status == UNREPRODUCED:
        return Verdict(CaseOutcome(case.nodeid, NONDETERMINISTIC, case.stored_reason))
    if case.status is not None:
        return _failed(case, ERROR, skipped_message(case))
    return _failed(case, ERROR, (
        f"skipped, and no trusted reference says whether {case.label} ran this case "
        f"({case.stored_reason}): {case.reason}; run `invoke gen`"))


def _not_in_reference(case: Case, skip: bool) -> tuple[str, str]:
    """A case not in the reference fails with --regression-strict, else is (or stays) a skip."""
    message = f"not in reference {case.label}: {case.stored_reason}"
    if case.strict:
        return FAIL, message
    return (SKIP, message) if skip else (KEEP, "")


def _as_declared(case: Case) -> bool:
    """Whether the case's outputs differ within its declaration, and its body passed: the
    judge then did not fail it. A declaration never excuses a failure of the body's own."""
    return bool(case.failure and case.declared and case.report == "passed")


def _body_outcome(case: Case) -> CaseOutcome:
    """The case's outcome once its body ran with this plugin's fixture."""
    in_reference = case.status != ABSENT
    if _as_declared(case) and case.unchecked:
        return CaseOutcome(case.nodeid, ERROR, unchecked_message(case))
    if _as_declared(case):
        return CaseOutcome(case.nodeid, DECLARED, case.detail, case.differences, case.path,
                           case.line, case.relative, case.names, case.size, case.declared)
    if case.failure:
        detail = f"{case.detail}; {case.undeclared}" if case.undeclared else case.detail
        return CaseOutcome(case.nodeid, CHANGED, detail, case.differences, case.path,
                           case.line, case.relative, case.names, case.size)
    if case.report == "skipped" and in_reference:
        return CaseOutcome(case.nodeid, ERROR, skipped_message(case))
    if case.report == "failed":
        return CaseOutcome(case.nodeid, ERROR, case.reason)
    if not in_reference and case.report == "skipped":
        return CaseOutcome(case.nodeid, NEW, case.stored_reason)
    if not case.checked:
        return CaseOutcome(case.nodeid, ERROR, CHECKED_NOTHING)
    if not in_reference:
        return CaseOutcome(case.nodeid, NEW, case.stored_reason)
    if case.unchecked:
        return CaseOutcome(case.nodeid, ERROR, unchecked_message(case))
    return CaseOutcome(case.nodeid, IDENTICAL)


def _body_action(case: Case) -> tuple[str, str]:
    """What the body's report must say: it fails where the case did not pass, whatever
    marks (skip, xfail) made of it."""
    in_reference = case.status != ABSENT
    if _as_declared(case):
        return (FAIL, unchecked_message(case)) if case.unchecked else (KEEP, "")
    if case.failure and case.report != "failed":  # a skip or xfail after a differing check
        return FAIL, case.failure
    if case.failure and not case.failed_on_outputs:  # it failed on its own
        return NOTE, case.failure
    if case.failure:
        return KEEP, ""
    if case.report == "skipped" and in_reference:  # an xfail or skip in the body
        return FAIL, skipped_message(case)
    if case.report == "skipped" and case.strict:
        return FAIL, f"not in reference {case.label}: {case.stored_reason}"
    if case.report == "passed" and not case.checked:
        return FAIL, CHECKED_NOTHING
    if case.report == "passed" and not in_reference:
        return _not_in_reference(case, skip=True)
    if case.report == "passed" and case.unchecked:
        return FAIL, unchecked_message(case)
    return KEEP, ""
