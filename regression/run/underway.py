"""Record and check at once: the check run starts the recording of what it lacks and goes
on; each case it reaches waits only for its own reference, handed over as soon as the
recording stores it (run/handoff.py). On a machine with a free core the two runs overlap.

What a case is checked against is proven the reference's only when the recording ends (the
subject's origin, the files it read): the check run then waits for it, and a recording
that fails makes the run an error, whatever its cases' verdicts.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from regression.errors import ReadOnlyError, RegressionError
from regression.revision import prune_stale_worktrees, reference_worktree
from regression.run.generation import generate, in_context, nothing_recordable, planned_locked, \
    project_in, read_only_plan, recording_args, require_all_ran, still_valid
from regression.run.handoff import Handoff
from regression.run.job import RecordJob
from regression.run.launch import let_finish, start_pytest, tail
from regression.run.types import Echo, Generation, Pending, Suite
from regression.store.cache import CaseRecord
from regression.store.scratch import scratch_folder


def start_generation(suite: Suite, force: bool, echo: Echo) -> Generation | Underway:
    """As `generate`, but what must be recorded is recorded while the caller goes on: the
    recording under way, or what was found when nothing is to be recorded. A suite recorded
    several times (determinism.repeat) or by several workers is recorded first, as before."""
    if suite.repeat > 1 or suite.workers > 1:
        return generate(suite, force, echo)
    prune_stale_worktrees(suite.reference.repo)
    todo = read_only_plan(suite, force)
    if todo == {}:
        suite.entry.touch()
        return Generation(reused=len(suite.cases))
    stack = ExitStack()
    try:
        stack.enter_context(suite.entry.lock())  # held until the recording ends
        result, todo = planned_locked(suite, force, echo)
        if not todo:
            suite.entry.touch()
            stack.close()
            return result
        echo(f"recording {len(todo)} of {len(suite.cases)} cases at {suite.reference.label}, "
             "each checked as soon as it is stored ...")
        return Underway(suite, todo, result, stack)
    except ReadOnlyError as exc:
        stack.close()
        raise nothing_recordable(suite, todo, exc) from None
    except BaseException:
        stack.close()
        raise


class Underway:
    """A recording in its own process, in a worktree of the reference, under the entry's
    lock, handing each case over as it is stored."""

    def __init__(self, suite: Suite, todo: dict[str, Pending], result: Generation,
                 stack: ExitStack) -> None:
        self.suite = suite
        self.todo = todo
        self.result = result
        self.stack = stack
        """The entry's lock, the worktree, the scratch folder: let go when it ends."""
        self.handed: set[str] = set()
        """The cases whose references were handed over: checked before they were proven."""
        self.ended: Generation | None = None
        self.error: RegressionError | None = None
        reference = suite.reference
        worktree = stack.enter_context(reference_worktree(reference.repo, reference.sha))
        folder = stack.enter_context(scratch_folder("record"))  # job, result, output
        self.job = RecordJob(
            reference, result=str(folder / "result.json"), parts=suite.entry.parts,
            subject_root=str(worktree / reference.settings.subject_path),
            cases={nodeid: p.harness for nodeid, p in todo.items()},
            workdir=str(project_in(reference, worktree)), handoff=-1)
        self.output = stack.enter_context(open(folder / "output.txt", "w+", encoding="utf-8"))
        self.child, self.handoff = self._start(folder)

    def _start(self, folder: Path) -> tuple[subprocess.Popen[str], Handoff]:
        """The recording's process, and the check run's end of the pipe it hands over on."""
        read_end, write_end = os.pipe()
        try:
            self.job = replace(self.job, handoff=write_end)
            child = start_pytest(self.suite.reference.settings,
                                 recording_args(self.suite.reference.settings), self.job,
                                 folder, self.output, write_end)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the child's copy alone: its end is the pipe's end
        return child, Handoff(os.fdopen(read_end, "rb"))

    def covers(self, nodeid: str) -> bool:
        """Whether this recording records the case (until it ended: then the entry has it)."""
        return nodeid in self.todo and self.ended is None

    def record_of(self, nodeid: str) -> CaseRecord | None:
        """The case's reference as the recording handed it over, waiting for it if need be;
        None once the recording ended without handing it over (the entry says the rest).
        The recording's error is raised here when it failed."""
        if self.error is not None:
            raise self.error
        if self.covers(nodeid):
            body = self.handoff.wait_for(nodeid, lambda: self.child.poll() is None)
            if body is not None:
                self.handed.add(nodeid)
                return self.suite.entry.staged_record(body)
            self.finish()
        return None

    def finish(self, interrupted: bool = False) -> Generation:
        """Wait for the recording to end: what it did, or its error, raised (each time
        asked). Its process, the worktree and the lock are let go either way."""
        if self.error is not None:
            raise self.error
        if self.ended is not None:
            return self.ended
        try:
            self.ended = self._ended(interrupted)
            return self.ended
        except RegressionError as exc:
            self.error = exc
            raise
        finally:
            self.handoff.close()
            self.stack.close()

    def _ended(self, interrupted: bool) -> Generation:
        child, reference = self.child, self.suite.reference
        if interrupted:
            let_finish(child, first=30.0)
        else:
            try:
                child.wait()
            except KeyboardInterrupt:
                let_finish(child, first=30.0)
                raise
        error, recorded = self.job.read_error(), self.job.read_result()
        if error is not None:
            raise in_context(reference, error)
        if recorded is None:
            self.output.seek(0)
            ran = subprocess.CompletedProcess(child.args, child.returncode, self.output.read())
            raise RegressionError(f"recording at {reference.label} stopped without a result "
                                  f"(exit {child.returncode}):\n{tail(ran)}")
        self.result.recorded = list(recorded.recorded)
        self.result.absent = dict(recorded.absent)
        if interrupted:
            kept = still_valid(self.suite.entry, self.job.cases)
            self.result.warnings.append(
                f"recording interrupted: {kept} of {len(self.todo)} cases were stored and "
                "are kept; `invoke gen` records the rest.")
        else:
            require_all_ran(self.todo, self.result)
        self.suite.entry.touch()
        return self.result
