"""Tests of regression.store.codec: exact round trips of nested outputs, and refusals."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from crafted_files import CRAFTED, craft, entry
from regression.compare.outputs import compare
from regression.errors import StoreError
from regression.environment.fingerprint import digest
from regression.nodes import MAX_DEPTH, named_signature, path_label, tensor_names
from regression.store.codec import (
    Encoder,
    decode,
    tensors_from_file,
    save_tensors,
)
from regression.plugin.fixture import CheckSink, RecordSink, Regression
from regression.store.record import CaseRecord
from test_fixture import _tf32_off, current, stored_and_loaded  # noqa: F401 - _tf32_off: an
# autouse fixture (TF32 and reduced-precision reductions off)

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]


def sample(dtype: torch.dtype) -> torch.Tensor:
    """A tensor whose bits cover special values where the dtype has them."""
    if dtype == torch.bool:
        return torch.tensor([[True, False], [False, True]])
    if dtype.is_floating_point:
        values = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 1e-3]
        return torch.tensor(values, dtype=dtype).reshape(2, 4)
    info = torch.iinfo(dtype)
    return torch.tensor([info.min, -1 if info.min else 0, 0, 1, info.max], dtype=dtype)


def nested() -> object:
    return {
        "tensors": [sample(dtype) for dtype in DTYPES],
        "strided": torch.arange(12.0).reshape(3, 4).t(),
        "grad": torch.ones(3, requires_grad=True) * 2,
        "scalar": torch.tensor(7, dtype=torch.int16),
        "empty": torch.empty(0, 5),
        "numbers": (1, -(2**70), 0.1, -0.0, float("nan"), float("inf"), True, False),
        "text": ["", "x", "ünïcode"],
        "none": None,
        3: "int key",
        (1, "a"): {"deep": [(), []]},
    }


def round_trip(value: object) -> object:
    encoder = Encoder(prefix="t")
    node = encoder.encode(value)
    return decode(node, encoder.tensors)


def round_trip_through_bytes(value: object, tmp_path: Path) -> object:
    encoder = Encoder(prefix="t")
    node = encoder.encode(value)
    name, content_digest = save_tensors(tmp_path, "t", encoder.tensors)
    return decode(node, tensors_from_file(tmp_path / name, content_digest))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bitwise(dtype: torch.dtype, tmp_path: Path) -> None:
    tensor = sample(dtype)
    restored = round_trip_through_bytes(tensor, tmp_path)
    assert isinstance(restored, torch.Tensor)
    assert restored.dtype == dtype
    assert compare(tensor, restored) == []


def test_nested_value_round_trips_exactly_in_memory() -> None:
    value = nested()
    assert compare(value, round_trip(value)) == []


def test_nested_value_round_trips_exactly_through_a_file(tmp_path: Path) -> None:
    value = nested()
    assert compare(value, round_trip_through_bytes(value, tmp_path)) == []


def test_round_trip_keeps_python_types_and_key_order() -> None:
    value = {"b": (1, [2.5]), "a": None, 1: True}
    restored = round_trip(value)
    assert restored == value
    assert isinstance(restored, dict)
    assert list(restored) == ["b", "a", 1]
    assert type(restored["b"]) is tuple
    assert type(restored[1]) is bool


Heads = collections.namedtuple("Heads", "logits probs")


def test_a_namedtuple_round_trips_with_its_type_s_name_and_fields(tmp_path: Path) -> None:
    value = {"heads": Heads(torch.ones(2), (1, 2.5))}
    restored = round_trip_through_bytes(value, tmp_path)
    assert compare(value, restored) == []
    heads = restored["heads"]  # type: ignore[index]
    assert isinstance(heads, tuple) and named_signature(heads) == "Heads(logits, probs)"
    assert named_signature(round_trip(heads)) == "Heads(logits, probs)"  # stored again alike
    assert type(round_trip(torch.max(torch.ones(2, 2), 1))) is tuple  # no fields: a tuple


MALFORMED_NAMED = {
    "no fields": {"type": "T", "values": []},
    "a value without a field": {"type": "T", "fields": ["a"],
                                "values": [{"none": True}, {"none": True}]},
    "one field twice": {"type": "T", "fields": ["a", "a"], "values": [{"none": True}] * 2},
    "a type without a name": {"type": "", "fields": [], "values": []},
    "a field that is no name": {"type": "T", "fields": ["a b"], "values": [{"none": True}]},
    "values that are no list": {"type": "T", "fields": [], "values": {}},
}


@pytest.mark.parametrize("kind", list(MALFORMED_NAMED))
def test_a_malformed_named_node_is_refused(kind: str) -> None:
    with pytest.raises(StoreError, match="a named node"):
        tensor_names({"named": MALFORMED_NAMED[kind]})


def test_big_integers_and_float_bits_survive_json() -> None:
    value = [2**100, -(2**80), 0.1 + 0.2, -0.0, 5e-324]
    restored = round_trip(value)
    assert isinstance(restored, list)
    assert restored == value
    assert str(restored[3]) == "-0.0"


def test_decoded_tensors_are_dense_detached_cpu_copies() -> None:
    base = torch.arange(10.0, requires_grad=True)
    view = base[::2]
    encoder = Encoder(prefix="p")
    encoder.encode([view, base])
    stored = encoder.tensors["p0"]
    assert list(encoder.tensors) == ["p0", "p1"]
    assert stored.is_contiguous()
    assert not stored.requires_grad
    assert stored.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert stored.untyped_storage().nbytes() == 5 * 4


def test_zero_dimensional_and_empty_tensors_keep_their_shape(tmp_path: Path) -> None:
    restored = round_trip_through_bytes([torch.tensor(1.5), torch.empty(2, 0, 3)], tmp_path)
    assert [t.shape for t in restored] == [torch.Size([]), torch.Size([2, 0, 3])]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ([{"x": {1, 2}}], "builtins.set"),
        ([{"x": object()}], "builtins.object"),
        ([{"x": b"bytes"}], "builtins.bytes"),
    ],
)
def test_unsupported_value_names_its_type_and_path(value: object, kind: str) -> None:
    with pytest.raises(StoreError, match=r"cannot store .* at \[0\]\['x'\]") as info:
        Encoder(prefix="t").encode(value)
    assert kind in str(info.value)


def quantized() -> torch.Tensor:
    return torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)


def nested_tensor(layout: torch.layout) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=layout)


UNSTORABLE_TENSORS: dict[str, tuple[Callable[[], torch.Tensor], str, Callable[[torch.Tensor],
                                                                             object]]] = {
    "sparse_coo": (lambda: torch.eye(3).to_sparse(),
                   r"a torch.sparse_coo tensor at \[0\]\['x'\].*value.to_dense\(\)",
                   lambda t: t.to_dense()),
    "sparse_csr": (lambda: torch.eye(3).to_sparse_csr(),
                   r"a torch.sparse_csr tensor at \[0\]\['x'\].*value.to_dense\(\)",
                   lambda t: t.to_dense()),
    "quantized": (quantized,
                  r"a quantized tensor \(torch.quint8\) at \[0\]\['x'\].*value.dequantize\(\)"
                  r".*value.int_repr\(\)",
                  lambda t: [t.dequantize(), t.int_repr()]),
    "nested": (lambda: nested_tensor(torch.strided),
               r"a nested tensor at \[0\]\['x'\].*value.unbind\(\)"
               r".*torch.nested.to_padded_tensor\(value, 0.0\)",
               lambda t: [t.unbind(), torch.nested.to_padded_tensor(t, 0.0)]),
    "jagged": (lambda: nested_tensor(torch.jagged),
               r"a nested tensor at \[0\]\['x'\].*value.unbind\(\)",
               lambda t: t.unbind()),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: nested tensors are a prototype
@pytest.mark.parametrize("kind", list(UNSTORABLE_TENSORS))
def test_unstorable_tensor_names_its_kind_path_and_a_conversion_that_works(kind: str) -> None:
    make_tensor, message, convert = UNSTORABLE_TENSORS[kind]
    tensor = make_tensor()
    with pytest.raises(StoreError, match=message):
        Encoder(prefix="t").encode([{"x": tensor}])
    assert compare(round_trip(convert(tensor)), convert(tensor)) == []


def deep_list(levels: int) -> object:
    """[[...[1]...]]: the 1 sits `levels` lists deep."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_value_nested_to_the_depth_limit_round_trips() -> None:
    value = {"a": deep_list(MAX_DEPTH - 1)}
    assert compare(round_trip(value), value) == []


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 5000])
def test_value_nested_past_the_depth_limit_names_the_limit_and_where(levels: int) -> None:
    with pytest.raises(StoreError) as info:
        Encoder(prefix="t").encode(deep_list(levels))
    message = str(info.value)
    assert f"nested more than {MAX_DEPTH} levels deep" in message
    assert f"at [0][0][0][0]...[0][0] ({MAX_DEPTH + 1} levels)" in message


