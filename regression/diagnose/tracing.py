"""invoke explain's runs: the one case it is asked about, traced at the reference and in
the working tree, each in a process of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from regression.errors import CollectionError, RegressionError
from regression.run.api import Reference, collect, matching_cases, trace_case
from regression.selection import unknown_case
from regression.diagnose.trace import Trace, read_trace

Echo = Callable[[str], None]


def pick_case(reference: Reference, case: str) -> str:
    """The one regression case `case` names: a node id, or a pytest -k expression that
    matches exactly one case. One collection either way."""
    if "::" in case:
        cases = collect(reference).cases
        if case not in cases:
            raise unknown_case(case, cases)
        return case
    try:
        matched = matching_cases(reference, case)
    except CollectionError as exc:
        wrong = [line for line in str(exc).splitlines() if "Wrong expression" in line]
        if not wrong:
            raise
        raise RegressionError(f"{wrong[0].removeprefix('ERROR: ')}\nGive a node id, or a "
                              "pytest -k expression such as 'test_forward and vit'") from None
    if len(matched) == 1:
        return matched[0]
    if not matched:
        raise RegressionError(f"no regression case matches -k {case!r}; give a node id as "
                              "`invoke shards --list` prints it, or another expression")
    listed = "\n  ".join(matched[:10]) + (f"\n  ... and {len(matched) - 10} more"
                                          if len(matched) > 10 else "")
    raise RegressionError(f"-k {case!r} matches {len(matched)} cases, and explain traces one:"
                          f"\n  {listed}\nNarrow the expression, or give one node id.")


def traced(reference: Reference, nodeid: str, folder: Path, echo: Echo) -> tuple[Trace, Trace]:
    """The case traced at the reference, then in the working tree, under `folder`."""
    traces = []
    for working_tree in (False, True):
        where = "in the working tree" if working_tree else f"at {reference.label}"
        echo(f"tracing {nodeid} {where} ...")
        side = folder / ("working-tree" if working_tree else "reference")
        side.mkdir()
        trace_case(reference, nodeid, side, working_tree, echo)
        traces.append(read_trace(side))
    return traces[0], traces[1]
