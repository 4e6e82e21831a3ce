"""Tests of regression.plugin.state: check mode's one state reads the settings one way and
applies the device's and the determinism's settings once per process."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.environment import determinism
from regression.config.settings import Determinism, Settings
from regression.errors import RegressionError
from regression.repository.gitcmd import Repository
from regression.plugin.state import CheckState
from regression.run.job import CheckJob
from regression.run.types import Reference

pytest_plugins = ["pytester"]


def _job(tmp_path: Path) -> CheckJob:
    settings = Settings(path=tmp_path / "config.yaml", reference="v1",
                        subject_packages=("zoo",), determinism=Determinism(seed=7))
    reference = Reference(settings, Repository(str(tmp_path), str(tmp_path / ".git")), "v1",
                          "a" * 40, "c" * 40)
    return CheckJob(reference, str(tmp_path / "result.json"))


def _bare_config(pytester: pytest.Pytester) -> pytest.Config:
    """A pytest configuration whose own check run registered nothing of ours."""
    return pytester.parseconfig("-p", "no:regression")


class _Recorder:
    """Records nothing: this state's tests never ready references."""


def test_the_settings_are_the_jobs_and_the_process_is_readied_once(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(determinism, "prepare_process", lambda device: calls.append(device))
    monkeypatch.setattr(determinism, "apply",
                        lambda settings: calls.append(f"seed {settings.seed}"))
    job = _job(tmp_path)
    state = CheckState(_bare_config(pytester), job, _Recorder())  # type: ignore[arg-type]
    assert state.read_settings() is job.settings and state.settings is job.settings
    state.prepare_device()
    state.apply_determinism()
    state.prepare_device()
    state.apply_determinism()
    assert calls == ["cpu", "seed 7"]


def test_without_a_config_yaml_there_are_no_settings_for_hints(
        pytester: pytest.Pytester) -> None:
    state = CheckState(_bare_config(pytester), None, _Recorder())  # type: ignore[arg-type]
    assert state.settings_if_any() is None
    with pytest.raises(RegressionError, match="config.yaml"):
        state.read_settings()


def test_the_plugin_loaded_without_its_entry_point_says_to_install_again(
        pytester: pytest.Pytester) -> None:
    """As stale installed metadata would load it: the plugin module, but not the entry."""
    pytester.makepyfile(test_a="def test_a(regression):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:regression",
                                          "-p", "regression.plugin")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*without its entry point regression.run.entry*"])
