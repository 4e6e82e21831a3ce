"""Tests of regression.compare.tensordiff: ULP distances, the verdict, and the full report."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from regression.compare.outputs import compare_tensors
from regression.compare.tensordiff import scan, ulp_distances
from regression.compare.tensordiff_text import report_lines, value_text
from regression.compare.layout import aligned, layout

FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


def _up(values: torch.Tensor, steps: int) -> torch.Tensor:
    """`values` moved `steps` representable values towards +inf."""
    for _ in range(steps):
        values = torch.nextafter(values, torch.full_like(values, math.inf))
    return values


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 1, 5), (4, 3, 2, 3), (1,)])
def test_a_flat_index_reads_as_the_tensor_index_torch_gives(shape: tuple[int, ...]) -> None:
    diff = scan(torch.zeros(shape), torch.zeros(shape))
    for flat in range(math.prod(shape)):
        expected = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
        assert diff.where(flat) == str(expected)
    assert scan(torch.zeros(()), torch.zeros(())).where(0) == "()"


def test_a_report_of_a_changed_tensor_loads_no_sympy() -> None:
    """torch.unravel_index's first call imports sympy (0.7 s in each check run that reports
    a change); the report's index is computed without it. A new Python: this one may have
    loaded sympy already."""
    code = ("import sys, torch\n"
            "from regression.compare.outputs import compare_tensors\n"
            "compare_tensors(torch.zeros(3, 4), torch.ones(3, 4))\n"
            "print('sympy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "False", done.stdout + done.stderr


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
    assert "at most 1 ULP at its scale: rounding-level, as reordered arithmetic gives" in \
        difference.detail
    assert "ULP distances: 1: 12, 2-4: 0, 5-16: 0, 17-256: 0, more: 0" in difference.lines


def test_relative_change_of_1e_3_reads_as_changed_behaviour() -> None:
    reference = torch.linspace(1, 2, 10)
    difference = compare_tensors(reference, reference * (1 + 1e-3))
    assert difference is not None
    assert "ULPs at its scale: changed behaviour, far beyond rounding" in difference.detail
    (relative,) = [line for line in difference.lines if line.startswith("max relative")]
    assert relative.startswith("max relative diff 0.001 at ")


def test_a_few_hundred_ulps_are_said_to_be_beyond_one_rounding() -> None:
    reference = torch.ones(2)
    difference = compare_tensors(reference, _up(reference, 100))
    assert difference is not None
    assert "at most 100 ULPs at its scale: beyond one rounding" in difference.detail


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


# The verdict judges on the tensor's own scale. Ground truth: real torch computations of each
# kind, as real histories give them.

ROUNDING = "at its scale: rounding-level, as reordered arithmetic gives"
BEHAVIOUR = "at its scale: changed behaviour, far beyond rounding"


def scan_lines(reference: torch.Tensor, actual: torch.Tensor) -> list[str]:
    return report_lines(scan(reference, actual))


def _verdict(reference: torch.Tensor, actual: torch.Tensor) -> str:
    difference = compare_tensors(reference, actual)
    assert difference is not None
    return difference.detail


def _features(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """A ViT-like feature (tokens of width 768, layer-normed: many elements near zero) and
    a projection."""
    generator = torch.Generator().manual_seed(0)
    x = torch.layer_norm(torch.randn(2, 10, 768, generator=generator), (768,))
    return x.to(dtype), (torch.randn(768, 768, generator=generator) / 768 ** 0.5).to(dtype)


def _split_k(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w summed in three uneven blocks of K: MKL may block an even split as x @ w does
    (bit-identical on some CPUs), never this one."""
    return (x[..., :100] @ w[:100] + x[..., 100:500] @ w[100:500]) + x[..., 500:] @ w[500:]


