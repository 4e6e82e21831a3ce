"""The references a run needs, got through one entry point, `NeededReferences.obtain`: the
check run's (which reaches it through `ready` and `record_alone`, handed to its plugins from
above), `--full-values`' (`record_values`), bisect's at each commit and explain's traces.
What differs is data (`Wanted`): which revision and cases (a suite), and how they are got.
`records_beside` is the one place that decides whether what a check run lacks is recorded
first or beside it; the object owns the recording beside from its start to its cancel. The
check run's object lives in the check process, so a warm run starts no other torch process."""

from __future__ import annotations

import argparse
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Literal, Sequence

from regression.errors import ReadOnlyError, RegressionError
from regression.run.job import GEN_AUTO, GEN_NEVER, GEN_ONLY, CheckJob
from regression.run.types import Generation, Suite

if TYPE_CHECKING:  # the rest loads once a run has regression cases: plain runs stay fast
    import pytest

    from regression.config.settings import Settings
    from regression.environment.harness import HarnessDigests
    from regression.plugin.state import ReadyReferences
    from regression.references.beside import RecordingBeside
    from regression.run.types import Echo, Reference

How = Literal["first", "beside", "stored", "reproduce", "values", "trace"]


@dataclass(frozen=True)
class Wanted:
    """What a caller wants of the references: the suite's cases at its reference, got as
    `how` says. first: what lacks a valid reference is recorded, then returned; beside: it
    is recorded while the caller goes on (the check run), each case handed over as it is
    stored; stored: nothing is recorded, a case without a valid reference is an error;
    reproduce: recorded once more, those that differ stored as nondeterministic; values:
    recorded keeping every tensor's values (the caller stores the digests again); trace:
    every module call traced into `folder`, nothing cached."""

    suite: Suite
    how: How = "first"
    force: bool = False
    """first, beside: record every case again, valid or not."""
    folder: Path | None = None
    """trace: where the trace goes."""
    working_tree: bool = False
    """trace: the working tree's subject, not the reference's."""


def records_beside(settings: Settings, job: CheckJob | None, in_worker: bool) -> bool:
    """Whether what a check run must record is recorded beside its cases, each checked as
    soon as it is stored, rather than first: where config.yaml lets it, in a run that is
    no `invoke gen` and no xdist worker, by a recording in one process that records each
    case once (several recordings, or workers, record first)."""
    repeat = job.repeat if job is not None and job.repeat else settings.determinism.repeat
    workers = job.workers if job is not None else 0
    return (settings.record_beside_check and not (job is not None and job.gen == GEN_ONLY)
            and not in_worker and repeat <= 1 and workers <= 1)


