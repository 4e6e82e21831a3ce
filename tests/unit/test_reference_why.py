"""Which reference a CI job checks against, and why: told from $REGRESSION_REFERENCE_FOR,
the event the workflow chose the reference for, and whether --reference was given."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression import github
from regression.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_github(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (github.REFERENCE_FOR, github.STEP_SUMMARY):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("event", "given", "why"), [
    ("pull_request", "0123abcd", "the pull request's base commit, so this job says what the "
                                 "pull request changes"),
    ("push", None, "config.yaml's reference on a push, so this job says what changed since it"),
    ("schedule", None, "config.yaml's reference on the schedule, so this job says what "
                       "changed since it"),
    ("workflow_dispatch", "v1.2", "the manual run's reference input (v1.2)"),
    ("workflow_dispatch", None, "config.yaml's reference on a manual run, so this job says "
                                "what changed since it"),
    ("push", "v1.2", "--reference v1.2 on a push"),
    ("merge_group", None, "config.yaml's reference on a merge_group event, so this job says "
                          "what changed since it"),
])
def test_the_event_and_the_flag_say_why(monkeypatch: pytest.MonkeyPatch, event: str,
                                        given: str | None, why: str) -> None:
    monkeypatch.setenv(github.REFERENCE_FOR, event)
    assert github.reference_why(given) == why


def test_outside_the_workflow_nothing_is_told(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert github.reference_why("v1.2") is None
    monkeypatch.setenv(github.REFERENCE_FOR, "")
    github.tell_reference("v1.2 (0123abcd)", "v1.2")
    assert capsys.readouterr().out == ""


def test_a_pull_request_without_its_base_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(github.REFERENCE_FOR, "pull_request")
    with pytest.raises(ConfigError) as raised:
        github.reference_why(None)
    assert str(raised.value).startswith(
        "$REGRESSION_REFERENCE_FOR: 'pull_request' says the reference is the pull request's "
        "base commit, but no --reference was given: pass it")
    assert "github.event.pull_request.base.sha" in str(raised.value)


def test_the_log_and_the_step_summary_name_the_reference_and_why(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv(github.REFERENCE_FOR, "pull_request")
    monkeypatch.setenv(github.STEP_SUMMARY, str(summary))
    github.tell_reference("0123abcd4567", "0123abcd4567")
    why = "the pull request's base commit, so this job says what the pull request changes"
    assert capsys.readouterr().out == f"reference 0123abcd4567: {why}\n"
    assert summary.read_text() == f"earlier step\n**Reference:** `0123abcd4567`: {why}.\n\n"
