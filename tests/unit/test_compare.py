"""Tests of regression.compare.outputs: every kind of bitwise difference, and none for equal
values."""

from __future__ import annotations

import collections
import math
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from regression.compare.outputs import Difference, compare, compare_tensors
from regression.plugin.fixture import snapshot
from regression.compare.tensordiff import pieces as _pieces
from test_fixture import _tf32_off, stored_and_loaded  # noqa: F401 - _tf32_off: an autouse
# fixture (TF32 and reduced-precision reductions off), as check() needs
from test_store import VIEWS, checked


def only(differences: list[Difference]) -> Difference:
    assert len(differences) == 1, differences
    return differences[0]


def nan_with_payload(payload: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]
    return value


@pytest.mark.parametrize(
    "value",
    [
        torch.arange(12, dtype=torch.float32).reshape(3, 4),
        torch.tensor(3.5),
        torch.empty(0, 3),
        [1, 2.5, "x", None, True],
        (torch.ones(2), {"a": [torch.zeros(1)]}),
        {"b": 1, "a": (2, 3)},
        float("nan"),
        -0.0,
        None,
    ],
    ids=["tensor", "0-d", "empty", "list", "nested", "dict", "nan", "minus-zero", "none"],
)
def test_identical_values_have_no_differences(value: object) -> None:
    twin = value.clone() if isinstance(value, torch.Tensor) else value
    assert compare(value, twin) == []


def test_dtype_difference_is_reported_without_element_counts() -> None:
    difference = only(compare(torch.zeros(2), torch.zeros(2, dtype=torch.float64)))
    assert difference.detail == "dtype float64[2], reference float32[2]"
    assert difference.differing == 0


def test_shape_difference_is_reported() -> None:
    difference = only(compare(torch.zeros(2, 3), torch.zeros(3, 2)))
    assert difference.detail == "shape float32[3, 2], reference float32[2, 3]"


def test_one_changed_element_reports_count_size_and_index() -> None:
    reference = torch.zeros(2, 3)
    actual = reference.clone()
    actual[1, 2] = 5.0
    difference = only(compare(reference, actual))
    assert difference.differing == 1
    assert difference.max_abs == 5.0
    assert difference.detail == ("float32[2, 3]: 1 of 6 elements differ; max |diff| 5 at (1, 2) "
                                 "(reference 0.0, now 5.0); "
                                 "up to 4.19e+07 ULPs at its scale: changed behaviour, "
                                 "far beyond rounding")


def test_largest_change_is_the_one_reported() -> None:
    reference = torch.zeros(4)
    actual = torch.tensor([0.5, 0.0, -3.0, 1.0])
    difference = only(compare(reference, actual))
    assert difference.differing == 3
    assert difference.max_abs == 3.0
    assert "at (2,)" in difference.detail


def test_name_replaces_the_value_placeholder() -> None:
    difference = only(compare([torch.zeros(1)], [torch.ones(1)], name="'logits'"))
    assert difference.path == "'logits'[0]"
    assert str(difference).startswith("'logits'[0]: float32[1]: 1 of 1")


def test_minus_zero_differs_from_zero_in_a_tensor() -> None:
    difference = only(compare(torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0])))
    assert difference.differing == 1
    assert difference.max_abs == 0.0
    assert "at (0,)" in difference.detail


def test_minus_zero_differs_from_zero_as_python_float() -> None:
    assert only(compare(0.0, -0.0)).detail == "-0.0, reference 0.0"


def test_nan_with_the_same_bits_is_identical_in_a_tensor() -> None:
    reference = torch.tensor([float("nan"), 1.0])
    assert compare(reference, reference.clone()) == []


def test_nan_with_other_payload_differs_in_a_tensor() -> None:
    reference = torch.tensor([nan_with_payload(1)], dtype=torch.float64)
    actual = torch.tensor([nan_with_payload(2)], dtype=torch.float64)
    assert math.isnan(actual.item())
    assert only(compare(reference, actual)).differing == 1


