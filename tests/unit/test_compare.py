"""Tests of regression.compare: every kind of bitwise difference, and none for equal values."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from regression.compare import Difference, compare, compare_tensors


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
                                 "(reference 0.0, now 5.0)")


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
                                 "(reference 1.0, now 2.5)")


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
    assert [d.detail for d in differences] == ["keys missing: 'b' (str)",
                                               "keys not in reference: 'c' (str)"]


def test_key_order_is_a_difference() -> None:
    assert only(compare({"a": 1, "b": 2}, {"b": 2, "a": 1})).detail == "same keys in another order"


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
    assert detail == "same keys in another order"
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
