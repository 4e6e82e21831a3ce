"""The typed jobs and results cross to a child process and back whole: settings, reference,
results and errors, each field checked as it is read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from regression.config.settings import Determinism, Settings
from regression.errors import CacheWriteError
from regression.repository.gitcmd import Repository
from regression.declarations import Declaration
from regression.outcomes import CHANGED, DECLARED, ERROR, IDENTICAL, CaseOutcome
from regression.run.completion import Completion
from regression.run.job import GEN_ONLY, JOB_ENV, Beside, CheckJob, CollectJob, Job, RecordJob, \
    ReproduceJob, TraceJob, current_job
from regression.run.types import CheckResult, CollectResult, Generation, RecordResult, Reference
from regression.shard import ShardSpec


def _reference(tmp_path: Path) -> Reference:
    settings = Settings(path=tmp_path / "config.yaml", reference="v1",
                        subject_packages=("zoo", "extra"), tests=("tests", "more"),
                        references={"old": "v0"}, harness=("data/x.bin",),
                        determinism=Determinism(seed=3, threads=2, repeat=2), device="cuda",
                        fingerprint_packages=("numpy",), pins={"tests/*vit*": 2})
    return Reference(settings, Repository(str(tmp_path), str(tmp_path / ".git")), "v1",
                     "a" * 40, "subj tree " + "b" * 40)


def _jobs(tmp_path: Path) -> list[Job]:
    reference = _reference(tmp_path)
    result = str(tmp_path / "result.json")
    return [CollectJob(reference, result, subject_root="/c/zoo"),
            RecordJob(reference, result, "/w/zoo", parts={"torch": "2"}, cases={"t::a": "h"},
                      workers=2, full_values=True, beside=Beside(cases=5, handoff=6),
                      workdir="/w"),
            CheckJob(reference, result, shard=ShardSpec(2, 3), gen=GEN_ONLY, force=True,
                     workers=2, repeat=3, selection="-k vit",
                     declarations=(Declaration("t::a", ("out", "y"), "behaviour", "why",
                                               "b" * 40, 7),)),
            ReproduceJob(reference, result, "/w/zoo", parts={"torch": "2"},
                         cases={"t::a": "h"}, workers=2, workdir="/w"),
            TraceJob(reference, result, "/c/zoo", cases={"t::a": ""}, folder="/t")]


@pytest.mark.parametrize("index", range(5),
                         ids=["collect", "record", "check", "reproduce", "trace"])
def test_a_job_is_read_back_as_written_settings_and_reference_included(
        index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _jobs(tmp_path)[index]
    job.save(tmp_path / "job.json")
    monkeypatch.setenv(JOB_ENV, str(tmp_path / "job.json"))
    read = current_job()
    assert read == job and type(read) is type(job)
    assert read.settings == job.settings and read.config == str(tmp_path / "config.yaml")
    assert (read.reference, read.revision) == ("a" * 40, "v1")


RESULTS = [CollectResult({"t::a": "h1", "t::b": "h2"}, ["t::a"], {"torch": "2"}),
           RecordResult(["t::a"], {"t::b": "skipped"}, {"t::c": ["out"]}),
           CheckResult(Generation(1, ["t::a"], {"t::b": "gone"}, ["w"], {"t::a": "how"}),
                       Completion(1, 3, ["t::b: why"], (
                           CaseOutcome("t::a", CHANGED, "1 value differs", ("'y': 1 value",),
                                       "t.py", 4, float("inf")),
                           CaseOutcome("t::d", DECLARED, "d", ("'y': d",), "t.py", 9, 0.5,
                                       ("y",), "rounding-level", "why"),
                           CaseOutcome("t::c", ERROR, "boom\n  at line 2"),
                           CaseOutcome("t::d", IDENTICAL)), strict=True)),
           CheckResult()]


@pytest.mark.parametrize("index,result", [(0, RESULTS[0]), (1, RESULTS[1]), (2, RESULTS[2]),
                                          (2, RESULTS[3])])
def test_a_result_and_an_error_come_back_as_written(index: int, result: object,
                                                     tmp_path: Path) -> None:
    job = _jobs(tmp_path)[index]
    assert job.read_result() is None and job.read_error() is None
    job.write_result(result)  # type: ignore[arg-type]
    assert job.read_result() == result
    job.write_error(CacheWriteError("/c/entry", "cannot write", "free some room"))
    error = job.read_error()
    assert isinstance(error, CacheWriteError)
    assert (error.path, error.reason, error.fix) == ("/c/entry", "cannot write", "free some room")


@pytest.mark.parametrize("index,where,value", [
    (2, ("resolved", "settings", "determinism", "seed"), "3"),
    (2, ("resolved", "settings", "subject_packages"), "zoo"),
    (2, ("resolved", "repo", "working_dir"), None),
    (2, ("shard",), "2/3"),
    (2, ("force",), 1),
    (1, ("beside", "handoff"), "6"),
    (1, ("beside", "cases"), True),
    (1, ("verify",), True),  # a flag of old: a reproduce job is a kind of its own
    (1, ("trace",), "/t"),
])
def test_a_field_of_the_wrong_type_or_of_another_kind_is_named_however_deep(
        index: int, where: tuple[str, ...], value: object, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _jobs(tmp_path)[index].save(tmp_path / "job.json")
    data = json.loads((tmp_path / "job.json").read_text())
    inner = data
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    (tmp_path / "job.json").write_text(json.dumps(data))
    monkeypatch.setenv(JOB_ENV, str(tmp_path / "job.json"))
    with pytest.raises(Exception) as raised:
        current_job()
    assert f"field {'.'.join(where)!r} is unknown or of the wrong type" in str(raised.value)


def test_a_job_without_its_reference_or_with_an_unknown_policy_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JOB_ENV, str(tmp_path / "job.json"))
    (tmp_path / "job.json").write_text(json.dumps({"mode": "check", "result": "r"}))
    with pytest.raises(Exception, match="field 'resolved' is missing"):
        current_job()
    _jobs(tmp_path)[2].save(tmp_path / "job.json")
    data = json.loads((tmp_path / "job.json").read_text())
    (tmp_path / "job.json").write_text(json.dumps({**data, "gen": "sometimes"}))
    with pytest.raises(Exception, match="gen 'sometimes' is none of auto, never, only"):
        current_job()


def test_the_journal_holds_every_note_in_order_across_jobs_and_after_it_is_closed(
        tmp_path: Path) -> None:
    first = CheckJob(_reference(tmp_path), str(tmp_path / "first.json"))
    second = CheckJob(_reference(tmp_path), str(tmp_path / "second.json"))
    first.note("start a\nsplit")
    first.note("end a")
    second.note("start b")
    first.note("start c")
    first.close_journal()
    first.note("end c")
    second.close_journal()
    assert first.read_journal() == ["start a split", "end a", "start c", "end c"]
    assert second.read_journal() == ["start b"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_note_is_in_the_journal_even_if_the_process_ends_at_once(tmp_path: Path) -> None:
    job = CheckJob(_reference(tmp_path), str(tmp_path / "result.json"))
    job.note("start in the parent")  # a fork inherits the parent's descriptor
    child = os.fork()
    if child == 0:
        job.note("start t::a")
        os._exit(0)  # no flush, no atexit, no finally
    os.waitpid(child, 0)
    job.note("end in the parent")
    job.close_journal()
    assert job.read_journal() == ["start in the parent", "start t::a", "end in the parent"]