def test_list_that_contains_itself_is_refused_as_too_deep() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(StoreError, match="a list that contains itself never ends"):
        Encoder(prefix="t").encode(loop)


def test_dict_key_nested_past_the_depth_limit_is_refused() -> None:
    key: object = "k"
    for _ in range(3000):
        key = (key,)
    with pytest.raises(StoreError, match=f"nested more than {MAX_DEPTH} levels"):
        Encoder(prefix="t").encode({key: 1})


def test_int_too_long_for_text_is_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"the int at \[0\]: .* more digits.*hex\(value\)"):
        Encoder(prefix="t").encode([10 ** 5000])
    assert compare(round_trip([hex(10 ** 5000)]), [hex(10 ** 5000)]) == []


def test_every_encoded_value_passes_the_structure_check() -> None:
    encoder = Encoder(prefix="t")
    node = encoder.encode(nested())
    assert sorted(tensor_names(node)) == sorted(encoder.tensors)


def test_unknown_node_kind_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="unknown node kind 'set'"):
        decode({"set": []}, {})


def test_path_label_formats_nested_locations() -> None:
    assert path_label(()) == "<value>"
    assert path_label((0, "logits", (1, 2))) == "[0]['logits'][(1, 2)]"


def test_dtype_safetensors_cannot_store_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        save_tensors(tmp_path, "c", {"t0": torch.zeros(2, dtype=torch.complex128)})