def test_nan_against_a_number_is_an_infinite_difference() -> None:
    difference = only(compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")])))
    assert difference.differing == 1
    assert difference.max_abs == math.inf
    assert "at (1,)" in difference.detail


def test_nan_python_float_equals_itself_but_not_a_number() -> None:
    assert compare(float("nan"), float("nan")) == []
    assert len(compare(1.0, float("nan"))) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_one_ulp_change_is_found_in_every_float_dtype(dtype: torch.dtype) -> None:
    reference = torch.ones(3, dtype=dtype)
    actual = reference.clone()
    actual[1] = torch.nextafter(actual[1], torch.tensor(2.0, dtype=dtype))
    difference = only(compare(reference, actual))
    assert difference.differing == 1
    assert difference.max_abs is not None and 0 < difference.max_abs < 0.01
    assert difference.detail.startswith(f"{str(dtype).removeprefix('torch.')}[3]: 1 of 3")


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
def test_integer_change_reports_the_exact_size(dtype: torch.dtype) -> None:
    reference = torch.tensor([1, 2, 3], dtype=dtype)
    actual = torch.tensor([1, 9, 3], dtype=dtype)
    difference = only(compare(reference, actual))
    assert (difference.differing, difference.max_abs) == (1, 7.0)
    assert "(reference 2, now 9)" in difference.detail


def test_bool_tensor_change_is_found() -> None:
    difference = only(compare(torch.tensor([True, False]), torch.tensor([True, True])))
    assert (difference.differing, difference.max_abs) == (1, 1.0)
    assert "at (1,)" in difference.detail


def test_zero_dimensional_change_reports_empty_index() -> None:
    difference = only(compare(torch.tensor(1.0), torch.tensor(2.5)))
    assert difference.detail == ("float32[]: 1 of 1 elements differ; max |diff| 1.5 at () "
                                 "(reference 1.0, now 2.5); "
                                 "up to 1.05e+07 ULPs at its scale: changed behaviour, "
                                 "far beyond rounding")


def test_zero_dimensional_against_one_element_is_a_shape_difference() -> None:
    assert "shape float32[1]" in only(compare(torch.tensor(1.0), torch.tensor([1.0]))).detail


def test_empty_tensors_of_one_shape_are_identical() -> None:
    assert compare(torch.empty(0, 4), torch.empty(0, 4)) == []


def test_empty_tensors_of_other_shapes_differ() -> None:
    assert "shape" in only(compare(torch.empty(0, 4), torch.empty(4, 0))).detail


def test_non_contiguous_and_requires_grad_compare_by_value() -> None:
    reference = torch.arange(6.0).reshape(2, 3)
    actual = reference.clone().t().contiguous().t().requires_grad_()
    assert not actual.is_contiguous()
    assert compare(reference, actual) == []


def test_list_against_tuple_is_a_difference() -> None:
    assert only(compare([1, 2], (1, 2))).detail == "tuple of 2, reference list of 2"


def test_length_difference_is_reported_with_the_common_prefix() -> None:
    differences = compare([1, 2, 3], [1, 5])
    assert [str(d) for d in differences] == ["<value>: length 2, reference 3",
                                             "[1]: 5, reference 2"]


def test_nested_difference_names_its_path() -> None:
    reference = {"a": [torch.zeros(2), {"b": 1}]}
    actual = {"a": [torch.zeros(2), {"b": 2}]}
    assert str(only(compare(reference, actual))) == "['a'][1]['b']: 2, reference 1"


def test_missing_and_extra_keys_are_reported() -> None:
    differences = compare({"a": 1, "b": 2}, {"a": 1, "c": 2})
    assert [d.detail for d in differences] == ["keys missing: 'b'",
                                               "keys not in reference: 'c'"]
    assert [(d.kind, d.differing) for d in differences] == [("keys missing", 1),
                                                            ("keys added", 1)]


def test_keys_that_python_would_confuse_carry_their_type_and_only_those() -> None:
    differences = compare({1: 0, "a": 0, 2: 0}, {True: 0, "b": 0, 2.5: 0})
    assert [d.detail for d in differences] == ["keys missing: 1 (int), 'a', 2",
                                               "keys not in reference: True (bool), 'b', 2.5"]


ORDER_ONLY = "same keys and values, in another order: only the key order differs"


def test_key_order_is_a_difference() -> None:
    assert only(compare({"a": 1, "b": 2}, {"b": 2, "a": 1})).detail == ORDER_ONLY


@pytest.mark.parametrize(
    ("reference_key", "actual_key", "missing", "extra"),
    [
        (1, 1.0, "1 (int)", "1.0 (float)"),
        (1, True, "1 (int)", "True (bool)"),
        (0, False, "0 (int)", "False (bool)"),
        (0.0, -0.0, "0.0 (float)", "-0.0 (float)"),
        ((1, 2), (1, 2.0), "(1, 2) (tuple)", "(1, 2.0) (tuple)"),
        (((0.0,), "a"), ((-0.0,), "a"), "((0.0,), 'a') (tuple)", "((-0.0,), 'a') (tuple)"),
        (nan_with_payload(1), nan_with_payload(2), "nan[7ff8000000000001] (float)",
         "nan[7ff8000000000002] (float)"),
    ],
    ids=["int-float", "int-bool", "zero-false", "minus-zero", "tuple", "nested-tuple", "nan"],
)
def test_keys_equal_in_python_but_of_other_type_or_bits_differ(
        reference_key: object, actual_key: object, missing: str, extra: str) -> None:
    t = torch.ones(2)
    differences = compare({reference_key: t, "z": 0}, {actual_key: t.clone(), "z": 0})
    assert [d.detail for d in differences] == [f"keys missing: {missing}",
                                               f"keys not in reference: {extra}"]


def test_nan_key_with_the_same_bits_is_the_same_key() -> None:
    reference = {nan_with_payload(3): torch.ones(1), float("nan"): 2}
    actual = {nan_with_payload(3): torch.ones(1), float("nan"): 2}  # other objects, same bits
    assert compare(reference, actual) == []


def test_values_under_equal_bit_nan_keys_are_compared_in_order() -> None:
    reference = {float("nan"): 1, float("nan"): 2}
    assert compare(reference, {float("nan"): 1, float("nan"): 2}) == []
    assert str(only(compare(reference, {float("nan"): 1, float("nan"): 3}))) == \
        "[nan]: 3, reference 2"


def test_key_order_is_judged_by_type_and_bits() -> None:
    detail = only(compare({1: "a", 1.5: "b"}, {1.5: "b", 1: "a"})).detail
    assert detail == ORDER_ONLY
    assert [d.detail for d in compare({1: "a", 2: "b"}, {2: "b", 1.0: "a"})] == [
        "keys missing: 1 (int)", "keys not in reference: 1.0 (float)"]


@pytest.mark.parametrize(
    ("reference", "actual"),
    [("a", "b"), (1, 2), (1, 1.0), (1, True), (None, 0), ("1", 1), (torch.zeros(1), 0.0)],
)
def test_scalars_of_other_value_or_type_differ(reference: object, actual: object) -> None:
    assert len(compare(reference, actual)) == 1


def test_type_difference_describes_both_sides() -> None:
    detail = only(compare(torch.zeros(2), [0.0, 0.0])).detail
    assert detail == "list of 2, reference tensor float32[2]"


def test_compare_tensors_returns_none_for_equal_tensors() -> None:
    assert compare_tensors(torch.ones(3), torch.ones(3)) is None


def test_extreme_int64_change_reports_the_changed_element() -> None:
    difference = only(compare(torch.tensor([0, 0]), torch.tensor([0, -(2**63)])))
    assert "at (1,)" in difference.detail
    assert difference.max_abs == 2.0**63


def test_complex128_change_is_found() -> None:
    reference = torch.zeros(2, dtype=torch.complex128)
    assert only(compare(reference, reference + 1)).differing == 2


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_complex64_imaginary_change_reports_its_size() -> None:
    reference = torch.zeros(2, dtype=torch.complex64)
    actual = torch.tensor([0, 0.5j], dtype=torch.complex64)
    assert only(compare(reference, actual)).max_abs == 0.5


float_dtypes = st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64])
shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3)


