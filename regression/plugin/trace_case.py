"""Tracing a case (a trace job, `invoke explain`): every module call of the one wanted
case is traced, and its checked outputs go next to the trace, not to the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator

import pytest

from regression.plugin.recording_run import RecordingRun
from regression.run.job import TraceJob
from regression.store.record import Output


class CaseTracer:
    """A pytest plugin: traces the case's body, and writes its outputs as it ends."""

    digests = False  # the values themselves are explained

    def __init__(self, run: RecordingRun, job: TraceJob) -> None:
        self.run = run
        self.folder = Path(job.folder)
        self.problem = ""
        """Why the trace of the case stopped, if it did."""
        self.traced = ""
        """The case whose outputs are written."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """Every module call of the case's body goes into its trace."""
        from regression.diagnose.trace import Tracer

        with Tracer(self.folder, test=getattr(item, "obj", None)) as tracer:
            try:
                return (yield)
            finally:
                self.problem = tracer.problem

    def case_done(self, nodeid: str, outputs: tuple[Output, ...]) -> None:
        from regression.diagnose.trace import write_outputs

        run = self.run
        if self.problem or self.traced or nodeid not in run.ran \
                or nodeid in run.absent:
            return
        write_outputs(self.folder, {o.name: o.value for o in outputs})
        self.traced = nodeid

    def result(self) -> dict[str, Any]:
        if self.problem:
            disk = ("; a trace needs room for every module output of the case in the "
                    "temporary folder: point TMPDIR at a disk with more room"
                    if self.problem.startswith("OSError") else "")
            return {"error": "TraceError", "message": "the trace of the case stopped, so it "
                    f"cannot be explained: {self.problem}{disk}"}
        if self.traced:
            return {"recorded": [self.traced], "absent": {}}
        run = self.run
        return {"recorded": [], "absent": {
            n: run.absent.get(n) or run.not_collected(n) or "it did not run"
            for n in run.cases}}

    def discard(self) -> None:
        """Nothing to undo: the trace folder is the parent's, and read only on success."""

    def merged(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        recorded = sorted({n for d in results for n in d["recorded"]})
        absent = {k: v for d in results for k, v in d["absent"].items()}
        return {"recorded": recorded, "absent": absent}
