"""Recordings forked from the fork server vs recordings in a new Python, side by side.

The same example zoo in two repositories: one as users set it up, one whose tasks.py loads a
module of the project, which keeps the check run from starting a fork server (it is not at
rest), so that each recording starts a new Python, as every recording did before the server.
Measured, interleaved, medians: a cold `invoke test` (one recording, beside the check) and
`invoke gen --force --repeat 3` (three recordings), wall time and the CPU of every process.

Usage: .venv/bin/python bench/fork_server_bench.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo_repo import NO_HYPOTHESIS, zoo_repo  # noqa: E402

TASKS = "from regression.tasks import ns\n"


def measured(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of every process it started) of `command`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        repos = {"server": zoo_repo(Path(folder) / "server"),
                 "new Python": zoo_repo(Path(folder) / "new", {
                     "local_tasks.py": "", "tasks.py": "import local_tasks  # noqa: F401\n"
                                                       + TASKS})}
        runs = {"cold invoke test": ["test"], "gen --force --repeat 3": [
            "gen", "--force", "--repeat", "3"]}
        samples: dict[tuple[str, str], list[tuple[float, float]]] = {
            (run, how): [] for run in runs for how in repos}
        for _ in range(rounds):
            for run, args in runs.items():
                for how, repo in repos.items():
                    cache = repo.parent / "cache"
                    if run.startswith("cold"):
                        shutil.rmtree(cache, ignore_errors=True)
                    env = {**os.environ, **NO_HYPOTHESIS, "REGRESSION_CACHE_DIR": str(cache),
                           "PYTHONDONTWRITEBYTECODE": "1"}
                    samples[(run, how)].append(measured(
                        [sys.executable, "-m", "invoke", *args], repo, env))
    print(f"example zoo (26 cases), median of {rounds} interleaved rounds:")
    for run in runs:
        wall = {how: statistics.median(w for w, _ in samples[(run, how)]) for how in repos}
        cpu = {how: statistics.median(c for _, c in samples[(run, how)]) for how in repos}
        print(f"  {run}: wall {wall['server']:.2f} s forked vs {wall['new Python']:.2f} s new "
              f"Python ({wall['server'] / wall['new Python']:.2f}x); CPU {cpu['server']:.2f} s "
              f"vs {cpu['new Python']:.2f} s ({cpu['server'] / cpu['new Python']:.2f}x)")


if __name__ == "__main__":
    main()