@pytest.mark.parametrize("reordered", [
    lambda x, w: _split_k(x, w),
    lambda x, w: (x.unsqueeze(-1) * w).sum(-2),  # another summation order
])
def test_reordered_matmul_with_elements_near_zero_reads_as_rounding(reordered: Any) -> None:
    x, w = _features()
    reference, actual = x @ w, reordered(x, w)
    assert scan(reference, actual).max_ulps > 1000  # per element: elements near zero explode
    assert ROUNDING in _verdict(reference, actual)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reordered_matmul_in_half_precision_reads_as_rounding(dtype: torch.dtype) -> None:
    x, w = _features(dtype)
    reference = x @ w
    assert ROUNDING in _verdict(reference, x[..., :384] @ w[:384] + x[..., 384:] @ w[384:])
    assert BEHAVIOUR in _verdict(reference, (x * 1.5) @ w)


def test_fused_attention_against_a_manual_one_reads_as_rounding() -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 8, 16, 64, generator=generator).unbind(0)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    manual = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1) @ v
    assert scan(fused, manual).max_ulps > 1000
    assert ROUNDING in _verdict(fused, manual)


def test_gelu_tanh_approximation_reads_as_changed_behaviour() -> None:
    x, _ = _features()
    exact = torch.nn.functional.gelu(x)
    assert BEHAVIOUR in _verdict(exact, torch.nn.functional.gelu(x, approximate="tanh"))


def test_reinitialised_weight_reads_as_changed_behaviour() -> None:
    x, _ = _features()
    torch.manual_seed(0)
    before = torch.nn.Linear(768, 10)
    torch.manual_seed(1)
    after = torch.nn.Linear(768, 10)
    with torch.no_grad():
        assert BEHAVIOUR in _verdict(before(x), after(x))


@pytest.mark.parametrize("index", [0, 7])  # the largest element, and one near zero
def test_one_ulp_nudge_of_one_element_reads_as_rounding(index: int) -> None:
    reference = torch.tensor([3.0, 1.5, -2.0, 0.5, 1.0, -1.0, 0.25, 1e-6])
    actual = reference.clone()
    actual[index] = _up(reference[index:index + 1], 1)[0]
    detail = _verdict(reference, actual)
    assert "1 of 8 elements differ" in detail and ROUNDING in detail
    assert ("at most 1 ULP at" in detail) == (index == 0)  # near zero: a fraction of one


def test_all_zero_tensors() -> None:
    zeros = torch.zeros(4)
    assert "in bits only (NaN payload or sign of zero)" in _verdict(zeros, -zeros)
    tiny = zeros.clone()
    tiny[2] = 1e-30  # no scale to hide it: the reference is all zeros
    assert BEHAVIOUR in _verdict(zeros, tiny)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool])
def test_integers_and_bools_always_read_as_changed_behaviour(dtype: torch.dtype) -> None:
    reference = torch.tensor([0, 1, 1, 0], dtype=dtype)
    actual = torch.tensor([0, 1, 0, 0], dtype=dtype)
    assert _verdict(reference, actual).endswith("changed behaviour: no rounding changes "
                                                "integers")


def test_nan_and_inf() -> None:
    x, w = _features()
    reference, actual = x @ w, _split_k(x, w)
    reference[0, 0, 0] = actual[0, 0, 0] = math.inf  # an inf in both: no effect on the scale
    assert ROUNDING in _verdict(reference, actual)
    flipped = actual.clone()
    flipped[0, 0, 0] = -math.inf
    assert BEHAVIOUR in _verdict(reference, flipped)
    actual[1, 2, 3] = math.nan
    assert "a NaN appeared or went: changed behaviour" in _verdict(reference, actual)


