"""A line the relay echoes after the cases ran stands on its own line, not among the dots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = '''
import pytest
from regression.plugin.worker_messages import WorkerMessages

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session):
    result = yield
    WorkerMessages(session.config, lambda kind, text: None).echo("recording 3 of 3 cases at v1 ...")
    return result
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_an_echoed_line_after_the_run_is_a_line_of_its_own(tmp_path: Path,
                                                           workers: list[str]) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_a.py").write_text("def test_1(): pass\ndef test_2(): pass\n")
    # hypothesis's plugin imports hypothesis in each of the three processes: 3 s of CPU of 4
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:regression",
                           "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *workers],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "recording 3 of 3 cases at v1 ..." in lines, done.stdout
    progress = lines[lines.index("recording 3 of 3 cases at v1 ...") - 1]
    assert progress.rstrip().endswith("[100%]"), done.stdout