@settings(max_examples=60, deadline=None, database=None)
@given(dtype=float_dtypes, shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_a_clone_is_always_identical(dtype: torch.dtype, shape: list[int], seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    tensor = torch.randn(shape, generator=generator).to(dtype)
    assert compare(tensor, tensor.clone()) == []


@settings(max_examples=60, deadline=None, database=None)
@given(dtype=float_dtypes, shape=shapes, seed=st.integers(0, 2**32 - 1), data=st.data())
def test_flipping_bits_of_one_element_gives_exactly_one_difference(
        dtype: torch.dtype, shape: list[int], seed: int, data: st.DataObject) -> None:
    generator = torch.Generator().manual_seed(seed)
    reference = torch.randn(shape, generator=generator).to(dtype)
    numel = reference.numel()
    index = data.draw(st.integers(0, numel - 1), label="index")
    width = reference.element_size() * 8
    mask = data.draw(st.integers(1, 2**width - 1), label="mask")
    integer = {2: torch.int16, 4: torch.int32, 8: torch.int64}[reference.element_size()]
    bits = reference.clone().reshape(-1).view(integer)
    signed_mask = mask - 2**width if mask >= 2 ** (width - 1) else mask
    bits[index] ^= signed_mask
    actual = bits.view(dtype).reshape(reference.shape)
    difference = only(compare(reference, actual))
    assert difference.differing == 1
    assert difference.max_abs is not None and difference.max_abs >= 0
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(index), reference.shape))
    assert f" at {where if reference.dim() else '()'} " in difference.detail


