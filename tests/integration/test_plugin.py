"""The pytest plugin is installed everywhere: inert until a test asks for its fixture."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:hypothesispytest", *args],  # as helpers.NO_HYPOTHESIS
                          cwd=folder, text=True, capture_output=True, check=False, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})


def test_project_without_config_is_unaffected_and_torch_is_not_imported(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\n\ndef test_plain():\n"
        "    heavy = {'torch', 'git', 'yaml', 'xxhash', 'filelock', 'safetensors'}\n"
        "    assert heavy.isdisjoint(sys.modules), heavy & set(sys.modules)\n")
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "= torch-regression =" not in done.stdout  # no summary section


def test_fixture_without_config_is_a_clear_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_uses.py").write_text(
        "def test_uses(regression):\n    regression.check(1)\n")
    done = _pytest(tmp_path)
    assert done.returncode == 4  # pytest's usage error
    assert "no config.yaml in " in done.stderr
