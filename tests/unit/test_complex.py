"""Complex outputs (spectra from torch.stft, torch.fft): stored as their real view with the
complex dtype in the JSON structure, as values or as digests, through the cache's real files,
compared bit for bit, and reported part by part (real, imaginary)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from regression.compare.outputs import compare
from regression.errors import StoreError
from regression.nodes import tensor_names
from regression.plugin.fixture import CheckSink, RecordSink, Regression
from regression.store.cache import Entry
from regression.store.record import CaseRecord
from regression.store.codec import decode, digest_node
from regression.store.files import load_verified
from regression.store.digest import TensorDigest, digest_tensor, tensor_xxh3
from test_fixture import _tf32_off, current  # noqa: F401 - _tf32_off: an autouse fixture

NODEID = "tests/test_audio.py::test_spectrum"
DTYPES = [torch.complex32, torch.complex64, torch.complex128]
REAL_NAMES = {torch.complex32: "F16", torch.complex64: "F32", torch.complex128: "F64"}
pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")


def spectrum(dtype: torch.dtype = torch.complex64) -> torch.Tensor:
    """A small complex spectrum with both parts non-zero; complex32 made from complex64."""
    signal = torch.linspace(-1.0, 1.0, 16)
    return torch.fft.fft(signal.reshape(2, 8) ** 3).to(dtype)


def recorded(value: object, tmp_path: Path, store: str | None = None
             ) -> tuple[CaseRecord, dict[str, object]]:
    """A case recorded with check(value, store=store), saved in a real cache entry and
    loaded back; and the JSON record the entry wrote."""
    sink = RecordSink()
    Regression(NODEID, current(), sink).check(value, name="out", store=store)
    entry = Entry(tmp_path / "cache", {"part": "1"})
    entry.create()
    entry.save_case(CaseRecord(NODEID, "h", outputs=tuple(sink.outputs)))
    record = entry.load_case(NODEID)
    assert record is not None
    return record, load_verified(entry.case_path(NODEID))


def failure(record: CaseRecord, value: object) -> str | None:
    """Why check(value) against `record` fails; None when it is bit-identical."""
    sink = CheckSink(record, "v1")
    Regression(NODEID, current(), sink).check(value, name="out")
    return sink.failure()


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        torch.view_as_real(a.resolve_conj()).contiguous().view(torch.uint8),
        torch.view_as_real(b.resolve_conj()).contiguous().view(torch.uint8))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_complex_tensor_is_stored_as_its_real_view_under_its_dtype(
        dtype: torch.dtype, tmp_path: Path) -> None:
    record, body = recorded(spectrum(dtype), tmp_path)
    node = body["outputs"][0]["value"]  # type: ignore[index]
    name = str(dtype).removeprefix("torch.")
    assert node == {"complex": {"dtype": name, "view": {"tensor": "t0"}}}
    data = next((tmp_path / "cache").rglob("*.safetensors")).read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    assert header["t0"]["dtype"] == REAL_NAMES[dtype]
    assert header["t0"]["shape"] == [2, 8, 2]
    stored = record.outputs[0].value
    assert isinstance(stored, torch.Tensor) and bits_equal(stored, spectrum(dtype))
    assert failure(record, spectrum(dtype)) is None


VALUES: dict[str, Callable[[], object]] = {
    "0-d": lambda: torch.tensor(1.5 - 2.25j),
    "nested in a dict and tuple": lambda: {"stft": (spectrum(), spectrum(torch.complex128)),
                                           "power": spectrum().abs()},
    "non-contiguous": lambda: spectrum(torch.complex128).t()[::2],
    "conjugate bit": lambda: spectrum().conj(),
    "empty": lambda: torch.zeros(0, 3, dtype=torch.complex64),
    "stft": lambda: torch.stft(torch.linspace(-1, 1, 64) ** 2, 16,
                               window=torch.hann_window(16), return_complex=True),
}


@pytest.mark.parametrize("store", [None, "digest"])
@pytest.mark.parametrize("make", VALUES.values(), ids=VALUES.keys())
def test_complex_values_and_digests_are_identical_to_themselves(
        make: Callable[[], object], store: str | None, tmp_path: Path) -> None:
    record, body = recorded(make(), tmp_path, store)
    assert '"complex"' in json.dumps(body["outputs"])
    empty = make is VALUES["empty"]  # no bytes: kept as its (empty) values
    assert ('"digest"' in json.dumps(body["outputs"])) == (store == "digest" and not empty)
    assert failure(record, make()) is None


@pytest.mark.parametrize("store", [None, "digest"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_change_in_the_imaginary_part_alone_is_caught(
        dtype: torch.dtype, store: str | None, tmp_path: Path) -> None:
    record, _ = recorded({"x": (spectrum(dtype),)}, tmp_path, store)
    changed = spectrum(dtype)
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[changed.real.element_size()]
    changed.imag[1, 3].view(width).bitwise_xor_(1)  # one bit of one imaginary part
    assert bits_equal(torch.complex(changed.real.float(), torch.zeros(2, 8)),
                      torch.complex(spectrum(dtype).real.float(), torch.zeros(2, 8)))
    text = failure(record, {"x": (changed,)})
    assert text is not None
    name = str(dtype).removeprefix("torch.")
    if store == "digest":
        assert f"['x'][0]: {name}[2, 8]: its bytes differ from the reference's" in text
        assert "real and imaginary parts together: min" in text
    else:
        assert f"['x'][0]: {name}[2, 8]: 1 of 16 elements differ, in the imaginary part " \
               "only; max |diff|" in text and "at (1, 3)" in text
        assert "real part: bit-identical" in text
        assert "imaginary part: 1 of 16 elements differ" in text


def test_a_change_in_both_parts_is_reported_part_by_part() -> None:
    reference = torch.tensor([1 + 2j, 3 - 4j, 5 + 0j], dtype=torch.complex64)
    actual = reference.clone()
    actual.real[0] = 1.5
    actual.imag[0] = 2.25
    actual.imag[2] = -0.0  # a sign of zero: bits only
    (difference,) = compare(reference, actual)
    assert difference.differing == 2
    assert difference.max_abs == 0.5
    assert difference.detail.startswith(
        "complex64[3]: 2 of 3 elements differ, in both parts (real 1, imaginary 2); real part: "
        "max |diff| 0.5 at (0,) (reference 1.0, now 1.5); imaginary part: max |diff| 0.25 at "
        "(0,) (reference 2.0, now 2.25); ")
    lines = difference.report()
    assert "    real part: 1 of 3 elements differ; " in "\n".join(lines)
    assert "(2,): reference 0.0 (0x00000000), now -0.0 (0x80000000)" in "\n".join(lines)


def test_a_change_in_the_real_part_alone_names_the_real_part() -> None:
    reference = spectrum(torch.complex128)
    actual = reference.clone()
    actual.real[0, 0] += 1e-3
    (difference,) = compare(reference, actual)
    assert "in the real part only; max |diff| 0.001 at (0, 0)" in difference.detail
    assert "imaginary part: bit-identical" in difference.report()[-1]


@pytest.mark.parametrize("store", [None, "digest"])
def test_complex64_to_complex128_is_a_dtype_change(store: str | None, tmp_path: Path) -> None:
    record, _ = recorded(spectrum(), tmp_path, store)
    text = failure(record, spectrum(torch.complex128))
    assert text is not None and "dtype complex128[2, 8], reference complex64[2, 8]" in text
    text = failure(record, torch.view_as_real(spectrum()))  # the real view is not the value
    assert text is not None and "dtype float32[2, 8, 2], reference complex64[2, 8]" in text


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_complex_digest_hashes_the_real_views_bytes(dtype: torch.dtype) -> None:
    value = spectrum(dtype)
    digest = digest_tensor(value)
    view = torch.view_as_real(value)
    assert digest.dtype == str(dtype).removeprefix("torch.") and digest.shape == (2, 8)
    assert digest.xxh3 == tensor_xxh3(view) == tensor_xxh3(value)
    assert digest.real_view() == TensorDigest(REAL_NAMES[dtype], (2, 8, 2), digest.xxh3,
                                              digest_tensor(view).stats, (0, 0))
    assert digest_tensor(value.conj()).xxh3 == tensor_xxh3(value.conj().resolve_conj())
    assert digest_tensor(value.conj()).xxh3 != digest.xxh3


def test_a_complex_digest_round_trips_through_its_node() -> None:
    digest = digest_tensor(spectrum(torch.complex128))
    node = json.loads(json.dumps(digest_node(digest)))
    assert node["complex"]["dtype"] == "complex128"
    assert node["complex"]["view"]["digest"]["dtype"] == "F64"
    assert node["complex"]["view"]["digest"]["shape"] == [2, 8, 2]
    assert tensor_names(node) == []
    assert decode(node, {}) == digest


@pytest.mark.parametrize(("node", "words"), [
    ({"complex": {"dtype": "complex256", "view": {"tensor": "t0"}}}, "must hold exactly"),
    ({"complex": {"dtype": "complex64"}}, "must hold exactly"),
    ({"complex": {"dtype": "complex64", "view": {"none": True}}}, "not a 'none' node"),
    ({"complex": {"dtype": "complex64", "view": {"tensor": ""}}}, "a tensor name"),
    ({"complex": {"dtype": "complex64", "view": {"digest": digest_tensor(
        torch.ones(3, 2, dtype=torch.float64)).node()}}}, "must be F32 with a last dim of 2"),
    ({"complex": {"dtype": "complex64", "view": {"digest": digest_tensor(
        torch.ones(3, dtype=torch.float32)).node()}}}, "must be F32 with a last dim of 2"),
    ({"complex": {"dtype": "complex64", "view": {"digest": digest_tensor(
        torch.ones((), dtype=torch.float32)).node()}}}, "must be F32 with a last dim of 2"),
], ids=["dtype", "no-view", "view-kind", "view-name", "digest-dtype", "digest-shape", "0-d"])
def test_a_malformed_complex_node_is_refused(node: object, words: str) -> None:
    with pytest.raises(StoreError, match=words):
        tensor_names(node)


@pytest.mark.parametrize("view", [torch.ones(3, 2, dtype=torch.float64), torch.ones(3, 3),
                                  torch.ones(2)[0]], ids=["dtype", "last-dim", "0-d"])
def test_a_stored_view_that_cannot_be_the_complex_tensor_is_refused(view: torch.Tensor
                                                                    ) -> None:
    node = {"complex": {"dtype": "complex64", "view": {"tensor": "t0"}}}
    with pytest.raises(StoreError, match="complex64 tensor's real view is"):
        decode(node, {"t0": view})


def test_a_misaligned_complex128_view_from_a_file_is_read_by_value() -> None:
    data = bytearray(8 + 4 * 8)
    view = torch.frombuffer(data, dtype=torch.float64, count=4, offset=8).reshape(2, 2)
    view.copy_(torch.tensor([[1.0, 2.0], [3.0, -4.0]]))
    value = decode({"complex": {"dtype": "complex128", "view": {"tensor": "t0"}}}, {"t0": view})
    assert isinstance(value, torch.Tensor)
    assert bits_equal(value, torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex128))
