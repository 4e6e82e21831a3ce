"""Record mode's plugins by the job's kind: each kind of recording gets its own keeper, and
the state they share says why a wanted case is not in the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.config.settings import Settings
from regression.repository.gitcmd import Repository
from regression.plugin.recording_mode import keeper_for
from regression.plugin.recording_run import NOT_COLLECTABLE, RecordingRun
from regression.plugin.reproduce import Reproducer
from regression.plugin.store_cases import CaseStorer
from regression.plugin.trace_case import CaseTracer
from regression.run.job import RecordingJob, RecordJob, ReproduceJob, TraceJob
from regression.run.types import Reference


def _reference(tmp_path: Path) -> Reference:
    settings = Settings(path=tmp_path / "config.yaml", reference="v1", subject_packages=("zoo",))
    return Reference(settings, Repository(str(tmp_path), str(tmp_path / ".git")), "v1",
                     "a" * 40, "zoo tree " + "b" * 40)


@pytest.mark.parametrize("kind,options,keeper,digests", [
    (RecordJob, {}, CaseStorer, True),
    (RecordJob, {"full_values": True}, CaseStorer, False),
    (ReproduceJob, {}, Reproducer, True),
    (TraceJob, {"folder": "/t"}, CaseTracer, False),
], ids=["record", "record-full-values", "reproduce", "trace"])
def test_each_kind_of_recording_has_its_keeper_which_says_whether_values_are_digested(
        kind: type[RecordingJob], options: dict[str, object], keeper: type, digests: bool,
        tmp_path: Path) -> None:
    job = kind(_reference(tmp_path), cases={"t.py::a": "h"}, **options)  # type: ignore[arg-type]
    found = keeper_for(RecordingRun(job), job)
    assert type(found) is keeper
    assert found.digests is digests


def test_a_case_not_collected_is_said_to_be_missing_or_to_fail_collecting(
        tmp_path: Path) -> None:
    run = RecordingRun(RecordJob(_reference(tmp_path), cases={"t/a.py::x": "h"}))
    assert run.not_collected("t/a.py::x") == ""  # nothing collected: nothing known
    run.collected = {"t/b.py::y"}
    assert run.not_collected("t/b.py::y") == ""
    assert run.not_collected("t/a.py::x") == "does not exist at the reference"
    run.collect_errors["t"] = "SyntaxError"
    assert run.not_collected("t/a.py::x") == f"{NOT_COLLECTABLE}SyntaxError"
    assert run.not_collected("u/c.py::z") == "does not exist at the reference"


def test_only_a_trace_leaves_where_a_case_failed_to_its_explanation(tmp_path: Path) -> None:
    reference = _reference(tmp_path)
    assert RecordingRun(RecordJob(reference)).where == " at the reference"
    assert RecordingRun(ReproduceJob(reference)).where == " at the reference"
    assert RecordingRun(TraceJob(reference, folder="/t")).where == ""
