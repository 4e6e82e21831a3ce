"""Peak memory of regression.check() on one big float32 output, as a multiple of its size.

Three scenarios, each run in its own process under GNU time (`/usr/bin/time -v`, which reports
the process's maximum resident set size):

- gen:     record mode: check() snapshots the output, then the case is stored in a cache
           entry (what the recording process does at its end).
- check:   check mode, output identical: the stored case is loaded and compared.
- changed: check mode, one element differs: the comparison finds and describes it.

Each scenario also runs as a baseline process that does everything else the same way (imports,
making the output tensor, for `changed` changing one element) but skips the check/record.
The ratio printed is

    (max RSS of the scenario - max RSS of its baseline) / size of the output tensor

i.e. how much memory check() and storing/loading the reference add on top of the output the
test already holds. The output tensor is float32 random values of --size MiB.

Usage: .venv/bin/python bench/memory_bench.py [--size MIB]   (default 1024: 1 GiB)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

GNU_TIME = Path("/usr/bin/time")
SCENARIOS = ("gen", "check", "changed")
NODEID = "tests/test_big.py::test_big"
PARTS = {"bench": "memory"}
MIB = 1 << 20


def output_tensor(size_mib: int, changed: bool) -> object:
    """The test's output: seeded float32 values, every page touched; one element changed."""
    import torch

    values = torch.rand(size_mib * MIB // 4, generator=torch.Generator().manual_seed(0))
    if changed:
        values[values.numel() * 2 // 3] += 1.0
    return values


def run_scenario(scenario: str, size_mib: int, cache_dir: Path, baseline: bool) -> None:
    """One scenario in this process: make the output, then (unless baseline) check it."""
    from regression.environment import determinism
    from regression.store.cache import Entry
    from regression.store.record import CaseRecord
    from regression.config.settings import Determinism
    from regression.plugin.fixture import CheckSink, RecordSink, Regression

    settings = Determinism()
    determinism.apply(settings)  # as the plugin does before each case
    entry = Entry(cache_dir, PARTS)
    value = output_tensor(size_mib, changed=scenario == "changed")
    if baseline:
        return
    if scenario == "gen":
        sink = RecordSink()
        Regression(NODEID, settings, sink).check(value)
        entry.create()
        entry.save_case(CaseRecord(NODEID, "harness", outputs=tuple(sink.outputs)))
        return
    record = entry.load_case(NODEID)
    assert record is not None, "run the gen scenario first"
    try:
        Regression(NODEID, settings, CheckSink(record, "bench")).check(value)
    except AssertionError as exc:
        if scenario != "changed":
            raise
        print(str(exc).splitlines()[-1].strip())
    else:
        assert scenario == "check", "the changed output compared equal"


def max_rss_bytes(scenario: str, size_mib: int, cache_dir: Path, baseline: bool) -> int:
    """Run one scenario in a child process under GNU time; its maximum RSS in bytes."""
    command = [str(GNU_TIME), "-v", sys.executable, __file__, "--child", scenario,
               "--size", str(size_mib), "--cache", str(cache_dir)]
    if baseline:
        command.append("--baseline")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{scenario} (baseline={baseline}) failed:\n{done.stdout}{done.stderr}")
    for line in done.stdout.splitlines():
        print(f"  {scenario}: {line}")
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if not found:
        sys.exit(f"no maximum resident set size in the output of GNU time:\n{done.stderr}")
    return int(found.group(1)) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="output size in MiB")
    parser.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        run_scenario(options.child, options.size, options.cache, options.baseline)
        return
    if not GNU_TIME.is_file():
        sys.exit(f"{GNU_TIME} is missing: this bench reads the maximum RSS from GNU time; "
                 "install it with `apt-get install time` (Debian/Ubuntu)")
    size = options.size * MIB
    print(f"output: float32, {options.size} MiB; ratio = (max RSS of the scenario - max RSS "
          "of the same process without the check/record) / output size", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for scenario in SCENARIOS:
            base = max_rss_bytes(scenario, options.size, Path(folder), baseline=True)
            peak = max_rss_bytes(scenario, options.size, Path(folder), baseline=False)
            print(f"{scenario:8} {(peak - base) / size:5.2f}x   (max RSS {peak / MIB:.0f} MiB, "
                  f"baseline {base / MIB:.0f} MiB)", flush=True)


if __name__ == "__main__":
    main()