def test_non_contiguous_tensor_given_directly_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="safetensors cannot store"):
        save_tensors(tmp_path, "n", {"t0": torch.zeros(2, 3).t()})
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone too


def test_saved_tensors_file_is_named_by_its_hash(tmp_path: Path) -> None:
    name, content_digest = save_tensors(tmp_path, "case", {"t0": torch.ones(3)})
    assert name == f"case.{content_digest[:16]}.safetensors"
    assert digest((tmp_path / name).read_bytes()) == content_digest
    assert [p.name for p in tmp_path.iterdir()] == [name]


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def safetensors_file(tmp_path: Path) -> tuple[Path, bytes]:
    name, _ = save_tensors(tmp_path, "x",
                           {"t0": torch.arange(16.0), "t1": torch.ones(3, dtype=torch.int8)})
    path = tmp_path / name
    return path, path.read_bytes()


def test_safetensors_round_trip_is_bitwise(tmp_path: Path) -> None:
    path, data = safetensors_file(tmp_path)
    tensors = tensors_from_file(path, digest(data))
    assert sorted(tensors) == ["t0", "t1"]  # safetensors does not keep the order of names
    assert compare([tensors["t0"], tensors["t1"]],
                   [torch.arange(16.0), torch.ones(3, dtype=torch.int8)]) == []


def test_flipped_byte_in_safetensors_file_is_detected(tmp_path: Path) -> None:
    path, data = safetensors_file(tmp_path)
    path.write_bytes(flip(data, len(data) - 5))
    with pytest.raises(StoreError, match="corrupt or truncated"):
        tensors_from_file(path, digest(data))


def test_truncated_safetensors_file_is_detected(tmp_path: Path) -> None:
    path, data = safetensors_file(tmp_path)
    path.write_bytes(data[:-4])
    with pytest.raises(StoreError, match="corrupt or truncated"):
        tensors_from_file(path, digest(data))