def float32_with_bits(*bits: int) -> torch.Tensor:
    signed = [b - 2**32 if b >= 2**31 else b for b in bits]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def test_nan_payload_change_shows_both_bits_and_no_infinite_difference() -> None:
    reference = float32_with_bits(0x3F800000, 0x7FC00000)
    actual = float32_with_bits(0x3F800000, 0x7FC00001)
    difference = only(compare(reference, actual))
    assert difference.detail == (
        "float32[2]: 1 of 2 elements differ in bits only (NaN payload or sign of zero); "
        "first at (1,) (reference nan (0x7fc00000), now nan (0x7fc00001))")
    assert (difference.differing, difference.max_abs) == (1, 0.0)


def test_negative_nan_against_nan_is_a_bits_only_change() -> None:
    difference = only(compare(float32_with_bits(0x7FC00000), float32_with_bits(0xFFC00000)))
    assert "in bits only" in difference.detail
    assert "(reference nan (0x7fc00000), now nan (0xffc00000))" in difference.detail


def test_sign_of_zero_change_shows_both_bits() -> None:
    difference = only(compare(torch.tensor([1.0, 0.0]), torch.tensor([1.0, -0.0])))
    assert difference.detail == (
        "float32[2]: 1 of 2 elements differ in bits only (NaN payload or sign of zero); "
        "first at (1,) (reference 0.0 (0x00000000), now -0.0 (0x80000000))")


@pytest.mark.parametrize(("dtype", "nan_bits", "minus_zero_bits"), [
    (torch.float16, "0x7e00", "0x8000"),
    (torch.bfloat16, "0x7fc0", "0x8000"),
    (torch.float32, "0x7fc00000", "0x80000000"),
    (torch.float64, "0x7ff8000000000000", "0x8000000000000000"),
])
def test_bits_are_shown_as_wide_as_the_dtype(dtype: torch.dtype, nan_bits: str,
                                             minus_zero_bits: str) -> None:
    detail = only(compare(torch.tensor([float("nan"), 0.0], dtype=dtype),
                          torch.tensor([1.0, -0.0], dtype=dtype))).detail
    assert f"max |diff| inf at (0,) (reference nan ({nan_bits}), now 1.0 (" in detail
    detail = only(compare(torch.tensor([0.0], dtype=dtype),
                          torch.tensor([-0.0], dtype=dtype))).detail
    assert f"now -0.0 ({minus_zero_bits}))" in detail


def test_a_value_change_outranks_nan_payload_and_zero_sign_changes() -> None:
    reference = float32_with_bits(0x7FC00000, 0x00000000, 0x3F800000)
    actual = float32_with_bits(0x7FC00001, 0x80000000, 0x40000000)
    difference = only(compare(reference, actual))
    assert difference.detail == ("float32[3]: 3 of 3 elements differ; max |diff| 1 at (2,) "
                                 "(reference 1.0, now 2.0); "
                                 "up to 8.39e+06 ULPs at its scale: changed behaviour, "
                                 "far beyond rounding")