def _masked_scores(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Causal attention scores masked as x-transformers does, with -finfo(dtype).max."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 4, 16, 16, generator=generator).to(dtype)
    causal = torch.ones(16, 16, dtype=torch.bool).triu(1)
    return scores.masked_fill(causal, -torch.finfo(dtype).max)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mask_fill_values_do_not_set_the_scale_of_the_scores(dtype: torch.dtype) -> None:
    """-0.785 -> 0.080 was read as `at most 4.26e-32 ULPs at its scale: rounding-level`."""
    reference = _masked_scores(dtype)
    actual = reference.clone()
    actual[0, 0, 5, 2] = reference[0, 0, 5, 2] + 0.864
    detail = _verdict(reference, actual)
    assert BEHAVIOUR in detail, detail
    scale = next(line for line in scan_lines(reference, actual) if "tensor's scale" in line)
    assert "non-finite, sentinel (±finfo.max) or outlying elements of the two set aside" \
        in scale
    assert scan(reference, actual).rms < 2  # the scores' own scale, not 2.3e+38


def test_a_one_ulp_change_of_masked_scores_still_reads_as_rounding() -> None:
    reference = _masked_scores()
    actual = reference.clone()
    actual[1, 3, 9, 4] = _up(reference[1, 3, 9, 4:5], 1)[0]
    assert ROUNDING in _verdict(reference, actual)


def test_a_few_huge_outliers_do_not_set_the_scale_either() -> None:
    x, _ = _features()
    reference = x.clone()
    reference[0, 0, :4] = -1e9  # a mask's fill of another library
    actual = reference.clone()
    actual[1, 3, 7] += 0.5
    assert BEHAVIOUR in _verdict(reference, actual)
    assert scan(reference, actual).aside == 8


def test_a_one_ulp_change_of_a_weight_is_an_initialisation_change_not_arithmetic() -> None:
    """A stored weight is not computed: no kernel or summation order moves it."""
    weight = torch.linspace(-0.1, 0.1, 64).reshape(8, 8)
    nudged = weight.clone()
    nudged[2, 3] = _up(weight[2, 3:4], 1)[0]
    difference = compare_tensors(weight, nudged, "w", weight=True)
    assert difference is not None
    assert "at most 1 ULP at its scale: an initialisation (or loading) change of that size; " \
        "stored, not computed, so no reordered arithmetic explains it" in difference.detail
    assert "reordered arithmetic gives" not in difference.detail
    far = compare_tensors(weight, weight + 1, "w", weight=True)
    assert far is not None and "up to " in far.detail and "initialisation" in far.detail


def test_the_report_keeps_the_per_element_histogram_and_says_how_the_verdict_measured() -> None:
    reference = torch.tensor([1.0, 1.0, 1e-6, 1.0])
    actual = reference.clone()
    actual[2] = _up(reference[2:3], 1000)[0]
    difference = compare_tensors(reference, actual)
    assert difference is not None
    assert "ULP distances: 1: 0, 2-4: 0, 5-16: 0, 17-256: 0, more: 1" in difference.lines
    scale = [line for line in difference.lines if line.startswith("at the tensor's scale")]
    assert scale == ["at the tensor's scale (RMS 0.866; elements below it measured in ULPs of "
                     "the RMS): at most 0.00191 ULPs; per element up to 1000 ULPs"]


def test_layouts_of_the_same_values_are_named() -> None:
    x = torch.randn(2, 17, 64)
    assert str(layout(x, x.clone())) == "bit-identical"
    assert str(layout(x, x.permute(1, 0, 2))) == "same values, dims permuted (1, 0, 2)"
    assert str(layout(x, x.reshape(34, 64))) == \
        "same values, reshaped from [2, 17, 64] to [34, 64]"
    assert str(layout(x, x.transpose(0, 1).reshape(34, 64))) == \
        "same values, dims permuted (1, 0, 2), then reshaped to [34, 64]"
    assert str(layout(x.half(), x.half().mT)) == "same values, dims permuted (0, 2, 1)"
    flags = torch.tensor([[True, True], [False, False]])
    assert str(layout(flags, flags.T)) == "same values, dims permuted (1, 0)"


def test_other_values_or_dtypes_have_no_layout() -> None:
    x = torch.randn(3, 4)
    assert layout(x, x.t() + 1e-7) is None
    assert layout(x, x.flip(0)) is None  # same values, but no permutation of dims maps them
    assert layout(x, x.double()) is None
    assert layout(x, x.reshape(-1)[:6]) is None


def test_a_tensor_is_aligned_to_anothers_layout_to_compare_values() -> None:
    x = torch.randn(2, 5, 4)
    moved, how = aligned(x, x.permute(1, 0, 2) * 2, None) or (None, None)
    assert moved is not None and torch.equal(moved, x.permute(1, 0, 2))
    assert how is not None and how.how == "dims permuted (1, 0, 2)"
    square = torch.randn(3, 3)
    assert aligned(square, square.t(), None) is None  # two permutations fit: none is guessed
    assert aligned(square, square.t(), (1, 0)) is not None
