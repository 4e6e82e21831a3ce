"""The `torch-regression` command (also `python -m regression`): set up a repository."""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path
from typing import Sequence

from regression.errors import RegressionError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="torch-regression",
        description="Bit-exact regression tests of PyTorch models against a git revision.")
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser(
        "init", help="write config.yaml, tasks.py, a starter test and a CI workflow here",
        description="Run at the top of your model library's repository. Writes config.yaml "
                    "(your packages, the newest tag as the reference), tasks.py, "
                    "tests/regression/test_regression.py and "
                    ".github/workflows/regression.yml; never over an existing file unless "
                    "--force.")
    init.add_argument("--force", action="store_true", help="overwrite files that exist")
    init.add_argument("--shards", type=int, default=None,
                      help="CI runners to split into (default: as the suite needs, from "
                           "recorded durations or the number of tests; 1 for a new suite)")
    init.add_argument("--python", default=platform.python_version(),
                      help="the exact Python version CI sets up (default: this one's, "
                           f"{platform.python_version()})")
    init.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                      help="where CI runs the cases: cuda writes device: cuda and a workflow "
                           "for a self-hosted GPU runner that installs the CUDA torch build")
    init.add_argument("--runner", default="",
                      help="the runner labels CI uses, comma-separated (default: ubuntu-latest,"
                           " or self-hosted,gpu with --device cuda)")
    options = parser.parse_args(argv)
    from regression.cli.init import init as write_files
    from regression.cli.workflow import Options

    chosen = Options(options.shards, options.python, options.device, options.runner)
    try:
        write_files(Path.cwd(), chosen, options.force, print)
    except RegressionError as exc:
        print(f"torch-regression: {exc}", file=sys.stderr)
        return 2
    return 0
