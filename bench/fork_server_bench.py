"""Recordings forked from the fork server vs recordings in a new Python, side by side.

The same example zoo in two repositories: one as users set it up, one whose tasks.py loads a
module of the project, which keeps the check run from starting a fork server (it is not at
rest), so that each recording starts a new Python, as every recording did before the server.
Measured, interleaved, medians: a cold `invoke test` (one recording, beside the check),
`invoke gen --force --repeat 3` (a recording, then two repeats, which are new Pythons in
both: a repeat must be a new process), and two runs whose xdist workers are
forks of the server or new Pythons: a warm `invoke test --workers 2` (no recording) and
`invoke gen --force --workers 2` (a recording and its workers); wall time and the CPU the
machine spent (every process: run it on an otherwise idle machine).

Usage: .venv/bin/python bench/fork_server_bench.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
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


def busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (Linux /proc/stat): a forked recording's
    parent is the fork server, whose own parent does not wait for it, so the time of this
    process's children would leave both out. Nothing else should run meanwhile."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def measured(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the whole machine) of `command`."""
    before = busy_seconds()
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    time.sleep(0.2)  # a server still ending
    return wall, busy_seconds() - before


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
            "gen", "--force", "--repeat", "3"],
            "warm test --workers 2": ["test", "--workers", "2"],
            "gen --force --workers 2": ["gen", "--force", "--workers", "2"]}
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