def test_nan_appearing_reports_an_infinite_difference_with_bits() -> None:
    difference = only(compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")])))
    assert difference.detail.split("; ")[1] == (
        "max |diff| inf at (1,) (reference 2.0 (0x40000000), now nan (0x7fc00000))")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_and_bool_values_are_shown_without_bits(dtype: torch.dtype) -> None:
    detail = only(compare(torch.tensor([0, 1], dtype=dtype),
                          torch.tensor([0, 0], dtype=dtype))).detail
    assert detail.split("; ")[1].endswith(
        f"at (1,) (reference {True if dtype == torch.bool else 1!r}, now "
        f"{False if dtype == torch.bool else 0!r})")
    assert detail.endswith("; changed behaviour: no rounding changes integers")
    assert "0x" not in detail


def test_large_int64_change_is_sized_exactly() -> None:
    difference = only(compare(torch.tensor([2**62 + 1]), torch.tensor([2**62])))
    assert difference.max_abs == 1.0
    assert "max |diff| 1 at (0,)" in difference.detail


def assert_chunking_changes_nothing(reference: torch.Tensor, actual: torch.Tensor) -> Difference:
    """Every chunk size gives the result of comparing all elements at once."""
    whole = compare_tensors(reference, actual, chunk=reference.numel() + 1)
    assert whole is not None
    for chunk in (1, 2, 3, 5, 7, 16):
        assert compare_tensors(reference, actual, chunk=chunk) == whole, chunk
    return whole


def test_difference_in_the_last_chunk_is_found_with_its_index() -> None:
    reference = torch.arange(20.0).reshape(4, 5)
    actual = reference.clone()
    actual[3, 4] = -1.0
    whole = assert_chunking_changes_nothing(reference, actual)
    assert whole.detail.split("; ")[1] == "max |diff| 20 at (3, 4) (reference 19.0, now -1.0)"
    assert compare_tensors(reference, actual, chunk=3) == whole


def test_largest_change_in_a_later_chunk_beats_earlier_ones_and_ties_keep_the_first() -> None:
    reference = torch.zeros(3, 7)
    actual = reference.clone()
    actual[0, 1], actual[1, 2], actual[2, 0], actual[2, 6] = 1.0, -4.0, 2.0, 4.0
    whole = assert_chunking_changes_nothing(reference, actual)
    assert (whole.differing, whole.max_abs) == (4, 4.0)
    assert "at (1, 2) (reference 0.0, now -4.0)" in whole.detail


def test_chunks_with_inf_nan_and_nan_payloads_agree() -> None:
    reference = float32_with_bits(0x7FC00000, 0x3F800000, 0x7F800000, 0, 0x7FC00000, 0x40000000)
    actual = float32_with_bits(0x7FC00002, 0x3F800000, 0xFF800000, 0, 0x3F800000,
                               0x40000001)
    whole = assert_chunking_changes_nothing(reference.reshape(2, 3), actual.reshape(2, 3))
    assert whole.differing == 4
    assert "max |diff| inf at (0, 2) (reference inf, now -inf)" in whole.detail


@pytest.mark.parametrize("dtype", [torch.int8, torch.int64, torch.bool, torch.float16])
def test_chunks_of_integer_bool_and_half_tensors_agree(dtype: torch.dtype) -> None:
    reference = torch.tensor([[0, 1, 0, 1, 1], [1, 0, 0, 1, 0]], dtype=dtype)
    actual = reference.clone()
    actual[1, 1] = 1
    actual[0, 4] = 0
    whole = assert_chunking_changes_nothing(reference, actual)
    assert (whole.differing, whole.max_abs) == (2, 1.0)
    assert "at (0, 4)" in whole.detail


def test_zero_dimensional_tensor_with_a_small_chunk() -> None:
    whole = assert_chunking_changes_nothing(torch.tensor(1.0), torch.tensor(2.5))
    assert whole.detail.split("; ")[1] == "max |diff| 1.5 at () (reference 1.0, now 2.5)"
    assert compare_tensors(torch.tensor(1.0), torch.tensor(1.0), chunk=1) is None


@pytest.mark.parametrize("view", ["transposed", "strided", "expanded", "rows-bigger-than-chunk"])
def test_non_contiguous_inputs_are_compared_in_logical_order(view: str) -> None:
    base = torch.arange(48.0).reshape(4, 12)
    if view == "transposed":
        actual = base.t().contiguous().t()
    elif view == "strided":
        wide = torch.full((4, 24), -1.0)
        wide[:, ::2] = base
        actual = wide[:, ::2]
    elif view == "expanded":
        base = torch.arange(12.0).expand(4, 12)
        actual = torch.arange(12.0).reshape(1, 12).expand(4, 12)
    else:
        base = torch.arange(48.0).reshape(2, 2, 12)
        actual = base.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    assert not actual.is_contiguous()
    assert actual.equal(base)
    for chunk in (1, 5, 7, 100):
        assert compare_tensors(base, actual, chunk=chunk) is None
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(base.numel() - 7), base.shape))
    changed = actual.clone()
    changed[index] += 100.0
    whole = assert_chunking_changes_nothing(base, changed)
    assert f"max |diff| 100 at {index} " in whole.detail
    assert compare_tensors(actual, changed, chunk=5) == whole


