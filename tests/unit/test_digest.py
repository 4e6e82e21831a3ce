"""Tests of regression.store.digest and of tensors stored as digests: compared bit for bit,
stored without their values, read back as digests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from regression.compare.outputs import compare
from regression.errors import StoreError
from regression.nodes import tensor_names
from regression.plugin.fixture import CheckSink, snapshot
from regression.store.cache import Entry
from regression.store.record import CaseRecord, Output
from regression.store.digest import TensorDigest, digest_tensor, tensor_xxh3

LARGE = 1 << 20  # elements: 4 MiB of float32


def large() -> torch.Tensor:
    return torch.randn(LARGE, generator=torch.Generator().manual_seed(0)).reshape(1024, 1024)


@pytest.mark.parametrize("element", [0, 517_331, LARGE - 1])
@pytest.mark.parametrize("bit", [0, 22, 31])
def test_a_digest_catches_one_bit_changed_in_a_large_tensor(element: int, bit: int) -> None:
    reference = digest_tensor(large())
    changed = large()
    changed.view(-1).view(torch.int32)[element] ^= 1 << bit
    differences = compare(reference, changed)
    assert len(differences) == 1
    assert "its bytes differ from the reference's" in differences[0].detail
    assert "invoke test --full-values" in "\n".join(differences[0].report())
    assert compare(reference, large()) == []


def test_a_digest_compares_dtype_and_shape_before_bytes() -> None:
    reference = digest_tensor(torch.zeros(4, 4))
    assert "dtype float64[4, 4], reference float32[4, 4]" in str(
        compare(reference, torch.zeros(4, 4, dtype=torch.float64))[0])
    assert "shape float32[16], reference float32[4, 4]" in str(
        compare(reference, torch.zeros(16))[0])
    assert "dtype int32[4, 4]" in str(compare(reference, torch.zeros(4, 4, dtype=torch.int32))[0])


def test_a_digest_hashes_values_in_row_major_order_whatever_the_layout() -> None:
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert tensor_xxh3(values.t().contiguous().t()) == tensor_xxh3(values)
    assert tensor_xxh3(values.t()) != tensor_xxh3(values)  # other values in that order
    assert tensor_xxh3(-values) == tensor_xxh3(torch.neg(values).clone())  # lazy neg bit
    assert tensor_xxh3(torch.tensor([0.0])) != tensor_xxh3(torch.tensor([-0.0]))


def test_a_digest_summarises_the_values_it_does_not_keep() -> None:
    values = torch.tensor([1.0, 3.0, float("nan"), float("inf"), -float("inf")])
    digest = digest_tensor(values)
    assert digest.stats == (1.0, 3.0, 2.0, 1.0)
    assert digest.counts == (1, 2)
    assert digest.summary() == "min 1, max 3, mean 2, std 1, 1 NaN, 2 inf"
    assert digest_tensor(torch.tensor([float("nan")])).summary().startswith("min -, max -")


@pytest.mark.parametrize("values", [
    torch.randn(3 * LARGE + 5, generator=torch.Generator().manual_seed(0)),  # several pieces
    1 + torch.randn(5000, generator=torch.Generator().manual_seed(1)) * 1e-3,  # a norm's weight
    torch.ones(768),
    torch.randn(999, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16),
    torch.arange(-50, 1000, dtype=torch.int64),
    torch.tensor([3.0e38, 3.0e38, -1.0]),  # a sum that overflows, every value finite
], ids=["pieces", "near-one", "ones", "bfloat16", "int64", "huge"])
def test_a_digests_summary_matches_the_values_to_six_digits(values: torch.Tensor) -> None:
    """Summed in the values' own precision, not a float64 copy: still right to the digits
    the summary shows (a spread small beside the mean is measured from the mean)."""
    wide = values.to(torch.float64)
    digest = digest_tensor(values)
    assert digest.stats[:2] == (float(wide.min()), float(wide.max()))
    assert digest.stats[2] == pytest.approx(float(wide.mean()), rel=1e-6, abs=1e-6)
    assert digest.stats[3] == pytest.approx(float(wide.std(correction=0)), rel=1e-5, abs=1e-9)
    assert digest.counts == (0, 0)


def test_two_digests_compare_by_their_bytes() -> None:
    assert compare(digest_tensor(large()), digest_tensor(large())) == []
    other = large()
    other[3, 3] = 0.0
    assert len(compare(digest_tensor(large()), digest_tensor(other))) == 1


def test_a_digest_is_stored_without_its_values_and_read_back(tmp_path: Path) -> None:
    entry = Entry(tmp_path / "cache", {"format": "3"})
    entry.create()
    value = snapshot({"w": large(), "b": torch.ones(3)}, digest_above=1024)
    entry.save_case(CaseRecord("t.py::t", "h", outputs=(Output("init", value),)))
    stored = sum(p.stat().st_size for p in entry.cases.iterdir())
    assert stored < 4096  # the 4 MiB tensor is not there
    record = entry.load_case("t.py::t")
    assert record is not None and compare(record.outputs[0].value, value) == []
    assert record.outputs[0].value["w"] == value["w"]  # type: ignore[index]
    sink = CheckSink(record, "v1")
    changed = large()
    changed[0, 0] = 1.0
    sink.take("init", {"w": changed, "b": torch.ones(3)})
    assert [name for name, _ in sink.changed] == ["init"]
    assert "['w']" in (sink.failure() or "")


def _digest_node(**changes: object) -> dict[str, object]:
    node = digest_tensor(torch.ones(2)).node()
    return {"digest": {**node, **changes}}


@pytest.mark.parametrize("changes", [
    {"xxh3": "0" * 31}, {"dtype": "f32"}, {"shape": [-1]}, {"shape": [True]}, {"min": 1.0},
    {"nan": -1}, {"inf": False}, {"extra": 1}])
def test_a_malformed_digest_node_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(StoreError, match="digest node"):
        tensor_names(_digest_node(**changes))


def test_a_digest_node_round_trips_through_json() -> None:
    digest = digest_tensor(large())
    node = json.loads(json.dumps({"digest": digest.node()}))
    assert tensor_names(node) == []
    assert TensorDigest.from_node(node["digest"]) == digest
