"""Check mode's state in one process: its settings, job, ledger, the references it needs and
the relay, in one object each of its plugins is handed; and what they need of what records
those references (handed in from above: the plugin starts no process)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol

import pytest

from regression.errors import RegressionError
from regression.plugin.case_accounts import CaseAccounts
from regression.plugin.worker_messages import LINE, REFUSAL, WorkerMessages, attach
from regression.run.job import GEN_ONLY, CheckJob
from regression.run.types import CheckResult

if TYPE_CHECKING:
    from regression.config.settings import Settings
    from regression.environment.harness import HarnessDigests
    from regression.run.types import Echo, Generation, Reference, Suite
    from regression.store.cache import Entry
    from regression.store.record import CaseRecord

OUTCOME = "torch_regression_outcome"
"""A regression case's report carries its outcome so far to xdist's controller."""


class RecordingBeside(Protocol):
    """What check mode's plugins need of the recording that runs beside the check."""

    suite: Suite | None
    handed: set[str]
    """The cases whose references were handed over: checked before they were proven."""
    note: str
    """What the user must know of how it ended (interrupted: what was kept)."""

    def running(self) -> bool: ...

    def covers(self, nodeid: str) -> bool: ...

    def record_of(self, nodeid: str, say: Echo) -> CaseRecord | None: ...

    def finish(self, interrupted: bool = False) -> Generation: ...

    def taken_from_recording(self) -> list[str]: ...


@dataclass(frozen=True)
class ReadyReferences:
    """The references of the check run once they are ready (recorded, or being recorded
    beside the run)."""

    suite: Suite
    harness: HarnessDigests
    chosen: frozenset[str]
    """The regression cases of this run (its shard); each must run in a driven run."""
    others: bool
    """Whether tests that are no regression cases run too (no shard, or shard 1)."""
    generation: Generation | None
    beside: RecordingBeside | None = None
    """The recording of what was missing, while it goes on beside the check."""

    @property
    def entry(self) -> Entry:
        return self.suite.entry

    @property
    def label(self) -> str:
        return self.suite.reference.label


class Recorder(Protocol):
    """What records the references a check run needs (references/needed.py), handed in
    from above: the one owner of a recording started before collection."""

    def start_early(self, job: CheckJob, settings: Settings, known: argparse.Namespace
                    ) -> None: ...

    def cancel_early(self) -> None: ...

    def ready(self, reference: Reference, job: CheckJob | None, items: list[pytest.Item],
              selected: set[str], rootdir: Path, echo: Echo, record: bool, in_worker: bool,
              modules: Iterable[str] = ()) -> ReadyReferences: ...

    def record_alone(self, suite: Suite, echo: Echo) -> Generation: ...


class CheckState:
    """Check mode's state in one process; each of its plugins is handed it."""

    def __init__(self, config: pytest.Config, job: CheckJob | None, recorder: Recorder) -> None:
        self.config = config
        self.job = job
        """Set when invoke started this run: the resolved reference, shard and gen policy."""
        self.recorder = recorder
        self.ledger = CaseAccounts()
        self.references: ReadyReferences | None = None
        """The references this run checks against, once they are ready."""
        self.subject_root = Path(job.subject_root).resolve() if job and job.subject_root \
            else None
        self.refusal = ""
        """Why the run stopped before any case ran (in xdist's controller: a worker's)."""
        self.compared = False
        """Whether a case of this process got the fixture: the subject's origin matters."""
        self._settings: Settings | None = job.settings if job is not None else None
        """config.yaml's: invoke read it and handed it over in the job, or read once here."""
        self._device_ready = False
        self._determinism_applied = False
        self.relay: WorkerMessages = attach(config, self._relayed)

    @property
    def label(self) -> str:
        return self.references.label if self.references else ""

    @property
    def gen_only(self) -> bool:
        return self.job is not None and self.job.gen == GEN_ONLY

    @cached_property
    def strict(self) -> bool:
        """--regression-strict, read once: it is asked of every case."""
        return bool(self.config.getoption("regression_strict"))

    def read_settings(self) -> Settings:
        """config.yaml's settings, read once per process (the job's where invoke drove the
        run); its error raised."""
        if self._settings is None:
            from regression.config.settings import load_settings
            from regression.config.paths import find_config

            self._settings = load_settings(find_config(self.config.rootpath))
        return self._settings

    @property
    def settings(self) -> Settings:
        """config.yaml's settings, once read."""
        assert self._settings is not None
        return self._settings

    def settings_if_any(self) -> Settings | None:
        """config.yaml's settings, or None where there is no usable one (plain pytest in a
        project without it): for hints, never an error."""
        try:
            return self.read_settings()
        except RegressionError:
            return None

    def prepare_device(self) -> None:
        """The device's settings, once per process, before torch starts CUDA: its variables
        are part of the key."""
        if not self._device_ready:
            from regression.environment import determinism

            determinism.prepare_process(self.read_settings().device)
            self._device_ready = True

    def apply_determinism(self) -> None:
        """The determinism settings (seeds, threads, algorithms), once per process before
        the first case (the first call takes seconds); each case is seeded again as it
        starts."""
        if not self._determinism_applied:
            from regression.environment import determinism

            self.prepare_device()
            determinism.apply(self.read_settings().determinism)
            self._determinism_applied = True

    def take_beside(self) -> RecordingBeside | None:
        """The recording beside the run, now the caller's to end: the run's references
        hold it no more."""
        if self.references is None or self.references.beside is None:
            return None
        beside = self.references.beside
        self.references = replace(self.references, beside=None)
        return beside

    def recorded(self, generation: Generation) -> None:
        """What the recording of this run's references did, once it ended."""
        assert self.references is not None
        self.references = replace(self.references, generation=generation)

    def write_result(self) -> None:
        """The job's result, for the invoke task: what the recording did."""
        if self.job is not None:
            references = self.references
            self.job.write_result(CheckResult(references.generation if references else None))

    def _relayed(self, kind: str, text: str) -> None:
        """xdist's controller: a worker's line is shown; its refusal stops the run."""
        if kind == REFUSAL:
            self.refusal = self.refusal or text
        elif kind == LINE:
            self.relay.echo(text)