@pytest.mark.parametrize("cut", [5, 30, -4])
def test_unparsable_safetensors_with_matching_hash_is_a_store_error(
        tmp_path: Path, cut: int) -> None:
    path, data = safetensors_file(tmp_path)
    path.write_bytes(data[:cut])
    with pytest.raises(StoreError, match="not a valid safetensors file"):
        tensors_from_file(path, digest(data[:cut]))


def test_missing_safetensors_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is missing"):
        tensors_from_file(tmp_path / "absent.safetensors", "0" * 32)


def test_python_float_nan_sign_and_payload_survive() -> None:
    import struct

    negative_nan = struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]
    restored = round_trip([negative_nan, float("nan")])
    assert isinstance(restored, list)
    assert struct.pack(">d", restored[0]).hex() == "fff8000000000001"
    assert compare([negative_nan], [float("nan")]) != []


def test_meta_tensor_and_tensor_dict_key_are_store_errors() -> None:
    with pytest.raises(StoreError, match="meta tensor"):
        round_trip({"x": torch.empty(2, device="meta")})
    with pytest.raises(StoreError, match="dict key"):
        round_trip({torch.ones(1): 1})


ALL_DTYPES = [*DTYPES, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
              torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def various(dtype: torch.dtype) -> torch.Tensor:
    """Seeded bytes of every value, seen as `dtype` (bool: 0 and 1 only)."""
    generator = torch.Generator().manual_seed(1)
    raw = torch.randint(0, 256, (32,), dtype=torch.uint8, generator=generator)
    if dtype == torch.bool:
        return (raw % 2).to(torch.bool).reshape(2, 16)
    return raw.view(dtype).reshape(2, -1)


def same_bits(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(
        first[k].dtype == second[k].dtype and first[k].shape == second[k].shape
        and first[k].reshape(-1).view(torch.uint8).equal(second[k].reshape(-1).view(torch.uint8))
        for k in first)


def mixed() -> dict[str, torch.Tensor]:
    tensors = {f"t{i}": various(dtype) for i, dtype in enumerate(ALL_DTYPES)}
    tensors.update(empty=torch.empty(3, 0), scalar=torch.tensor(2.5, dtype=torch.float64),
                   odd=torch.ones(3, dtype=torch.int8))
    return tensors


def test_files_written_here_are_read_alike_by_the_safetensors_library(tmp_path: Path) -> None:
    from safetensors.torch import load, load_file

    tensors = mixed()
    name, _ = save_tensors(tmp_path, "x", tensors)
    assert same_bits(load_file(tmp_path / name), tensors)
    assert same_bits(load((tmp_path / name).read_bytes()), tensors)


def test_files_written_by_the_safetensors_library_are_read_alike(tmp_path: Path) -> None:
    from safetensors.torch import save

    tensors = mixed()
    data = save(tensors)
    (tmp_path / "x.safetensors").write_bytes(data)
    assert same_bits(tensors_from_file(tmp_path / "x.safetensors", digest(data)), tensors)


def test_read_tensors_are_views_of_one_buffer_in_file_order(tmp_path: Path) -> None:
    name, content_digest = save_tensors(tmp_path, "x", {"a": torch.ones(4, dtype=torch.float64),
                                                        "b": torch.arange(3.0)})
    tensors = tensors_from_file(tmp_path / name, content_digest)
    first, second = tensors["a"], tensors["b"]
    assert second.data_ptr() - first.data_ptr() == 4 * 8  # widest first, back to back
    assert first.data_ptr() % 8 == 0 and second.data_ptr() % 4 == 0
    del tensors
    second.add_(1)  # writable, and alive without the dict
    assert second.tolist() == [1.0, 2.0, 3.0]


def test_a_dtype_safetensors_cannot_name_is_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"'t0' is torch.float8_e8m0fnu, which safetensors has "
                                         r"no name for"):
        save_tensors(tmp_path, "e", {"t0": torch.zeros(2, dtype=torch.float8_e8m0fnu)})
    assert list(tmp_path.iterdir()) == []


def test_encoder_without_copy_keeps_views_and_still_refuses_bad_values() -> None:
    base = torch.arange(6.0, requires_grad=True)
    encoder = Encoder(prefix="v", copy=False)
    encoder.encode([base[::2]])
    view = encoder.tensors["v0"]
    assert not view.requires_grad
    assert view.data_ptr() == base.data_ptr() and view.stride() == (2,)
    with pytest.raises(StoreError, match="sparse"):
        Encoder(prefix="v", copy=False).encode(torch.eye(2).to_sparse())


@pytest.mark.parametrize("name", [n for n in CRAFTED if n != "valid"])
def test_crafted_files_with_matching_hash_are_refused(tmp_path: Path, name: str) -> None:
    data = CRAFTED[name]
    (tmp_path / "x.safetensors").write_bytes(data)
    with pytest.raises(StoreError, match="is not a valid safetensors file"):
        tensors_from_file(tmp_path / "x.safetensors", digest(data))


def test_crafted_valid_file_is_read(tmp_path: Path) -> None:
    data = CRAFTED["valid"]
    (tmp_path / "x.safetensors").write_bytes(data)
    assert tensors_from_file(tmp_path / "x.safetensors", digest(data))["a"].tolist() == [0.0, 0.0]


def test_misaligned_tensor_of_a_foreign_file_is_read_correctly(tmp_path: Path) -> None:
    values = torch.tensor([1.5, -2.0])
    data = craft({"a": entry("U8", [1], 0, 1), "b": entry("F32", [2], 1, 9)},
                 bytes([7]) + values.view(torch.uint8).numpy().tobytes())
    (tmp_path / "x.safetensors").write_bytes(data)
    tensors = tensors_from_file(tmp_path / "x.safetensors", digest(data))
    assert tensors["b"].tolist() == [1.5, -2.0] and tensors["b"].data_ptr() % 4 == 0


def test_a_header_parsed_again_gives_the_same_slots_and_its_own_list() -> None:
    from regression.store.tensorfile import build_header, parse_header

    header, slots = build_header([("a", "F32", (2, 3)), ("b", "I64", (4,))])
    size = max(slot.stop for slot in slots)
    first = parse_header(header[8:], size)
    first.clear()  # a caller's list: the next parse is not affected
    assert parse_header(header[8:], size) == slots
    with pytest.raises(ValueError):
        parse_header(header[8:], size + 1)  # the file size is part of what is checked


def test_a_header_seen_before_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cases of a suite store tensors of the same names and shapes: one parse serves all."""
    from regression.store import strictjson
    from regression.store.tensorfile import build_header, parse_header

    header, slots = build_header([("only_in_this_test", "F32", (5, 7))])
    size = max(slot.stop for slot in slots)
    assert parse_header(header[8:], size) == slots
    calls: list[object] = []
    real = strictjson.loads
    monkeypatch.setattr(strictjson, "loads", lambda *a: calls.append(a) or real(*a))
    assert parse_header(header[8:], size) == slots
    assert calls == []


# Outputs whose memory does not read as their values (lazy negative and conjugate bits,
# complex ones too), views that share or repeat memory, tensors that require grad, and layouts
# that cannot be stored. Each is stored by value, bit for bit, through the cache's real files
# and checked against the same view again, or refused with a message that names the output.
# (test_compare.py compares such views that differ.)


VALUES_NODEID = "tests/test_model.py::test_values"
LABEL = "abc1234 (main)"


def checked(record: CaseRecord, value: object) -> str | None:
    """Why check(value) against `record` fails; None when it is bit-identical."""
    sink = CheckSink(record, LABEL)
    Regression(VALUES_NODEID, current(), sink).check(value, name="out")
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


def test_a_view_edited_after_check_keeps_what_was_checked(tmp_path: Path) -> None:
    base = complex_pair()
    view = base.conj().imag
    sink = RecordSink()
    Regression(VALUES_NODEID, current(), sink).check(view, name="out")
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
        Regression(VALUES_NODEID, current(), sink).check({"x": make()}, name="out")
    assert words.replace("<value>", "['x']") in str(refused.value)
    assert sink.outputs == []