def test_all_elements_differing_in_many_chunks_are_all_counted() -> None:
    reference = torch.zeros(10, 10, dtype=torch.float64)
    actual = torch.arange(1.0, 101.0, dtype=torch.float64).reshape(10, 10)
    whole = assert_chunking_changes_nothing(reference, actual)
    assert (whole.differing, whole.max_abs) == (100, 100.0)
    assert "at (9, 9)" in whole.detail


@pytest.mark.parametrize("shape", [(), (0, 3), (10,), (3, 5), (2, 3, 7), (4, 1, 1, 6)])
@pytest.mark.parametrize("chunk", [1, 4, 6, 50])
def test_pieces_are_bounded_in_order_and_views_of_contiguous_input(
        shape: tuple[int, ...], chunk: int) -> None:
    tensor = torch.arange(float(math.prod(shape))).reshape(shape)
    pieces = list(_pieces(tensor, chunk))
    assert all(p.dim() == 1 and p.is_contiguous() and p.numel() <= chunk for p in pieces)
    assert torch.cat([*pieces, torch.empty(0)]).equal(tensor.reshape(-1))
    storage = tensor.untyped_storage().data_ptr()
    assert all(p.untyped_storage().data_ptr() == storage for p in pieces)
    transposed = list(_pieces(tensor.mT.contiguous().mT if tensor.dim() > 1 else tensor, chunk))
    assert [p.numel() for p in transposed] == [p.numel() for p in pieces]


@pytest.mark.parametrize(
    ("reference", "actual", "kind"),
    [(torch.zeros(2), torch.ones(2), "values"), (1, 2, "values"),
     (torch.zeros(2), torch.zeros(3), "shapes"), ([1], [1, 2], "shapes"),
     ({"a": 1}, {"a": 1, "b": 1}, "keys added"), ({"a": 1, "b": 1}, {"a": 1}, "keys missing"),
     (torch.zeros(2), [0.0, 0.0], "shapes"),
     (torch.zeros(2), torch.zeros(2, dtype=torch.float64), "dtypes"),
     ({"a": 1, "b": 2}, {"b": 2, "a": 1}, "order")],
    ids=["tensor-values", "scalar", "shape", "length", "keys-added", "keys-missing", "type",
         "dtype", "order"])
def test_each_difference_says_what_kind_it_is(reference: object, actual: object,
                                              kind: str) -> None:
    assert {d.kind for d in compare(reference, actual)} == {kind}


def test_key_order_beside_changed_values_says_only_that_the_order_differs_too() -> None:
    details = [d.detail for d in compare({"a": 1, "b": 2}, {"b": 3, "a": 1})]
    assert details == ["same keys in another order", "3, reference 2"]


