"""`invoke test`'s check as one typed request: --full-values checks the changed cases again
once, against their values, with what the first run already did left out; the changed cases
come from the run's typed outcomes, not from its text."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from regression.cli import tasks
from regression.cli.tasks import CheckRequest, changed_cases
from regression.outcomes import CHANGED, ERROR, IDENTICAL, CaseOutcome
from regression.run.completion import Completion
from regression.run.types import CheckResult, Reference
from regression.selection import Selection
from regression.shard import ShardSpec

RESOLVED: Reference = object()  # type: ignore[assignment]  # only passed along
RESULT = CheckResult(finished=Completion(1, 3, outcomes=(
    CaseOutcome("t::a", CHANGED, "1 value differs"), CaseOutcome("t::b", ERROR, "boom"),
    CaseOutcome("t::c", IDENTICAL), CaseOutcome("t::d", CHANGED))))


def test_the_changed_cases_come_from_the_typed_outcomes() -> None:
    assert changed_cases(RESULT) == ["t::a", "t::d"]
    assert changed_cases(CheckResult()) == [] and changed_cases(None) == []


def test_checking_against_the_values_keeps_the_run_and_drops_what_the_first_did() -> None:
    request = CheckRequest(RESOLVED, ShardSpec(1, 2), strict=True, junitxml="r.xml",
                           store_durations=True, subject_root=Path("/c"), workers=3,
                           picked=Selection("vit"), full_values=True)
    again = request.against_values(["t::a"])
    assert again == CheckRequest(RESOLVED, None, no_gen=True, strict=True,
                                 subject_root=Path("/c"), workers=3,
                                 picked=Selection(cases=("t::a",)))


@pytest.mark.parametrize("full_values,code,runs", [
    (True, 1, 2), (True, 0, 1), (False, 1, 1)])
def test_full_values_checks_the_changed_cases_again_once(
        full_values: bool, code: int, runs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[CheckRequest] = []
    recorded: list[list[str]] = []

    def run(request: CheckRequest) -> tuple[int, CheckResult | None]:
        seen.append(request)
        return (code, RESULT) if len(seen) == 1 else (5, None)

    @contextmanager
    def values(reference: Reference, nodeids: Sequence[str], echo: object
               ) -> Iterator[list[str]]:
        recorded.append(list(nodeids))
        yield list(nodeids[:1])

    monkeypatch.setattr(tasks, "_run_check", run)
    monkeypatch.setattr(tasks, "record_values", values)
    request = CheckRequest(RESOLVED, full_values=full_values, workers=2)
    assert tasks._check(request) == code
    assert len(seen) == runs and seen[0] == request
    if runs == 2:
        assert recorded == [["t::a", "t::d"]]
        assert seen[1] == request.against_values(["t::a"])
        assert not seen[1].full_values
