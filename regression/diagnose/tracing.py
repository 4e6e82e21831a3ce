"""invoke explain's runs: the one case it is asked about, traced at the reference and in
the working tree, each in a process of its own."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from regression.errors import CollectionError, RegressionError
from regression.run.api import collect, matching_cases
from regression.references.needed import NeededReferences, Wanted
from regression.run.types import Reference, Suite
from regression.selection import unknown_case
from regression.diagnose.trace import Trace, read_trace

if TYPE_CHECKING:
    from regression.diagnose.explain import Explanation

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
    from regression.store.cache import Entry

    traces, references = [], NeededReferences()
    # a trace stores nothing: its entry is never opened
    suite = Suite(reference, {nodeid: ""}, Entry(reference.settings.cache_dir, {}))
    for working_tree in (False, True):
        where = "in the working tree" if working_tree else f"at {reference.label}"
        echo(f"tracing {nodeid} {where} ...")
        side = folder / ("working-tree" if working_tree else "reference")
        side.mkdir()
        absent = references.obtain(Wanted(suite, "trace", folder=side,
                                          working_tree=working_tree), echo).absent
        if absent:
            fix = f"; `pytest '{nodeid}'` shows the whole error" if working_tree else \
                "; choose another --reference"
            raise RegressionError(f"{nodeid} cannot be traced {where}: {absent[nodeid]}{fix}")
        traces.append(read_trace(side))
    return traces[0], traces[1]


def write_page(path: Path, case: str, reference: str, traces: tuple[Trace, Trace],
               found: Explanation, lines: list[str]) -> None:
    """`invoke explain --html`: the page, with every call's difference read from the traces
    (so before they are removed), written where the user asked."""
    from regression.diagnose.explain import call_rows
    from regression.diagnose.html import page

    text = page(case, reference, found, call_rows(*traces), lines)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        why = ("a part of its folder is a file" if isinstance(exc, (FileExistsError,
               NotADirectoryError)) else exc.strerror or str(exc))
        raise RegressionError(f"--html {path}: cannot be written ({why}); name a file in a "
                              "folder you can write") from None