def test_identical_tensors_are_compared_in_one_pass_without_a_scan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Most cases are identical: they cost one comparison of the bits, no chunked scan."""
    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("scanned")

    monkeypatch.setattr("regression.compare.outputs.scan", no_scan)
    values = torch.tensor([1.0, float("nan"), -0.0, float("inf")])
    for reference, actual in [(values, values.clone()), (values.t(), values.clone()),
                              (torch.ones(2, 3).t(), torch.ones(3, 2)),
                              (torch.tensor([True, False]), torch.tensor([True, False]))]:
        assert compare(reference, actual) == []
    with pytest.raises(AssertionError, match="scanned"):  # a difference is still scanned
        compare(values, torch.tensor([1.0, float("nan"), 0.0, float("inf")]))


# Views whose memory does not read as their values (a lazy negative bit), recorded through the
# cache's real files and checked: compared by their values, bit for bit (test_store.py stores
# them).


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


def test_a_difference_says_whether_its_verdict_is_rounding_level() -> None:
    reference = torch.linspace(-1.0, 1.0, 64)
    rounding = compare_tensors(reference, reference * (1 + 2 ** -23))
    behaviour = compare_tensors(reference, reference * 1.01)
    shape = compare_tensors(reference, reference[:3])
    assert rounding is not None and "rounding-level" in rounding.detail and rounding.rounding
    assert behaviour is not None and not behaviour.rounding
    assert shape is not None and not shape.rounding
    weight = compare_tensors(reference, reference * (1 + 2 ** -23), weight=True)
    assert weight is not None and not weight.rounding  # stored, not computed


def test_a_namedtuple_whose_fields_changed_differs_though_its_values_do_not() -> None:
    """Code reads a namedtuple's values by name: fields renamed or reordered hand it other
    values, and a tuple that became a namedtuple (or back) is another type."""
    old, new = (collections.namedtuple("Heads", fields) for fields in ("logits probs",
                                                                        "probs logits"))
    x = torch.ones(2)
    (difference,) = compare(snapshot(old(x, x)), snapshot(new(x, x)), name="'heads'")
    assert difference.detail == ("namedtuple Heads(probs, logits) of 2, reference namedtuple "
                                 "Heads(logits, probs) of 2"), difference
    assert compare(snapshot((x, x)), snapshot(old(x, x)))
    assert compare(snapshot(old(x, x)), snapshot((x, x)))
    assert compare(snapshot(old(x, x)), snapshot(old(x, x))) == []
    assert compare(old(x, x), snapshot(old(x, x))) == []  # stored or not, one type


_PAIRS = {
    "identical": (torch.arange(6.0), torch.arange(6.0)),
    "one bit": (torch.arange(6.0), torch.arange(6.0).nextafter(torch.tensor(99.0))),
    "signed zero": (torch.zeros(3), -torch.zeros(3)),
    "one NaN, two payloads": (torch.tensor([nan_with_payload(1)], dtype=torch.float64),
                              torch.tensor([nan_with_payload(2)], dtype=torch.float64)),
    "same NaN": (torch.tensor([math.nan]), torch.tensor([math.nan])),
    "dtype": (torch.arange(3, dtype=torch.int32), torch.arange(3, dtype=torch.int64)),
    "shape": (torch.zeros(2, 3), torch.zeros(3, 2)),
    "complex, same": (torch.tensor([1 + 2j]), torch.tensor([1 + 2j])),
    "complex, other": (torch.tensor([1 + 2j]), torch.tensor([1 - 2j])),
    "strided view": (torch.arange(8.0)[::2], torch.tensor([0.0, 2.0, 4.0, 6.0])),
    "bool": (torch.tensor([True, False]), torch.tensor([True, True])),
    "empty": (torch.empty(0, 3), torch.empty(0, 3)),
    "a tensor and a list": (torch.zeros(2), [0.0, 0.0]),
}


@pytest.mark.parametrize("name", list(_PAIRS))
def test_the_quick_path_for_identical_tensors_agrees_with_the_full_comparison(name: str
                                                                               ) -> None:
    """compare() asks first whether two tensors are bit-identical (most checks are): where
    it says so, the full walk finds nothing, and where the full walk finds a difference, it
    is reported as before."""
    from regression.compare.outputs import _compare, _identical_tensors

    reference, actual = _PAIRS[name]
    full = list(_compare(reference, actual, ()))
    if _identical_tensors(reference, actual):
        assert full == []
    assert [str(d) for d in compare(reference, actual)] == [str(d) for d in full]
    assert bool(compare(reference, actual)) == (name not in
                                                ("identical", "same NaN", "complex, same",
                                                 "strided view", "empty"))
