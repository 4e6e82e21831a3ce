"""A git repository holding a copy of the example zoo, for the benchmarks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]

# hypothesis is a development dependency of this project, not of the tool: its pytest plugin
# imports hypothesis at the end of every pytest process (about 1 s), in every variant alike.
NO_HYPOTHESIS = {"PYTEST_ADDOPTS": "-p no:hypothesispytest"}


def zoo_repo(folder: Path, extra: dict[str, str] | None = None) -> Path:
    """The zoo, its tests and config (reference: HEAD) committed in `folder / "repo"`, with
    `extra` files (relative path -> text) committed beside them."""
    repo = folder / "repo"
    for part in ("zoo", "tests/regression"):
        shutil.copytree(PROJECT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    config = (PROJECT / "config.yaml").read_text().splitlines()
    (repo / "config.yaml").write_text("\n".join(
        "reference: HEAD" if line.startswith("reference:") else line for line in config) + "\n")
    files = {"tasks.py": "from regression.tasks import ns\n",
             "pyproject.toml": "[tool.pytest.ini_options]\n", **(extra or {})}
    return committed(repo, files, "zoo")


def committed(folder: Path, files: dict[str, str], message: str) -> Path:
    """`files` written into `folder`, which becomes a git repository of one commit."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    for command in (["init", "-q"], ["add", "-A"],
                    ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", message]):
        subprocess.run(["git", *command], cwd=folder, check=True)
    return folder
