"""Tests of regression.tensordiff: ULP distances, the verdict, and the full report."""

from __future__ import annotations

import math

import pytest
import torch

from regression.compare import compare_tensors
from regression.tensordiff import scan, ulp_distances, value_text

FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


def _up(values: torch.Tensor, steps: int) -> torch.Tensor:
    """`values` moved `steps` representable values towards +inf."""
    for _ in range(steps):
        values = torch.nextafter(values, torch.full_like(values, math.inf))
    return values


@pytest.mark.parametrize("dtype", FLOATS)
def test_neighbours_are_one_ulp_apart_in_every_float_dtype(dtype: torch.dtype) -> None:
    values = torch.tensor([1.0, -3.5, 1e-3, 0.0], dtype=dtype)
    assert ulp_distances(values, _up(values, 1)).tolist() == [1.0] * 4
    assert ulp_distances(values, _up(values, 7)).tolist() == [7.0] * 4


def test_distances_across_zero_add_and_zero_signs_and_nan_payloads_are_zero() -> None:
    tiny = torch.tensor([1e-45])  # the smallest float32 subnormal
    assert ulp_distances(-tiny, tiny).tolist() == [2.0]
    assert ulp_distances(torch.tensor([-0.0]), torch.tensor([0.0])).tolist() == [0.0]
    nan = torch.tensor([math.nan])
    other_nan = nan.view(torch.int32).add(1).view(torch.float32)
    assert ulp_distances(nan, other_nan).tolist() == [0.0]
    assert ulp_distances(nan, torch.tensor([1.0])).tolist() == [math.inf]


def test_opposite_extremes_of_float64_do_not_overflow() -> None:
    big = torch.tensor([torch.finfo(torch.float64).max], dtype=torch.float64)
    distance = float(ulp_distances(-big, big)[0])
    assert 1.8e19 < distance < 1.9e19  # 2 * 0x7fefffffffffffff


def test_histogram_counts_each_element_in_its_bucket() -> None:
    reference = torch.ones(6)
    steps = [0, 1, 3, 10, 100, 1000]
    actual = torch.stack([_up(reference[i:i + 1], n)[0] for i, n in enumerate(steps)])
    diff = scan(reference, actual)
    assert diff.differing == 5
    assert diff.ulp_counts == [1, 1, 1, 1, 1]
    assert diff.max_ulps == 1000


def test_one_ulp_change_reads_as_reordered_arithmetic() -> None:
    reference = torch.linspace(-2, 2, 12).reshape(3, 4)
    difference = compare_tensors(reference, _up(reference, 1))
    assert difference is not None
    assert "at most 1 ULP: rounding-level, as reordered arithmetic gives" in difference.detail
    assert "ULP distances: 1: 12, 2-4: 0, 5-16: 0, 17-256: 0, more: 0" in difference.lines


def test_relative_change_of_1e_3_reads_as_changed_behaviour() -> None:
    reference = torch.linspace(1, 2, 10)
    difference = compare_tensors(reference, reference * (1 + 1e-3))
    assert difference is not None
    assert "ULPs: changed behaviour, far beyond rounding" in difference.detail
    (relative,) = [line for line in difference.lines if line.startswith("max relative")]
    assert relative.startswith("max relative diff 0.001 at ")


def test_a_few_hundred_ulps_are_said_to_be_beyond_one_rounding() -> None:
    reference = torch.ones(2)
    difference = compare_tensors(reference, _up(reference, 100))
    assert difference is not None
    assert "at most 100 ULPs: beyond one rounding" in difference.detail


def test_report_lists_the_first_three_elements_with_their_bits() -> None:
    reference = torch.zeros(5)
    actual = torch.tensor([0.0, 0.1, 0.2, -0.0, 0.5])
    difference = compare_tensors(reference, actual)
    assert difference is not None
    lines = list(difference.lines)
    start = lines.index("first 3 differing elements:")
    assert lines[start + 1:] == [
        "  (1,): reference 0.0 (0x00000000), now 0.1 (0x3dcccccd)",
        "  (2,): reference 0.0 (0x00000000), now 0.2 (0x3e4ccccd)",
        "  (3,): reference 0.0 (0x00000000), now -0.0 (0x80000000)",
    ]
    assert lines[0] == "max |diff| 0.5 at (4,): reference 0.0, now 0.5"
    assert "bits only: 1" in lines[2]
    assert difference.report()[0] == str(difference)
    assert all(line.startswith("    ") for line in difference.report()[1:])


@pytest.mark.parametrize(("value", "dtype", "text"), [
    (0.1, torch.float32, "0.1"), (1 / 3, torch.float16, "0.3333"),
    (1 / 3, torch.float64, repr(1 / 3)), (math.inf, torch.float32, "inf"),
    (5, torch.int32, "5"),
])
def test_values_read_as_the_shortest_decimal_of_their_dtype(value: float, dtype: torch.dtype,
                                                            text: str) -> None:
    assert value_text(torch.tensor(value, dtype=dtype)) == text
