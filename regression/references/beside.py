"""Record and check at once: the check run starts the recording of what it lacks and goes
on; each case it reaches waits only for its own reference, handed over as soon as the
recording stores it (run/handoff.py). On a machine with a free core the two runs overlap.
Where the cache has no entry for the environment at all (a CI runner's first run), the
recording starts before the check run collects: both start Python, torch and the subject
at once, and the recording is told its cases once they are known.

What a case is checked against is proven the reference's only when the recording ends (the
subject's origin, the files it read): the check run then waits for it, and a recording
that fails makes the run an error, whatever its cases' verdicts.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import ExitStack
from dataclasses import replace

from regression.errors import RegressionError
from regression.repository.worktree import reference_worktree
from regression.references.recorder import outcome, record_job, recording_args, \
    require_all_ran, still_valid, store_collections
from regression.run import overlap
from regression.run.handoff import HandedOverCases, answer_shared, send_cases
from regression.run.job import Beside, RecordJob
from regression.run.launch import Started, before_exit, let_finish, start_pytest
from regression.run.types import Echo, Generation, Pending, Reference, Suite
from regression.store.record import CaseRecord
from regression.store.scratch import scratch_folder


class RecordingBeside:
    """The recording beside the check run: a recording in its own process, in a worktree of
    the reference, that collects at once and records the cases `begin` hands it, each handed
    over as it is stored."""

    def __init__(self, reference: Reference) -> None:
        self.reference = reference
        self.stack = ExitStack()
        """The worktree, the scratch folder, the pipes, then the entry's lock: let go
        when the recording ends."""
        self.suite: Suite | None = None
        self.todo: dict[str, Pending] = {}
        self.result = Generation()
        self.handed: set[str] = set()
        """The cases whose references were handed over: checked before they were proven."""
        self.ended: Generation | None = None
        self.error: RegressionError | None = None
        self.note = ""
        """What the user must know of how it ended (interrupted: what was kept)."""
        self.answers = -1
        """The pipe the cases went on: the answer to what the recording touched goes back."""
        self.touches = overlap.Touches([*overlap.tool_folders(reference.settings.cache_dir),
                                        reference.settings.path])
        """What this run touches while the recording runs beside it."""
        self.recording_touched: dict[str, list[str]] = {}
        """What the recording read and wrote outside its own folders, once it said so."""
        self.since = time.time()
        """When the two runs began to run at once (a file changed since may be shared)."""
        overlap.watch(self.touches)  # before the recording starts: everything it might see
        try:
            self.child, self.handoff, self.cases_pipe = self._start()
        except BaseException:
            overlap.stop(self.touches)
            self.stack.close()
            raise
        self.stack.callback(before_exit(self._abandon))
        self.stack.callback(self._close_answers)
        self.stack.callback(overlap.stop, self.touches)

    def _abandon(self) -> None:
        """The check run ends with the recording still under way (an error the plugins
        never saw): stop it, and let go of its worktree, folder and lock."""
        if self.running():
            self.error = RegressionError("the check run ended before its recording")
            self._stop(grace=0.0)

    def running(self) -> bool:
        """Whether the recording goes on: not ended, not failed."""
        return self.ended is None and self.error is None

    def _stop(self, grace: float) -> None:
        """Stop a recording that is let go: asked to end (SIGTERM), killed after `grace`
        seconds; then its worktree, folder and lock go."""
        self._close_cases()
        self.child.terminate()
        try:
            self.child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self.handoff.close()
        self.stack.close()

    def _start(self) -> tuple[Started, HandedOverCases, int]:
        """The recording's process; the check run's end of the pipe it hands cases over on,
        and of the one its cases go to it on."""
        reference, stack = self.reference, self.stack
        worktree = stack.enter_context(reference_worktree(reference.repo, reference.sha))
        folder = stack.enter_context(scratch_folder("record"))  # job, result, output
        self.output = stack.enter_context(open(folder / "output.txt", "w+", encoding="utf-8"))
        handoff_read, handoff_write = os.pipe()
        cases_read, cases_write = os.pipe()
        self.job = record_job(RecordJob, reference, worktree, result=str(folder / "result.json"),
                              beside=Beside(cases=cases_read, handoff=handoff_write))
        try:
            child = start_pytest(reference.settings, recording_args(reference.settings),
                                 self.job, folder, self.output, (handoff_write, cases_read))
        except BaseException:
            os.close(handoff_read)
            os.close(cases_write)
            raise
        finally:  # the child's copies alone: the pipes end with it, or with this process
            os.close(handoff_write)
            os.close(cases_read)
        stack.callback(self._close_cases)
        return child, HandedOverCases(handoff_read, self._touched), cases_write

    def _touched(self, touched: dict[str, object]) -> None:
        """The recording's cases have ended (the reader's thread): tell it what of what it
        touched this run wrote meanwhile; it stores nothing that may be this run's."""
        used = {k: [str(p) for p in v] for k, v in touched.items() if isinstance(v, list)}
        self.recording_touched = used
        answers, self.answers = self.answers, -1
        if answers >= 0:
            answer_shared(answers, overlap.taken_from(used, self.touches.data(), self.since))

    def _close_answers(self) -> None:
        if self.answers >= 0:
            os.close(self.answers)
            self.answers = -1

    def taken_from_recording(self) -> list[str]:
        """What this run used that the recording beside it wrote: its verdicts may rest on
        the reference's values."""
        return overlap.taken_from(self.touches.data(), self.recording_touched, self.since)

    def begin(self, suite: Suite, todo: dict[str, Pending], result: Generation,
              lock: ExitStack) -> None:
        """Hand the recording its cases; `lock` (the entry's) is held until it ends. Should
        that fail, the lock goes at once and the recording is its owner's to cancel."""
        self.todo, self.result = todo, result
        self.stack.enter_context(lock)
        try:
            cases = {nodeid: p.harness for nodeid, p in todo.items()}
            self.job = replace(self.job, cases=cases, parts=suite.entry.parts)
            pipe, self.cases_pipe = self.cases_pipe, -1  # the answer goes back on it
            # a thread: the recording reads its cases once it has collected, and a pipe
            # holds only so much
            self.answers = pipe
            overlap.note_native_readers()  # the tests have loaded torch and safetensors
            threading.Thread(target=send_cases, args=(pipe, cases, suite.entry.parts),
                             daemon=True, name="torch-regression cases").start()
        except BaseException:
            lock.close()
            raise
        self.suite = suite

    def _close_cases(self) -> None:
        """Close the pipe of the cases unsent: the recording is told no case."""
        if self.cases_pipe >= 0:
            os.close(self.cases_pipe)
            self.cases_pipe = -1

    def cancel(self) -> None:
        """Nothing is to be recorded after all: the recording, which has stored nothing and
        holds no lock, is stopped (whatever it was starting: conftests, torch) and let go."""
        if self.running():
            self.ended = Generation()
            self._stop(grace=10.0)

    def covers(self, nodeid: str) -> bool:
        """Whether this recording records the case (until it ended: then the entry has it)."""
        return nodeid in self.todo and self.ended is None

    def record_of(self, nodeid: str, say: Echo) -> CaseRecord | None:
        """The case's reference as the recording handed it over, waiting for it if need be
        (`say` tells the user when the wait is long); None once the recording ended without
        handing it over (the entry says the rest). The recording's error is raised here
        when it failed."""
        if self.error is not None:
            raise self.error
        if self.covers(nodeid) and self.suite is not None:
            def stalled(seconds: float) -> None:
                say(f"torch-regression: {nodeid} has waited {seconds:.0f} s for its reference, "
                    "and the recording beside this run has handed nothing over meanwhile: a "
                    "long case at the reference, or the two runs wait for each other (a lock, "
                    "a port or a device that your tests hold once per machine). "
                    "`record_beside_check: false` in config.yaml records first.")

            body = self.handoff.wait_for(nodeid, lambda: self.child.poll() is None,
                                         stalled=stalled)
            if body is not None:
                self.handed.add(nodeid)
                return self.suite.entry.staged_record(nodeid, body)
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
        child, reference, suite = self.child, self.reference, self.suite
        assert suite is not None, "finish() of a recording that was given no cases"
        if interrupted:
            let_finish(child, first=30.0)
        else:
            try:
                child.wait()
            except KeyboardInterrupt:
                let_finish(child, first=30.0)
                raise
        self.output.seek(0)
        recorded = outcome(reference, self.job, subprocess.CompletedProcess(
            child.args, child.wait(), self.output.read()))
        self.result.recorded = list(recorded.recorded)
        self.result.absent = dict(recorded.absent)
        self.result.doubtful = dict(recorded.doubtful)
        if interrupted:
            kept = still_valid(suite.entry, self.job.cases)
            self.note = (f"recording interrupted: {kept} of {len(self.todo)} cases were "
                         "stored and are kept; `invoke gen` records the rest.")
        else:
            require_all_ran(self.todo, self.result)
            store_collections(suite, recorded)
        suite.entry.touch()
        return self.result
