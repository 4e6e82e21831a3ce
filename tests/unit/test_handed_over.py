"""What the check run trusts of a recording still under way: a staged case handed over is
checked as a stored one is (store/cache.py `staged_record`), and whether the cache holds an
entry for the reference's subject code at all is told without torch (`names_code`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from regression.errors import StoreError
from regression.store.cache import Entry, names_code
from regression.store.record import ABSENT, CaseRecord, Output
from regression.store.cachedir import ENTRY_FILE

CODE_A, CODE_B = "subj tree " + "a" * 40, "subj tree " + "b" * 40
PARTS = {"format": "4", "subject code": CODE_A, "torch": "2.x", "threads": "1"}
NODEID = "tests/test_model.py::test_forward"


@pytest.fixture
def entry(tmp_path: Path) -> Entry:
    made = Entry(tmp_path / "cache", PARTS)
    made.create()
    return made


def _staged(entry: Entry) -> dict[str, object]:
    outputs = (Output("logits", torch.arange(6.0).reshape(2, 3)), Output("n", 3))
    body = entry.stage_case(CaseRecord(NODEID, "h1", outputs=outputs)).body
    return json.loads(json.dumps(body))  # as it crosses the pipe


def test_a_handed_over_case_reads_as_the_stored_one_will(entry: Entry) -> None:
    record = entry.staged_record(NODEID, _staged(entry))
    assert record.nodeid == NODEID and record.harness == "h1"
    assert torch.equal(record.outputs[0].value, torch.arange(6.0).reshape(2, 3))
    assert record.outputs[1].value == 3


def test_a_handed_over_absent_case_says_why(entry: Entry) -> None:
    body = entry.stage_case(CaseRecord(NODEID, "h1", status=ABSENT, reason="failed")).body
    record = entry.staged_record(NODEID, json.loads(json.dumps(body)))
    assert (record.status, record.reason, record.outputs) == (ABSENT, "failed", ())


@pytest.mark.parametrize("field, value", [("environment", "another"), ("nodeid", "t::other"),
                                          ("status", "made up"), ("outputs", "none")])
def test_a_hand_over_of_another_case_or_environment_or_malformed_is_refused(
        entry: Entry, field: str, value: str) -> None:
    body = {**_staged(entry), field: value}
    with pytest.raises(StoreError, match="hand-over of"):
        entry.staged_record(NODEID, body)


def test_a_tensor_file_changed_after_the_hand_over_is_refused(entry: Entry) -> None:
    body = _staged(entry)
    tensors = body["tensors"]
    assert isinstance(tensors, dict)
    path = entry.cases / tensors["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError):
        entry.staged_record(NODEID, body)


def test_names_code_finds_an_entry_of_the_subject_code_in_any_environment(
        entry: Entry, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert names_code(cache, CODE_A)
    assert not names_code(cache, CODE_B)
    Entry(cache, {**PARTS, "subject code": CODE_B, "torch": "other"}).create()
    assert names_code(cache, CODE_B)


def test_names_code_of_a_missing_cache_is_false(tmp_path: Path) -> None:
    assert not names_code(tmp_path / "nothing here", CODE_A)


def test_names_code_says_yes_when_an_entry_cannot_be_read(entry: Entry,
                                                               tmp_path: Path) -> None:
    """Unsure means no early recording: the run records as it always did."""
    (entry.directory / ENTRY_FILE).write_text("not verified json")
    assert names_code(tmp_path / "cache", CODE_B)


def test_names_code_skips_folders_without_an_identity(tmp_path: Path) -> None:
    (tmp_path / "cache" / "leftover").mkdir(parents=True)
    assert not names_code(tmp_path / "cache", "a" * 40)