class NeededReferences:
    """The references a run needs, each got by `obtain`; owns the recording beside the
    check run from its start (before collection, or by `obtain`) until `ready` hands it to
    the run's references, or cancels it."""

    def __init__(self) -> None:
        self.beside: RecordingBeside | None = None
        """The recording beside the check run, until `ready` hands it over or it is
        cancelled."""

    def start_early(self, job: CheckJob, settings: Settings, known: argparse.Namespace
                    ) -> None:
        """A run that will record every case beside the check (the cache has no entry for
        its reference: a CI runner's first run) starts the recording before conftests load
        (`known`: pytest's options known then), so that both processes start Python, torch
        and the subject at once; it is told its cases, and the environment's key, once
        they are known (it checks the key against its own)."""
        workers = bool(getattr(known, "numprocesses", None) or getattr(known, "tx", None))
        if job.gen != GEN_AUTO or getattr(known, "collectonly", False) \
                or getattr(known, "regression_no_gen", False) \
                or not records_beside(settings, job, in_worker=workers):
            return
        from regression.references.beside import RecordingBeside
        from regression.store.cache import names_code

        try:
            if not names_code(settings.cache_dir, job.resolved.code):
                self.beside = RecordingBeside(job.resolved)
        except RegressionError:
            pass  # the run records as it would have, and says then what is wrong

    def cancel_early(self) -> None:
        """A recording started early that the run did not use ends, told no case."""
        if self.beside is not None:
            self.beside.cancel()
            self.beside = None

    def ready(self, reference: Reference, job: CheckJob | None, items: list[pytest.Item],
              selected: set[str], rootdir: Path, echo: Echo, record: bool, in_worker: bool,
              modules: Iterable[str] = ()) -> ReadyReferences:
        """The suite of every collected case, narrowed to the shard; missing references
        recorded (only for cases that will run, unless `record` is off): first, or beside
        the check (by the recording started early, if any). `modules`: the test files
        collected, one that yields no test too (whose collection at the reference is kept
        as well)."""
        from regression.plugin.state import ReadyReferences

        try:
            settings = reference.settings
            loads = not in_worker and not (job is not None and job.gen == GEN_ONLY)
            suite, harness = _suite(reference, job, items, rootdir, loads, modules)
            spec = suite.shard
            if spec is not None:
                echo(f"shard {spec}: {len(suite.cases)} cases")
            runnable = {c: h for c, h in suite.cases.items() if c in selected}
            left_out = len(suite.cases) - len(runnable)
            if job is not None and job.selection:
                echo(f"{len(runnable)} of {len(suite.cases)} cases selected by {job.selection}")
            elif job is not None and job.gen == GEN_ONLY and left_out:
                echo(f"warning: {left_out} of {len(suite.cases)} cases deselected (-k, -m or "
                     "--deselect in addopts or PYTEST_ADDOPTS) are not recorded")
            how: How = "stored" if job is not None and job.gen == GEN_NEVER else \
                "beside" if records_beside(settings, job, in_worker) else "first"
            generation = None
            if how == "stored" or (record and runnable):
                generation = self.obtain(Wanted(replace(suite, cases=runnable), how,
                                                bool(job and job.force)), echo)
            beside = self.beside if self.beside is not None and self.beside.suite else None
            return ReadyReferences(suite, harness, frozenset(suite.cases),
                                   spec is None or spec.index == 1,
                                   None if how == "stored" or beside else generation, beside)
        finally:
            if self.beside is not None and self.beside.suite is None:  # told no case: it ends
                self.beside.cancel()
            self.beside = None

    def record_alone(self, suite: Suite, echo: Echo) -> Generation:
        """Record `suite`'s cases again, alone: after the check's cases have ended."""
        return self.obtain(Wanted(suite), echo)

    def obtain(self, wanted: Wanted, echo: Echo) -> Generation:
        """The one entry point for getting references: `wanted.suite`'s cases, got as
        `wanted.how` says; what was reused, recorded, absent and nondeterministic."""
        from regression.references.recorder import require_valid

        if wanted.how == "stored":
            require_valid(wanted.suite)
            return Generation(reused=len(wanted.suite.cases))
        if wanted.how in ("first", "beside"):
            return self._missing(wanted, echo)
        return _again(wanted, echo)

    def _missing(self, wanted: Wanted, echo: Echo) -> Generation:
        """first and beside: what lacks a valid reference, recorded. Planning reads only, so
        a read-only cache (a restored CI cache, a shared mount) holding every case serves.
        Only when something must be recorded is the entry's lock taken, and the plan made
        again under it: a concurrent run of the same key waits, then finds the work done.
        Beside, the recording (`self.beside`, started early or now) is handed what is
        missing and holds the lock until it ends."""
        from regression.references.beside import RecordingBeside
        from regression.references.recorder import nothing_recordable, planned_locked, \
            read_only_plan, record_missing
        from regression.repository.worktree import prune_stale_worktrees

        suite = wanted.suite
        prune_stale_worktrees(suite.reference.repo)  # git's bookkeeping, not the cache
        todo = read_only_plan(suite, wanted.force)
        if todo == {}:
            suite.entry.touch()  # a hint for pruning; skipped where the cache is read-only
            return Generation(reused=len(suite.cases))
        try:
            with ExitStack() as held:
                held.enter_context(suite.entry.lock())
                result, todo = planned_locked(suite, wanted.force, echo)
                if not todo:
                    suite.entry.touch()
                    return result
                beside = wanted.how == "beside"
                echo(f"recording {len(todo)} of {len(suite.cases)} cases at "
                     f"{suite.reference.label}" + (", each checked as soon as it is stored ..."
                                                   if beside else " ..."))
                if beside:
                    self.beside = self.beside or RecordingBeside(suite.reference)
                    self.beside.begin(suite, todo, result, held.pop_all())
                    return result
                return record_missing(suite, todo, result, held, echo)
        except ReadOnlyError as exc:
            raise nothing_recordable(suite, todo, exc) from None


