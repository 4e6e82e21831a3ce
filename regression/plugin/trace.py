"""Trace mode (`invoke explain`): every module call of the one wanted case is traced, and
its checked outputs go next to the trace, not to the cache."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from regression.store.record import Output

if TYPE_CHECKING:
    from regression.plugin.recording import Recording


class Trace:
    """A pytest plugin: traces the case's body, and writes its outputs as it ends."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.folder = Path(recording.job.trace)
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
        from regression.diagnose.trace_file import write_outputs

        recording = self.recording
        if self.problem or self.traced or nodeid not in recording.ran \
                or nodeid in recording.absent:
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
        recording = self.recording
        return {"recorded": [], "absent": {
            n: recording.absent.get(n) or recording.not_collected(n) or "it did not run"
            for n in recording.job.cases}}

    def discard(self) -> None:
        """Nothing to undo: the trace folder is the parent's, and read only on success."""

    def merged(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        recorded = sorted({n for d in results for n in d["recorded"]})
        absent = {k: v for d in results for k, v in d["absent"].items()}
        return {"recorded": recorded, "absent": absent}
