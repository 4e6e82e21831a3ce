"""Whether a check run finished: the record it writes at its very end, and what the invoke
process concludes from it, whatever the exit code of the run's process."""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass, field

from regression.errors import RunIncompleteError
from regression.outcomes import CaseOutcome

START = "start "
END = "end "
"""Journal lines: a test started, a test ended (see Job.note)."""
SHOWN = 20


@dataclass(frozen=True)
class Completion:
    """What a check run says of itself as it ends."""

    status: int
    """pytest's exit status for the run."""
    expected: int
    """The regression cases the run was handed."""
    unjudged: list[str] = field(default_factory=list)
    """`nodeid: why` of each handed case that ended in no verdict."""
    outcomes: tuple[CaseOutcome, ...] = ()
    """Every judged case's outcome, as the run's ledger holds it (none in a run that only
    records): what the invoke process knows of the cases, as data."""
    strict: bool = False
    """--regression-strict: cases not in the reference and nondeterministic ones fail."""
    gone: tuple[str, ...] = ()
    """Cases declared removed that neither the run nor the reference collects: their
    declarations are stale (`invoke accept --prune` drops them)."""

    @property
    def failing(self) -> list[CaseOutcome]:
        """The cases that did not pass (see CaseOutcome.fails)."""
        return [o for o in self.outcomes if o.fails(self.strict)]

    def cases(self, outcome: str) -> list[str]:
        """The node ids of the cases that ended in `outcome`, in the order they were judged."""
        return [o.nodeid for o in self.outcomes if o.outcome == outcome]

    @property
    def passed(self) -> bool:
        return self.status == 0 and not self.unjudged and not self.failing


def settle(code: int, completion: Completion | None, journal: list[str]) -> int:
    """The exit code of a check run whose process ended with `code`: its own where the run's
    completion record agrees; RunIncompleteError where there is none (the process ended
    early), or where the record says the run did not pass and the process exited 0."""
    if completion is None:
        raise RunIncompleteError(ended_early(code, journal), code if code > 0 else 2)
    if code or completion.passed:
        return code
    raise RunIncompleteError(not_passed(completion), completion.status or 1)


def ended_early(code: int, journal: list[str]) -> str:
    """Why a run with no completion record does not pass, and where it ended."""
    running = still_running(journal)
    finished = sum(1 for line in journal if line.startswith(END))
    if running:
        where = f"while running {', '.join(running)}"
    elif finished:
        where = (f"after {finished} tests had ended, outside any test (in a hook, or the "
                 "teardown of a session-scoped fixture)")
    else:
        where = "before any test started (loading conftest.py files, collecting or recording)"
    fix = f"; `pytest '{running[0]}'` shows what happens there" if running else ""
    return (f"the check run ended before it finished: its process {_how(code)} {where}, "
            "without the record a run writes at its very end, so nothing says every case was "
            "judged and the run does not pass. os._exit(), sys.exit() outside a test, a "
            f"signal or a crash ends a run this way{fix}.")


def not_passed(completion: Completion) -> str:
    """Why a run whose process exited 0 does not pass: what its own record says."""
    lines = [f"the check run's process exited 0, but the run did not pass (pytest's exit "
             f"status {completion.status}); something changed its exit status (a conftest "
             "hook, an atexit handler?)"]
    if completion.unjudged:
        lines.append(f"{len(completion.unjudged)} of {completion.expected} cases it was meant "
                     "to check ended without a verdict:")
        lines += [f"  {line}" for line in completion.unjudged[:SHOWN]]
    if completion.failing:
        lines.append(f"{len(completion.failing)} cases did not pass:")
        lines += [f"  {o.outcome.upper()} {o.nodeid}" for o in completion.failing[:SHOWN]]
    return "\n".join(lines)


def still_running(journal: list[str]) -> list[str]:
    """The tests the journal says started and never ended, in the order they started."""
    open_count: Counter[str] = Counter()
    order: list[str] = []
    for line in journal:
        if line.startswith(START):
            nodeid = line[len(START):]
            open_count[nodeid] += 1
            order.append(nodeid)
        elif line.startswith(END):
            open_count[line[len(END):]] -= 1
    return list(dict.fromkeys(n for n in order if open_count[n] > 0))


def _how(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"
