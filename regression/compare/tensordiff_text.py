"""The text of a tensor difference: its verdict, its headline and the full report under it."""

from __future__ import annotations

import math

import torch

from regression.compare.tensordiff import (BANDS, SAME_WIDTH_INT, ULP_BUCKETS, ComplexDiff, Element,
                                   TensorDiff)


def verdict(diff: TensorDiff, weight: bool = False) -> str:
    """One line that says what kind of change this is. `weight`: the values were not
    computed (a weight as initialised or loaded), so no reordered arithmetic explains them."""
    if not diff.floating:
        return "changed behaviour: no rounding changes integers"
    if diff.max_ulps == 0:
        return "in bits only (NaN payload or sign of zero): the values are equal"
    if math.isinf(diff.max_ulps):
        return "a NaN appeared or went: changed behaviour"
    ulps = diff.scaled_ulps
    rounding, small = bands(diff.dtype)
    most = f"at most {_ulps_text(ulps)} at its scale"
    if weight:
        size = most if ulps <= small else f"up to {_ulps_text(ulps)} at its scale"
        return (f"{size}: an initialisation (or loading) change of that size; stored, not "
                "computed, so no reordered arithmetic explains it")
    if ulps <= rounding:
        return (f"{most}: rounding-level, as reordered arithmetic gives (another kernel, "
                "summation order, fused operations)")
    if ulps <= small:
        return (f"{most}: beyond one rounding; reordered arithmetic compounded over many "
                "operations, or a small change of behaviour")
    return f"up to {_ulps_text(ulps)} at its scale: changed behaviour, far beyond rounding"


def rounding_level(diff: TensorDiff, weight: bool = False) -> bool:
    """Whether `verdict` reads the change as rounding-level (or in bits only): what a
    declared rounding-level change may grow to before it counts as changed behaviour."""
    if not diff.floating or weight or math.isinf(diff.max_ulps):
        return False
    return diff.max_ulps == 0 or diff.scaled_ulps <= bands(diff.dtype)[0]


def bands(dtype: torch.dtype) -> tuple[int, int]:
    """The ULPs at a tensor's scale up to which a change reads as rounding, and beyond which
    as changed behaviour, for its float dtype."""
    return BANDS[32] if torch.finfo(dtype).bits >= 32 else BANDS[16]


def _ulps_text(ulps: float) -> str:
    """A number of ULPs: whole when it is one, else to three digits."""
    if math.isinf(ulps):
        return "infinitely many ULPs"
    text = f"{ulps:.0f}" if ulps == int(ulps) and ulps < 1e4 else f"{ulps:.3g}"
    return f"{text} ULP{'' if ulps == 1 else 's'}"


def headline(diff: TensorDiff, weight: bool = False) -> str:
    """The difference in one line: how many elements, the largest change, the verdict
    (`weight`: of values not computed, as `verdict`)."""
    return f"{diff.differing} of {diff.numel} elements differ{_largest_text(diff, weight=weight)}"


def _largest_text(diff: TensorDiff, with_verdict: bool = True, weight: bool = False) -> str:
    """The headline after its count: the largest change and (where asked) the verdict."""
    largest = diff.largest
    if largest is None:
        return ""
    if diff.floating and diff.largest_size == 0:
        first = diff.first[0]
        return (f" in bits only (NaN payload or sign of zero); first at "
                f"{diff.where(first.index)} ({_values_text(diff, first, bits=True)})")
    text = (f"; max |diff| {diff.largest_size:.3g} at {diff.where(largest.index)} "
            f"({_values_text(diff, largest)})")
    return f"{text}; {verdict(diff, weight)}" if with_verdict else text


def complex_headline(diff: ComplexDiff) -> str:
    """A complex difference in one line: how many elements, in which part, the largest
    change of each part that differs, the verdict of the worse one."""
    head = f"{diff.differing} of {diff.numel} elements differ"
    parts = _differing_parts(diff)
    if len(parts) == 1:
        (name, part), = parts
        return f"{head}, in the {name} part only{_largest_text(part)}"
    counts = ", ".join(f"{name} {part.differing}" for name, part in parts)
    each = "".join(f"; {name} part:{_largest_text(part, with_verdict=False).lstrip(';')}"
                   for name, part in parts)
    worse = max((part for _, part in parts), key=lambda p: (p.max_ulps, p.scaled_ulps))
    return f"{head}, in both parts ({counts}){each}; {verdict(worse)}"


