"""Adversarial outputs: tensors whose memory does not read as their values (lazy negative
and conjugate bits, complex ones too), views that share or repeat memory, tensors that require grad, and
layouts that cannot be stored. Each is stored and compared by value, bit for bit, through
the cache's real files, or refused with a message that names the output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from regression.store.record import CaseRecord
from regression.errors import StoreError
from regression.plugin.fixture import CheckSink, RecordSink, Regression
from test_fixture import _tf32_off, current, stored_and_loaded  # noqa: F401 - _tf32_off: an
# autouse fixture (TF32 and reduced-precision reductions off)

NODEID = "tests/test_model.py::test_values"
LABEL = "abc1234 (main)"


def checked(record: CaseRecord, value: object) -> str | None:
    """Why check(value) against `record` fails; None when it is bit-identical."""
    sink = CheckSink(record, LABEL)
    Regression(NODEID, current(), sink).check(value, name="out")
    return sink.failure()


def complex_pair() -> torch.Tensor:
    return torch.tensor([1 + 2j, 3 - 4j, -0.0 + 0.0j], dtype=torch.complex64)


VIEWS: dict[str, Callable[[], torch.Tensor]] = {
    "negative bit (z.conj().imag)": lambda: complex_pair().conj().imag,
    "negative bit, 0-d": lambda: torch.tensor(1 + 2j).conj().imag,
    "negative bit, empty": lambda: torch.zeros(0, dtype=torch.complex64).conj().imag,
    "negative bit, contiguous": lambda: torch._neg_view(torch.tensor([1.5, -0.0, 3.0])),
    "negative bit, transposed": lambda: torch.view_as_complex(
        torch.arange(24.0).reshape(3, 4, 2)).conj().imag.t(),
    "negative bit, float64": lambda: complex_pair().to(torch.complex128).conj().imag,
    "conjugate bit (z.conj())": lambda: complex_pair().conj(),
    "conjugate bit, transposed complex128": lambda: torch.view_as_complex(
        torch.arange(24.0, dtype=torch.float64).reshape(3, 4, 2)).conj().t(),
    "expanded (zero stride)": lambda: torch.arange(3.0).expand(4, 3),
    "0-d expanded": lambda: torch.tensor(-0.0).expand(5),
    "transposed": lambda: torch.arange(6.0).reshape(2, 3).t(),
    "strided slice": lambda: torch.arange(10.0)[::3],
    "requires grad": lambda: torch.linspace(-1, 1, 4, requires_grad=True) * 2,
}


@pytest.mark.parametrize("make", VIEWS.values(), ids=VIEWS.keys())
def test_a_view_is_stored_and_compared_by_its_values(make: Callable[[], torch.Tensor],
                                                     tmp_path: Path) -> None:
    value = make()
    record = stored_and_loaded(value, tmp_path)
    stored = record.outputs[0].value
    assert isinstance(stored, torch.Tensor)
    assert not stored.is_neg() and not stored.requires_grad
    assert torch.equal(stored, value.detach().resolve_neg())
    assert checked(record, make()) is None  # the same view again: identical


@pytest.mark.parametrize("make", [VIEWS["negative bit (z.conj().imag)"],
                                  VIEWS["negative bit, contiguous"],
                                  VIEWS["negative bit, 0-d"]],
                         ids=["conj-imag", "neg-view", "0-d"])
def test_a_negative_view_that_differs_is_changed_not_an_error(
        make: Callable[[], torch.Tensor], tmp_path: Path) -> None:
    record = stored_and_loaded(make(), tmp_path)
    now = make().detach().resolve_neg() + 1  # plain values, one more than recorded
    failure = checked(record, torch._neg_view(-now))  # the same values, read through a bit
    assert failure is not None and "output 'out' is not bit-identical" in failure


def test_a_negative_view_keeps_minus_zero_apart_from_zero(tmp_path: Path) -> None:
    record = stored_and_loaded(torch.tensor([0.0, 1.0]), tmp_path)
    failure = checked(record, torch._neg_view(torch.tensor([0.0, -1.0])))  # reads -0.0, 1.0
    assert failure is not None and "1 of 2 elements differ" in failure
    again = stored_and_loaded(torch._neg_view(torch.tensor([0.0, -1.0])), tmp_path / "again")
    assert checked(again, torch.tensor([-0.0, 1.0])) is None


def test_a_view_edited_after_check_keeps_what_was_checked(tmp_path: Path) -> None:
    base = complex_pair()
    view = base.conj().imag
    sink = RecordSink()
    Regression(NODEID, current(), sink).check(view, name="out")
    base.imag.mul_(10)  # the owner edits the memory the view reads
    stored = sink.outputs[0].value
    assert isinstance(stored, torch.Tensor)
    assert torch.equal(stored, torch.tensor([-2.0, 4.0, -0.0]))


@pytest.mark.parametrize(("make", "words"), [
    (lambda: torch.eye(3, dtype=torch.complex64).to_sparse(),
     "output 'out': cannot store a torch.sparse_coo tensor at <value>: safetensors stores "
     "only dense tensors; check value.to_dense() instead"),
    (lambda: torch.eye(3).to_sparse(),
     "output 'out': cannot store a torch.sparse_coo tensor at <value>: safetensors stores "
     "only dense tensors; check value.to_dense() instead"),
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
     "output 'out': cannot store a nested tensor at <value>"),
    (lambda: torch.empty(2, device="meta"),
     "output 'out': cannot store a meta tensor at <value>: it has no data"),
], ids=["complex-sparse", "sparse", "nested", "meta"])
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_what_cannot_be_stored_is_refused_naming_the_output(
        make: Callable[[], torch.Tensor], words: str) -> None:
    sink = RecordSink()
    with pytest.raises(StoreError) as refused:
        Regression(NODEID, current(), sink).check({"x": make()}, name="out")
    assert words.replace("<value>", "['x']") in str(refused.value)
    assert sink.outputs == []
