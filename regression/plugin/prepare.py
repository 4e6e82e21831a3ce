"""Before the first case of a check run: find the reference, pick the shard, record what
is missing. Runs inside the check process, so a warm run starts no other torch process."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from regression.store.cache import Entry
from regression.environment.fingerprint import environment_parts
from regression.environment.harness import HarnessDigests, extra_harness_files
from regression.run.job import GEN_NEVER, GEN_ONLY, CheckJob
from regression.run.generation import generate, require_valid
from regression.run.underway import Underway, start_generation
from regression.run.types import Echo, Generation, Reference, Suite, shard_cases
from regression.plugin.common import uses_fixture


@dataclass(frozen=True)
class Prepared:
    """What the check run knows once the reference is ready."""

    suite: Suite
    harness: HarnessDigests
    chosen: frozenset[str]
    """The regression cases of this run (its shard); each must run in a driven run."""
    others: bool
    """Whether tests that are no regression cases run too (no shard, or shard 1)."""
    generation: Generation | None
    underway: Underway | None = None
    """The recording of what was missing, when it goes on while the cases are checked."""

    @property
    def entry(self) -> Entry:
        return self.suite.entry

    @property
    def label(self) -> str:
        return self.suite.reference.label


def prepare(reference: Reference, job: CheckJob | None, items: list[pytest.Item],
            selected: set[str], rootdir: Path, echo: Echo, record: bool,
            overlap: bool = False, early: Underway | None = None) -> Prepared:
    """The suite of every collected case, narrowed to the shard; missing references recorded
    (only for cases that will run, unless `record` is off): first, or with `overlap` while
    the cases are checked (by `early`, a recording started before collection, if any)."""
    try:
        return _prepare(reference, job, items, selected, rootdir, echo, record, overlap,
                        early if overlap else None)
    finally:
        if early is not None and early.suite is None:  # not used: told no case, it ends
            early.cancel()


def _prepare(reference: Reference, job: CheckJob | None, items: list[pytest.Item],
             selected: set[str], rootdir: Path, echo: Echo, record: bool, overlap: bool,
             early: Underway | None) -> Prepared:
    settings = reference.settings
    harness = HarnessDigests(rootdir, extra_harness_files(settings.root, settings.harness))
    spec = job.shard if job else None
    chosen = shard_cases(settings, (i.nodeid for i in items if uses_fixture(i)), spec)
    cases = {i.nodeid: harness.of(i.path) for i in items if i.nodeid in chosen}
    entry = Entry(settings.cache_dir, environment_parts(settings, reference.code),
                  reference=reference.sha)
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
    elif record and runnable and overlap:
        started = start_generation(_narrowed(suite, runnable), bool(job and job.force), echo,
                                   early)
        if isinstance(started, Underway):
            return Prepared(suite, harness, frozenset(suite.cases),
                            spec is None or spec.index == 1, None, started)
        generation = started
    elif record and runnable:
        generation = generate(_narrowed(suite, runnable), force=bool(job and job.force),
                              echo=echo)
    return Prepared(suite, harness, frozenset(suite.cases), spec is None or spec.index == 1,
                    generation)


def _narrowed(suite: Suite, cases: dict[str, str]) -> Suite:
    return replace(suite, cases=cases)