def complex_report_lines(diff: ComplexDiff) -> list[str]:
    """The full report of a complex difference: each part's, or that it is bit-identical."""
    lines = []
    for name, part in (("real", diff.real), ("imaginary", diff.imag)):
        if not part.differing:
            lines.append(f"{name} part: bit-identical")
            continue
        lines.append(f"{name} part: {part.differing} of {part.numel} elements differ; "
                     f"{verdict(part)}")
        lines += [f"  {line}" for line in report_lines(part)]
    return lines


def _differing_parts(diff: ComplexDiff) -> list[tuple[str, TensorDiff]]:
    return [(name, part) for name, part in (("real", diff.real), ("imaginary", diff.imag))
            if part.differing]


def report_lines(diff: TensorDiff) -> list[str]:
    """The full report under the headline: sizes with their elements, the ULP histogram,
    the first differing elements with their bits."""
    lines = []
    if diff.largest is not None:
        lines.append(f"max |diff| {diff.largest_size:.3g} at {_element_text(diff, diff.largest)}")
    if diff.relative is not None:
        lines.append(f"max relative diff {diff.relative_size:.3g} at "
                     f"{_element_text(diff, diff.relative)}")
    if diff.floating:
        counts = ", ".join(f"{name}: {count}" for (name, _, _), count
                           in zip(ULP_BUCKETS, diff.ulp_counts))
        bits = f", bits only: {diff.bits_only}" if diff.bits_only else ""
        lines.append(f"ULP distances: {counts}{bits}")
        lines.append(_scale_line(diff))
    shown = f"first {len(diff.first)}" if diff.differing > len(diff.first) else "all"
    lines.append(f"{shown} differing elements:")
    lines += [f"  {_element_text(diff, element, bits=True)}" for element in diff.first]
    return lines


def _scale_line(diff: TensorDiff) -> str:
    """How the verdict measured: per element the largest ULP distance, at the tensor's
    scale the largest that counts."""
    aside = (f", {diff.aside} non-finite, sentinel (±finfo.max) or outlying elements of the "
             "two set aside") if diff.aside else ""
    return (f"at the tensor's scale (RMS {diff.rms:.3g}{aside}; elements below it measured in "
            f"ULPs of the RMS): at most {_ulps_text(diff.scaled_ulps)}; per element up to "
            f"{_ulps_text(diff.max_ulps)}")


def _element_text(diff: TensorDiff, element: Element, bits: bool = False) -> str:
    return f"{diff.where(element.index)}: {_values_text(diff, element, bits)}"


def _values_text(diff: TensorDiff, element: Element, bits: bool = False) -> str:
    """Both values of an element; with their bits where asked or where the values alone
    would hide the change."""
    ref, new = element.reference, element.actual
    if diff.floating and (bits or _hides_change(ref, new)):
        return (f"reference {value_text(ref)} ({hex_bits(ref)}), "
                f"now {value_text(new)} ({hex_bits(new)})")
    return f"reference {value_text(ref)}, now {value_text(new)}"


def _hides_change(reference: torch.Tensor, actual: torch.Tensor) -> bool:
    """Whether the values alone would not show the change: NaNs, or a sign of zero."""
    ref, new = float(reference), float(actual)
    return math.isnan(ref) or math.isnan(new) or ref == new


def value_text(element: torch.Tensor) -> str:
    """An element as the shortest decimal that reads back to its bits in its dtype."""
    value = element.item()
    if not isinstance(value, float) or not math.isfinite(value) or \
            element.dtype == torch.float64:
        return repr(value)
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if torch.tensor(float(text), dtype=element.dtype).item() == value:
            return repr(float(text))
    return repr(value)


def hex_bits(element: torch.Tensor) -> str:
    """One element's bits in hex, as wide as its dtype (0x7fc00000 for a float32 NaN)."""
    width = element.element_size() * 8
    bits = int(element.reshape(1).view(SAME_WIDTH_INT[element.element_size()]).item())
    return f"0x{bits & ((1 << width) - 1):0{width // 4}x}"
