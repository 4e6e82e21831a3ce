"""Before the first case of a check run: find the reference, pick the shard, record what
is missing. Runs inside the check process, so a warm run starts no other torch process."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import pytest

from regression.store.cache import Entry
from regression.config import Settings
from regression.durations import read_durations
from regression.fingerprint import environment_parts
from regression.harness import HarnessDigests, extra_harness_files
from regression.run.job import GEN_NEVER, GEN_ONLY, Job
from regression.revision import open_repo, resolve_revision
from regression.run.api import Generation, Reference, Suite, generate, require_valid
from regression.shard import parse_shard, select
from regression.plugin.common import uses_fixture

Echo = Callable[[str], None]


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

    @property
    def entry(self) -> Entry:
        return self.suite.entry

    @property
    def label(self) -> str:
        return self.suite.reference.label

    def generation_data(self) -> dict[str, object]:
        return asdict(self.generation) if self.generation else {}


def resolve(settings: Settings, job: Job | None, option: str | None) -> Reference:
    """The reference: the SHA the parent resolved, else --regression-reference or config."""
    repo = open_repo(settings.root)
    if job is not None:
        return Reference(settings, repo, job.revision, resolve_revision(repo, job.reference))
    revision = settings.revision_for(option)
    return Reference(settings, repo, revision, resolve_revision(repo, revision))


def shard_cases(settings: Settings, job: Job | None, items: list[pytest.Item]) -> set[str]:
    """The regression cases of this run's shard (all of them without one): the assignment
    depends only on the set of case ids, whatever pytest selected or in which order."""
    cases = sorted({i.nodeid for i in items if uses_fixture(i)})
    if job is None or not job.shard:
        return set(cases)
    return set(select(cases, parse_shard(job.shard), read_durations(settings.durations_file),
                      settings.pins))


def prepare(reference: Reference, job: Job | None, items: list[pytest.Item],
            selected: set[str], rootdir: Path, echo: Echo, record: bool) -> Prepared:
    """The suite of every collected case, narrowed to the shard; missing references recorded
    (only for cases that will run, unless `record` is off)."""
    settings = reference.settings
    harness = HarnessDigests(rootdir, extra_harness_files(settings.root, settings.harness))
    chosen = shard_cases(settings, job, items)
    cases = {i.nodeid: harness.of(i.path) for i in items if i.nodeid in chosen}
    entry = Entry(settings.cache_dir, environment_parts(settings, reference.sha))
    subject_root = Path(job.subject_root) if job and job.subject_root else None
    spec = parse_shard(job.shard) if job and job.shard else None
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
    elif record and runnable:
        generation = generate(_narrowed(suite, runnable), force=bool(job and job.force),
                              echo=echo)
    return Prepared(suite, harness, frozenset(suite.cases), spec is None or spec.index == 1,
                    generation)


def _narrowed(suite: Suite, cases: dict[str, str]) -> Suite:
    return replace(suite, cases=cases)
