"""Reproducing references (a reproduce job, `--repeat`): each case recorded again is
compared with what its first recording stored, as it ends, and let go."""

from __future__ import annotations

from typing import Any

from regression.errors import RegressionError
from regression.plugin.recording_run import RecordingRun
from regression.store.record import ABSENT, Output


class Reproducer:
    """A pytest plugin: the cases whose outputs differ from the stored ones, each with the
    names of those outputs (all of them if it no longer ran)."""

    digests = True

    def __init__(self, run: RecordingRun) -> None:
        self.run = run
        self.differ: dict[str, list[str]] = {}
        self.seen: set[str] = set()
        self.problem: RegressionError | None = None

    def case_done(self, nodeid: str, outputs: tuple[Output, ...]) -> None:
        if self.problem is not None:
            return
        now = outputs if nodeid in self.run.ran else ()
        try:
            self._compare(nodeid, {o.name: o.value for o in now})
        except RegressionError as exc:
            self.problem = exc

    def _compare(self, nodeid: str, now: dict[str, object]) -> None:
        from regression.compare.outputs import compare_outputs

        self.seen.add(nodeid)
        stored = self.run.entry().load_case(nodeid)
        if stored is None or stored.status == ABSENT:
            return
        before = {o.name: o.value for o in stored.outputs}
        names = sorted(name for name, _ in compare_outputs(before, now))
        if names:
            self.differ[nodeid] = names

    def result(self) -> dict[str, Any]:
        """The cases that differ; in one process, every case it did not run too. An xdist
        worker runs some of them: it says which it saw, and its controller compares what no
        worker ran (merged)."""
        if self.problem is not None:
            raise self.problem
        if self.run.worker:
            return {"differ": dict(self.differ), "seen": sorted(self.seen)}
        return self._unseen_compared()

    def _unseen_compared(self) -> dict[str, Any]:
        for nodeid in self.run.cases:
            if nodeid not in self.seen:
                self._compare(nodeid, {})
        return {"differ": {n: self.differ[n] for n in self.run.cases
                           if n in self.differ}}

    def discard(self) -> None:
        self.differ.clear()

    def merged(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        for each in results:
            self.differ.update(each["differ"])
            self.seen.update(each.get("seen", ()))
        return self._unseen_compared()
