"""Tests of regression.environment.start: every process of one run counts from the
environment its first process started with, however the user's code changed its own; a
hand-on is taken only from an ancestor's run, and nested runs put back the outer one's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from regression.environment.start import HANDED, forget_start_environment, \
    keep_start_environment, start_environment

SHOW = ("import json, os; from regression.environment.start import HANDED, "
        "forget_start_environment, keep_start_environment, start_environment; "
        "keep_start_environment(); taken = dict(start_environment()); "
        "forget_start_environment(); print(json.dumps([taken, os.environ.get(HANDED)]))")


def _child(env: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """What a child process's run takes as its start, and the hand-on it leaves."""
    shown = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True,
                           check=True, env=env).stdout
    taken, left = json.loads(shown)
    return taken, left


def test_a_process_the_run_starts_counts_from_the_run_s_start_not_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As an xdist worker or a recording, started once a conftest had imported the working
    tree's subject, which set a variable."""
    outer = os.environ.get(HANDED)
    monkeypatch.setenv("SUBJ_HOME", "as the run started")
    keep_start_environment()
    try:
        monkeypatch.setenv("SUBJ_HOME", "set by the working tree's subject since")
        monkeypatch.setenv("SUBJ_NEW", "set since")
        taken, left = _child(dict(os.environ))
        assert taken["SUBJ_HOME"] == "as the run started" and "SUBJ_NEW" not in taken
        assert left == os.environ[HANDED]  # the child's run leaves its parent's as it was
        assert start_environment()["SUBJ_HOME"] == "as the run started"
        keep_start_environment()  # a run inside this one (pytester's) takes its own
        assert start_environment()["SUBJ_HOME"] == "set by the working tree's subject since"
        forget_start_environment()  # ... and puts the outer one back when it ends
        assert start_environment()["SUBJ_HOME"] == "as the run started"
    finally:
        forget_start_environment()
    assert os.environ.get(HANDED) == outer


@pytest.mark.parametrize("pid", [1, 2 ** 22 + 7])  # init, a process that is no ancestor
def test_a_hand_on_from_no_ancestor_is_a_leftover_and_not_taken(pid: int) -> None:
    """Exported by mistake in a shell, or inherited by a run started from inside a test."""
    leftover = json.dumps({"pid": pid, "environ": {"A": "1"}})
    taken, _ = _child({**os.environ, HANDED: leftover, "OWN": "yes"})
    assert taken.get("OWN") == "yes" and "A" not in taken


@pytest.mark.parametrize("handed", ["{not json", '{"pid": "1", "environ": {}}', '"text"',
                                    '{"pid": 1, "environ": {"A": 2}}'])
def test_what_does_not_read_as_a_handed_environment_is_not_taken(handed: str) -> None:
    taken, _ = _child({**os.environ, HANDED: handed, "OWN": "yes"})
    assert taken.get("OWN") == "yes"
