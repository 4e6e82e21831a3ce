"""Tests of regression.references.needed: the one place that decides whether what a check
run must record is recorded beside its cases or first, and the one entry point's `stored`,
which records nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.config.settings import Determinism, Settings
from regression.errors import CacheError
from regression.repository.gitcmd import Repository
from regression.references.needed import NeededReferences, Wanted, records_beside
from regression.run.job import GEN_AUTO, GEN_NEVER, GEN_ONLY, CheckJob
from regression.run.types import Reference, Suite
from regression.store.cache import Entry


def _settings(tmp_path: Path, beside: bool = True, repeat: int = 1) -> Settings:
    return Settings(path=tmp_path / "config.yaml", reference="v1", subject_packages=("zoo",),
                    determinism=Determinism(repeat=repeat), record_beside_check=beside)


def _job(settings: Settings, tmp_path: Path, **fields: object) -> CheckJob:
    reference = Reference(settings, Repository(str(tmp_path), str(tmp_path / ".git")), "v1",
                          "a" * 40, "c" * 40)
    return CheckJob(reference, str(tmp_path / "result.json"), **fields)  # type: ignore[arg-type]


def test_a_plain_run_and_a_driven_one_record_beside_where_config_yaml_lets_them(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert records_beside(settings, None, in_worker=False)
    assert records_beside(settings, _job(settings, tmp_path), in_worker=False)
    assert records_beside(settings, _job(settings, tmp_path, gen=GEN_NEVER), in_worker=False)
    assert not records_beside(_settings(tmp_path, beside=False), None, in_worker=False)


@pytest.mark.parametrize("fields", [{"gen": GEN_ONLY}, {"workers": 2}, {"repeat": 2}],
                         ids=["invoke gen", "record workers", "recorded twice"])
def test_gen_workers_and_repeated_recordings_record_first(tmp_path: Path,
                                                          fields: dict[str, object]) -> None:
    settings = _settings(tmp_path)
    assert not records_beside(settings, _job(settings, tmp_path, **fields), in_worker=False)


def test_config_yamls_repeat_records_first_unless_the_job_says_once(tmp_path: Path) -> None:
    settings = _settings(tmp_path, repeat=3)
    assert not records_beside(settings, None, in_worker=False)
    assert not records_beside(settings, _job(settings, tmp_path), in_worker=False)
    assert records_beside(settings, _job(settings, tmp_path, repeat=1, gen=GEN_AUTO),
                          in_worker=False)


def test_an_xdist_worker_records_first(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert not records_beside(settings, _job(settings, tmp_path), in_worker=True)
    assert not records_beside(settings, None, in_worker=True)


def test_stored_references_are_only_read_and_a_missing_one_names_invoke_gen(
        tmp_path: Path) -> None:
    """`invoke test --no-gen` through the one entry point: no lock, no entry, no recording."""
    settings = _settings(tmp_path)
    cache = tmp_path / "cache"
    suite = Suite(_job(settings, tmp_path).resolved, {"test_a.py::test_a": "h"},
                  Entry(cache, {"python": "3"}))
    said: list[str] = []
    with pytest.raises(CacheError, match="Run `invoke gen`"):
        NeededReferences().obtain(Wanted(suite, "stored"), said.append)
    assert not cache.exists() and said == []
