"""`invoke TASK --help` shows the help, also for tasks whose first argument is positional."""

from __future__ import annotations

from pathlib import Path

import pytest
from invoke.program import Program

from regression.cli.tasks import ns


@pytest.mark.parametrize("task", ["explain", "bisect", "compare", "test", "gen"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_task_help_is_shown_not_taken_as_an_argument(
        task: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    Program(namespace=ns, name="invoke", binary="invoke").run(["invoke", task, flag], exit=False)
    out = capsys.readouterr()
    assert f"Usage: invoke [--core-opts] {task} [--options]" in out.out
    assert "torch-regression:" not in out.out + out.err


def _task_names(collection: object, prefix: str = "") -> list[str]:
    names = [prefix + name for name in collection.tasks]  # type: ignore[attr-defined]
    for name, sub in collection.collections.items():  # type: ignore[attr-defined]
        names += _task_names(sub, f"{prefix}{name}.")
    return names


@pytest.mark.parametrize("task", _task_names(ns))
def test_arguments_after_a_double_dash_are_refused_before_the_task_runs(
        task: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """invoke hands what follows `--` to no task: `invoke test -- -x` would run without -x."""
    monkeypatch.chdir(tmp_path)  # no config.yaml: a task that ran would fail otherwise
    positionals = {"explain": ["--case", "x"], "bisect": ["--good", "v1"],
                   "compare": ["--candidate", "x"]}.get(task, [])
    with pytest.raises(SystemExit) as ended:
        Program(namespace=ns, name="invoke", binary="invoke").run(
            ["invoke", task, *positionals, "--", "-x"])
    said = capsys.readouterr().err
    assert ended.value.code == 2, said
    assert said.strip() == (f"torch-regression: `invoke {task}` passes nothing after `--` to "
                            f"pytest, so '-x' would do nothing: use the task's own flags "
                            f"(`invoke {task} --help`) or PYTEST_ADDOPTS"), said
