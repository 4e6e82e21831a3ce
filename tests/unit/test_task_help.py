"""`invoke TASK --help` shows the help, also for tasks whose first argument is positional."""

from __future__ import annotations

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