def _suite(reference: Reference, job: CheckJob | None, items: list[pytest.Item],
           rootdir: Path, loads: bool, modules: Iterable[str] = ()
           ) -> tuple[Suite, HarnessDigests]:
    """The check run's suite: every collected case of its shard, with its harness digest,
    and the cache entry of its key (which keeps what its plan verified for the loads, where
    this process `loads` the cases: not in `invoke gen`, nor in an xdist worker, which plans
    every case and runs some)."""
    from regression.environment.fingerprint import environment_parts
    from regression.environment.harness import HarnessDigests, extra_harness_files
    from regression.plugin.common import collection_conditions, pytest_settings, uses_fixture
    from regression.run.types import shard_cases
    from regression.store.cache import KEEP_FOR_CHECK, Entry

    settings = reference.settings
    harness = HarnessDigests(rootdir, extra_harness_files(settings.root, settings.harness),
                             pytest_settings(items[0].config) if items else "")
    spec = job.shard if job else None
    regression = [i for i in items if uses_fixture(i)]
    chosen = shard_cases(settings, (i.nodeid for i in regression), spec)
    files = {i.nodeid.split("::", 1)[0]: harness.of(i.path) for i in regression}
    files.update({m: harness.of(rootdir / m) for m in modules if m not in files})
    cases = {i.nodeid: files[i.nodeid.split("::", 1)[0]] for i in regression
             if i.nodeid in chosen}
    entry = Entry(settings.cache_dir, environment_parts(settings, reference.code),
                  reference=reference.sha, keep=KEEP_FOR_CHECK if loads else 0)
    subject_root = Path(job.subject_root) if job and job.subject_root else None
    return Suite(reference, dict(sorted(cases.items())), entry, spec, subject_root,
                 workers=job.workers if job else 0,
                 repeat=job.repeat if job and job.repeat else settings.determinism.repeat,
                 files=files, conditions=collection_conditions(items[0].config) if items
                 else ""), harness


def _again(wanted: Wanted, echo: Echo) -> Generation:
    """reproduce, values and trace: every case of the suite recorded once more, in a
    worktree of the reference (or, for a trace, the working tree), under the entry's lock
    but for a trace, which caches nothing."""
    from regression.references.recorder import find_nondeterministic, record_cases, \
        record_job, run_recording
    from regression.repository.worktree import reference_worktree
    from regression.run.job import TraceJob

    suite, how, result = wanted.suite, wanted.how, Generation()
    reference = suite.reference
    with ExitStack() as held:
        if how != "trace":
            held.enter_context(suite.entry.lock())
        root = reference.settings.root if wanted.working_tree else \
            held.enter_context(reference_worktree(reference.repo, reference.sha))
        if how == "trace":
            traced = run_recording(reference, record_job(
                TraceJob, reference, root, working_tree=wanted.working_tree,
                cases=suite.cases, folder=str(wanted.folder)), echo, wanted.working_tree)
            return Generation(recorded=list(traced.recorded), absent=dict(traced.absent))
        if how == "values":
            result.recorded = list(record_cases(suite, root, suite.cases, echo,
                                                full_values=True).recorded)
            return result
        result.nondeterministic = find_nondeterministic(
            replace(suite, repeat=2), root, dict(suite.cases), echo)
        return result


@contextmanager
def record_values(reference: Reference, nodeids: Sequence[str], echo: Echo
                  ) -> Iterator[list[str]]:
    """`invoke test --full-values`: record again, keeping every tensor's values, the cases
    among `nodeids` whose stored reference keeps some only as a digest; yields those. The
    values are for this run's report only: on leaving, each case's digest-only record is
    stored again, so the cache entry keeps no values it was not asked to keep."""
    from regression.environment import determinism
    from regression.environment.fingerprint import environment_parts
    from regression.references.recorder import counted_cases
    from regression.store.cache import Entry

    settings = reference.settings
    determinism.prepare_process(settings.device)  # as the check run does: its key
    entry = Entry(settings.cache_dir, environment_parts(settings, reference.code),
                  reference=reference.sha)
    wanted = {n: h for n in nodeids if (h := entry.digested_harness(n)) is not None}
    kept = [record for n in wanted if (record := entry.load_case(n)) is not None]
    if not wanted:
        yield []
        return
    echo(f"recording the values of {counted_cases(len(wanted))} whose digests differ, at "
         f"{reference.label}, for this run's full report (the cache keeps their digests) ...")
    try:
        NeededReferences().obtain(Wanted(Suite(reference, wanted, entry), "values"), echo)
        yield sorted(wanted)
    finally:
        with entry.lock():
            for record in kept:
                entry.save_case(record)
        echo(f"the cache keeps the digests of {counted_cases(len(kept))} again: the values "
             "recorded for this report are not kept")
