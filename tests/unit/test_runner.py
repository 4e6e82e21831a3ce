"""The check run starts in a fork of the invoke process as `python -m pytest` would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from regression.config.settings import Settings
from regression.config.paths import CACHE_DIR_ENV, NO_DEFAULT_CACHE_ENV
from regression.environment.start import forget_start_environment, keep_start_environment
from regression.run.job import JOB_ENV
from regression.run.launch import _child_environment, _started_as_pytest


def _state() -> tuple[str, list[str], dict[str, str], bool, list[str], list[str]]:
    return (os.getcwd(), list(sys.path), dict(os.environ), sys.dont_write_bytecode,
            list(sys.argv), list(sys.orig_argv))


def test_pytest_here_sees_the_root_and_the_child_environment_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_DIR", "/elsewhere/.git")  # as a git hook exports it
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setenv("KEPT", "yes")
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv(NO_DEFAULT_CACHE_ENV)  # the default location, in tmp_path: the child's
    keep_start_environment()  # as a run starts
    monkeypatch.setenv("SET_AS_THE_RUN_WENT", "by a conftest")
    monkeypatch.setenv("REGRESSION_FORK_SERVER", "set as the run went: the tool's own")
    settings = Settings(path=tmp_path / "config.yaml", reference="HEAD", subject_packages=("s",))
    child = _child_environment(settings, tmp_path / "job.json")
    forget_start_environment()
    before = _state()
    with _started_as_pytest(settings, child, ["-q", "tests"]):
        assert Path.cwd() == tmp_path
        assert sys.path[0] == str(tmp_path)  # where `python -m` puts the current folder
        assert "GIT_DIR" not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ
        assert os.environ["KEPT"] == "yes" and "SET_AS_THE_RUN_WENT" not in os.environ
        assert os.environ["REGRESSION_FORK_SERVER"] == "set as the run went: the tool's own"
        assert os.environ[JOB_ENV] == str(tmp_path / "job.json")
        assert os.environ[CACHE_DIR_ENV] == str(settings.cache_dir)
        assert sys.dont_write_bytecode
        # what code that asks sys.argv whether it runs under pytest sees there, not invoke's
        assert sys.argv[0].endswith(os.path.join("pytest", "__main__.py"))
        assert sys.argv[1:] == ["-q", "tests"]
        assert sys.orig_argv == [sys.executable, "-m", "pytest", "-q", "tests"]
    assert _state() == before


def test_what_the_run_changed_is_undone_also_when_it_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    settings = Settings(path=tmp_path / "config.yaml", reference="HEAD", subject_packages=("s",))
    before = _state()
    child = _child_environment(settings, tmp_path / "job.json")
    with pytest.raises(KeyboardInterrupt), _started_as_pytest(settings, child, ["-q"]):
        os.environ["SET_BY_A_TEST"] = "1"
        sys.path.append("added")
        raise KeyboardInterrupt
    assert _state() == before
