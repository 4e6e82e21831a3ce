"""The references a check run needs, from before its collection to the end of the
recording: the one entry point of the check run (`NeededReferences`, handed to its plugins
from above). It finds the suite, picks the shard, decides whether what is missing is
recorded first or beside the check (`records_beside`, the one place), owns a recording
started before collection from its start to its cancel, and records a doubtful case again
alone. Runs inside the check process, so a warm run starts no other torch process."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from regression.errors import RegressionError
from regression.plugin.common import uses_fixture
from regression.plugin.state import ReadyReferences
from regression.run.job import GEN_AUTO, GEN_NEVER, GEN_ONLY, CheckJob

if TYPE_CHECKING:  # the rest loads once a run has regression cases: plain runs stay fast
    from regression.config.settings import Settings
    from regression.references.beside import RecordingBeside
    from regression.run.types import Echo, Generation, Reference, Suite


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
    """The references a check run needs: readies them before its first case, and owns the
    recording started before collection until the run uses or cancels it."""

    def __init__(self) -> None:
        self.early: RecordingBeside | None = None
        """A recording started before collection, until `ready` uses it or it is
        cancelled."""

    def start_early(self, job: CheckJob, settings: Settings, known: argparse.Namespace
                    ) -> None:
        """A run that will record every case beside the check (the cache has no entry for
        its reference: a CI runner's first run) starts the recording before conftests load
        (`known`: pytest's options known then), so that both processes start Python, torch
        and the subject at once; it is told its cases, and the environment's key, once
        they are known."""
        workers = bool(getattr(known, "numprocesses", None) or getattr(known, "tx", None))
        if job.gen != GEN_AUTO or getattr(known, "collectonly", False) \
                or getattr(known, "regression_no_gen", False) \
                or not records_beside(settings, job, in_worker=workers):
            return
        from regression.references.beside import RecordingBeside
        from regression.store.cache import names_code

        try:
            if not names_code(settings.cache_dir, job.resolved.code):
                self.early = RecordingBeside(job.resolved)
        except RegressionError:
            pass  # the run records as it would have, and says then what is wrong

    def cancel_early(self) -> None:
        """A recording started early that the run did not use ends, told no case."""
        if self.early is not None:
            self.early.cancel()
            self.early = None

    def ready(self, reference: Reference, job: CheckJob | None, items: list[pytest.Item],
              selected: set[str], rootdir: Path, echo: Echo, record: bool, in_worker: bool
              ) -> ReadyReferences:
        """The suite of every collected case, narrowed to the shard; missing references
        recorded (only for cases that will run, unless `record` is off): first, or beside
        the check (by the recording started early, if any)."""
        try:
            return _ready(reference, job, items, selected, rootdir, echo, record,
                          records_beside(reference.settings, job, in_worker), self.early)
        finally:
            early, self.early = self.early, None
            if early is not None and early.suite is None:  # not used: told no case, it ends
                early.cancel()

    def record_alone(self, suite: Suite, echo: Echo) -> Generation:
        """Record `suite`'s cases again, alone: after the check's cases have ended."""
        from regression.references.recorder import generate

        return generate(suite, echo=echo)


def _ready(reference: Reference, job: CheckJob | None, items: list[pytest.Item],
           selected: set[str], rootdir: Path, echo: Echo, record: bool, beside: bool,
           early: RecordingBeside | None) -> ReadyReferences:
    from regression.environment.fingerprint import environment_parts
    from regression.environment.harness import HarnessDigests, extra_harness_files
    from regression.references.beside import RecordingBeside, record_beside
    from regression.references.recorder import generate, require_valid
    from regression.run.types import Suite, shard_cases
    from regression.store.cache import KEEP_FOR_CHECK, Entry

    settings = reference.settings
    harness = HarnessDigests(rootdir, extra_harness_files(settings.root, settings.harness))
    spec = job.shard if job else None
    chosen = shard_cases(settings, (i.nodeid for i in items if uses_fixture(i)), spec)
    cases = {i.nodeid: harness.of(i.path) for i in items if i.nodeid in chosen}
    entry = Entry(settings.cache_dir, environment_parts(settings, reference.code),
                  reference=reference.sha, keep=KEEP_FOR_CHECK)
    subject_root = Path(job.subject_root) if job and job.subject_root else None
    suite = Suite(reference, dict(sorted(cases.items())), entry, spec, subject_root,
                  workers=job.workers if job else 0,
                  repeat=job.repeat if job and job.repeat else settings.determinism.repeat)
    if spec is not None:
        echo(f"shard {spec}: {len(suite.cases)} cases")
    runnable = {c: h for c, h in suite.cases.items() if c in selected}
    left_out = len(suite.cases) - len(runnable)
    if job is not None and job.selection:
        echo(f"{len(runnable)} of {len(suite.cases)} cases selected by {job.selection}")
    elif job is not None and job.gen == GEN_ONLY and left_out:
        echo(f"warning: {left_out} of {len(suite.cases)} cases deselected (-k, -m or "
             "--deselect in addopts or PYTEST_ADDOPTS) are not recorded")
    generation = None
    if job is not None and job.gen == GEN_NEVER:
        require_valid(_narrowed(suite, runnable))
    elif record and runnable and beside:
        started = record_beside(_narrowed(suite, runnable), bool(job and job.force), echo,
                                early)
        if isinstance(started, RecordingBeside):
            return ReadyReferences(suite, harness, frozenset(suite.cases),
                                   spec is None or spec.index == 1, None, started)
        generation = started
    elif record and runnable:
        generation = generate(_narrowed(suite, runnable), force=bool(job and job.force),
                              echo=echo)
    return ReadyReferences(suite, harness, frozenset(suite.cases),
                           spec is None or spec.index == 1, generation)


def _narrowed(suite: Suite, cases: dict[str, str]) -> Suite:
    return replace(suite, cases=cases)
