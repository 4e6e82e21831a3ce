"""Tests of regression.environment.start: every process of one run counts from the
environment its first process started with, however the user's code changed its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from regression.environment.start import HANDED, forget_start_environment, \
    keep_start_environment, start_environment

SHOW = ("import json; from regression.environment.start import keep_start_environment, "
        "start_environment; keep_start_environment(); "
        "print(json.dumps(dict(start_environment())))")


def test_a_process_the_run_starts_counts_from_the_run_s_start_not_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As an xdist worker or a recording, started once a conftest had imported the working
    tree's subject, which set a variable."""
    monkeypatch.setenv("SUBJ_HOME", "as the run started")
    keep_start_environment()
    try:
        monkeypatch.setenv("SUBJ_HOME", "set by the working tree's subject since")
        monkeypatch.setenv("SUBJ_NEW", "set since")
        shown = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True,
                               check=True, env=dict(os.environ)).stdout
        started = json.loads(shown)
        assert started["SUBJ_HOME"] == "as the run started" and "SUBJ_NEW" not in started
        assert start_environment()["SUBJ_HOME"] == "as the run started"
        keep_start_environment()  # a second run in this process (pytester's) takes its own
        assert start_environment()["SUBJ_HOME"] == "set by the working tree's subject since"
    finally:
        forget_start_environment()
    assert HANDED not in os.environ  # this process set it: gone with its run
    assert start_environment() is os.environ


def test_what_another_run_handed_on_is_taken_and_stays_when_this_one_ends() -> None:
    script = ("import json, os; from regression.environment.start import HANDED, "
              "forget_start_environment, keep_start_environment, start_environment; "
              "keep_start_environment(); taken = dict(start_environment()); "
              "forget_start_environment(); print(json.dumps([taken, HANDED in os.environ]))")
    handed = json.dumps({"pid": 1, "environ": {"A": "1"}})  # another process's run
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env={**os.environ, HANDED: handed}).stdout
    assert json.loads(shown) == [{"A": "1"}, True]


@pytest.mark.parametrize("handed", ["{not json", '{"pid": 1, "environ": {"A": 2}}', '"text"'])
def test_what_does_not_read_as_a_handed_environment_is_not_taken(
        monkeypatch: pytest.MonkeyPatch, handed: str) -> None:
    monkeypatch.setenv(HANDED, handed)
    monkeypatch.setenv("OWN", "yes")
    keep_start_environment()
    try:
        assert start_environment()["OWN"] == "yes"
    finally:
        forget_start_environment()
