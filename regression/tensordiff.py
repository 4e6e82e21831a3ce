"""How two tensors of one dtype and shape differ, element by element: how many elements,
the largest absolute and relative change, distances in ULPs, the first differing elements,
and the verdict: rounding or changed behaviour, judged on the tensor's own scale.

Works through a chunk of elements at a time, so memory stays the inputs plus small buffers.
Pure: no pytest, no storage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import permutations
from typing import Iterator

import torch

SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
CHUNK = 1 << 20  # elements compared at a time
FIRST = 3  # differing elements shown in full
BANDS = {32: (64, 256), 16: (8, 32)}
"""By the width of a float: at most the first many ULPs at the tensor's scale is what
reordered arithmetic gives, beyond the second far beyond rounding. Float32: a dot product of
768 terms in another order gives 13 to 25 (a sum of n terms grows as sqrt(n)); 16-bit floats
accumulate in float32 and round once, and 32 of their ULPs are a quarter (bfloat16)."""
ULP_BUCKETS = (("1", 1, 1), ("2-4", 2, 4), ("5-16", 5, 16), ("17-256", 17, 256),
               ("more", 257, math.inf))
MAX_PERMUTED = 6  # dims up to which every permutation is tried for a layout
_MAGNITUDE = {2: 0x7FFF, 4: 0x7FFF_FFFF, 8: 0x7FFF_FFFF_FFFF_FFFF}


@dataclass(frozen=True)
class Element:
    """One differing element: its flat index and both values (0-dim CPU tensors)."""

    index: int
    reference: torch.Tensor
    actual: torch.Tensor


@dataclass
class TensorDiff:
    """What differs between two tensors of one dtype and shape."""

    shape: tuple[int, ...]
    numel: int
    floating: bool
    dtype: torch.dtype
    differing: int = 0
    largest: Element | None = None
    largest_size: float = 0.0
    relative: Element | None = None
    relative_size: float = 0.0
    max_ulps: float = 0.0
    rms: float = 0.0
    """Root mean square of both tensors' finite elements: the tensor's own scale."""
    scaled_ulps: float = 0.0
    """The largest difference in ULPs at the tensor's scale: each element's ULP distance, or
    its difference in ULPs of the RMS where that is smaller (an element near zero)."""
    bits_only: int = 0  # differing elements at 0 ULPs: NaN payload or sign of zero
    ulp_counts: list[int] = field(default_factory=lambda: [0] * len(ULP_BUCKETS))
    first: list[Element] = field(default_factory=list)

    def where(self, index: int) -> str:
        """A flat index as the tensor's index, "()" for a 0-dim tensor."""
        if not self.shape:
            return "()"
        position = torch.unravel_index(torch.tensor(index), self.shape)
        return str(tuple(int(i) for i in position))


def scan(reference: torch.Tensor, actual: torch.Tensor, chunk: int = CHUNK) -> TensorDiff:
    """Every differing element of two tensors of one (real) dtype and shape, chunk by chunk."""
    diff = TensorDiff(tuple(reference.shape), reference.numel(), reference.is_floating_point(),
                      reference.dtype)
    offset = 0
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        where = (_bits(ref) != _bits(new)).nonzero().reshape(-1)
        if where.numel():
            _add(diff, offset, where, ref[where], new[where])
        offset += ref.numel()
    if diff.largest is not None and not diff.floating:  # exact, also beyond 2**53
        largest = diff.largest
        diff.largest_size = float(abs(int(largest.actual.item()) - int(largest.reference.item())))
    if diff.differing and diff.floating:  # only then: identical tensors cost one pass
        diff.rms = _rms(reference, actual, chunk)
        diff.scaled_ulps = _scaled_ulps(reference, actual, diff.rms, chunk)
    return diff


def _rms(reference: torch.Tensor, actual: torch.Tensor, chunk: int) -> float:
    """Root mean square of both tensors' finite elements: their own scale."""
    squares, finite = 0.0, 0
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        for piece in (ref, new):
            values = piece.to(torch.float64)
            values = values[values.isfinite()]
            squares, finite = squares + float((values * values).sum()), finite + values.numel()
    return math.sqrt(squares / finite) if finite else 0.0


def _scaled_ulps(reference: torch.Tensor, actual: torch.Tensor, rms: float, chunk: int
                 ) -> float:
    """The largest difference in ULPs at the tensor's scale: rounding moves an element near
    zero by ULPs of the values it was computed from, not of its own (tiny) magnitude."""
    unit = ulp_at(rms, reference.dtype)
    largest = 0.0
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        where = (_bits(ref) != _bits(new)).nonzero().reshape(-1)
        if where.numel():
            ref, new = ref[where], new[where]
            scaled = torch.minimum(ulp_distances(ref, new), absolute_sizes(ref, new) / unit)
            largest = max(largest, float(scaled.max()))
    return largest


def ulp_at(magnitude: float, dtype: torch.dtype) -> float:
    """The gap between neighbouring values of `dtype` at `magnitude` (at least the gap
    between subnormals; above the largest finite value, the gap below it)."""
    info = torch.finfo(dtype)
    magnitude = min(max(magnitude, info.smallest_normal), info.max)
    _, exponent = math.frexp(magnitude)  # magnitude = m * 2**exponent, 0.5 <= m < 1
    return math.ldexp(info.eps, exponent - 1)


def _add(diff: TensorDiff, offset: int, where: torch.Tensor, ref: torch.Tensor,
         new: torch.Tensor) -> None:
    """Fold one chunk's differing elements (at `offset + where`) into `diff`."""
    diff.differing += where.numel()
    for i in range(min(FIRST - len(diff.first), where.numel())):
        diff.first.append(Element(offset + int(where[i]), ref[i].clone(), new[i].clone()))
    sizes = absolute_sizes(ref, new)
    position = int(torch.argmax(sizes))
    if diff.largest is None or float(sizes[position]) > diff.largest_size:
        diff.largest_size = float(sizes[position])
        diff.largest = Element(offset + int(where[position]), ref[position].clone(),
                               new[position].clone())
    if not diff.floating:
        return
    relative = sizes / ref.to(torch.float64).abs()  # inf where the reference is 0
    relative = torch.where(sizes.isinf(), math.inf, torch.where(sizes == 0, 0.0, relative))
    position = int(torch.argmax(relative))
    if diff.relative is None or float(relative[position]) > diff.relative_size:
        diff.relative_size = float(relative[position])
        diff.relative = Element(offset + int(where[position]), ref[position].clone(),
                                new[position].clone())
    ulps = ulp_distances(ref, new)
    diff.max_ulps = max(diff.max_ulps, float(ulps.max()))
    diff.bits_only += int((ulps == 0).sum())
    for i, (_, low, high) in enumerate(ULP_BUCKETS):
        diff.ulp_counts[i] += int(((ulps >= low) & (ulps <= high)).sum())


def absolute_sizes(reference: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    """|actual - reference| per element, in float64. A NaN that appears or goes is infinitely
    far; a NaN that only changed its payload (or a zero its sign) is 0: its bits differ, its
    value does not."""
    if reference.dtype == torch.bool:
        reference, actual = reference.to(torch.int64), actual.to(torch.int64)
    sizes = (actual.to(torch.float64) - reference.to(torch.float64)).abs()
    if reference.is_floating_point():
        sizes = torch.where(sizes.isnan(), math.inf, sizes)
        sizes = torch.where(reference.isnan() & actual.isnan(), 0.0, sizes)
    return sizes


def ulp_distances(reference: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    """How many representable values of their dtype lie between two floats, per element
    (float64): 1 for neighbours, 0 for a sign of zero or a NaN payload, inf for a NaN that
    appears or goes."""
    ordered_ref, ordered_new = _ordered(reference), _ordered(actual)
    same_sign = (ordered_ref >= 0) == (ordered_new >= 0)
    # Same sign: the int64 difference is exact. Opposite signs: the magnitudes add, in float64
    # (inexact only beyond 2**53 ULPs, where it no longer matters).
    distances = torch.where(
        same_sign, (ordered_ref - ordered_new).abs().to(torch.float64),
        ordered_ref.abs().to(torch.float64) + ordered_new.abs().to(torch.float64))
    nan_ref, nan_new = reference.isnan(), actual.isnan()
    distances = torch.where(nan_ref ^ nan_new, math.inf, distances)
    return torch.where(nan_ref & nan_new, 0.0, distances)


def _ordered(values: torch.Tensor) -> torch.Tensor:
    """Floats as int64 in the order of their values: neighbours differ by 1, -0.0 is 0."""
    size = values.element_size()
    bits = values.view(SAME_WIDTH_INT[size]).to(torch.int64)
    magnitude = bits & _MAGNITUDE[size]
    return torch.where(bits < 0, -magnitude, magnitude)


def _bits(piece: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D piece as integers of its width, so equal means bit-identical."""
    return piece.view(SAME_WIDTH_INT[piece.element_size()])


def pieces(tensor: torch.Tensor, chunk: int) -> Iterator[torch.Tensor]:
    """The elements in row-major order as 1-D contiguous CPU pieces of at most `chunk`.

    Contiguous tensors give views; others copy one piece at a time. The cut depends on the
    shape only, so two tensors of one shape are cut alike.
    """
    tensor = tensor.detach()
    if tensor.numel() <= chunk:
        yield _flat(tensor)
    elif tensor.dim() == 1:
        for start in range(0, tensor.numel(), chunk):
            yield _flat(tensor[start:start + chunk])
    elif tensor[0].numel() > chunk:
        for row in tensor:
            yield from pieces(row, chunk)
    else:
        step = chunk // tensor[0].numel()
        for start in range(0, tensor.shape[0], step):
            yield _flat(tensor[start:start + step])


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).contiguous().cpu()


def verdict(diff: TensorDiff) -> str:
    """One line that says what kind of change this is."""
    if not diff.floating:
        return "changed behaviour: no rounding changes integers"
    if diff.max_ulps == 0:
        return "in bits only (NaN payload or sign of zero): the values are equal"
    if math.isinf(diff.max_ulps):
        return "a NaN appeared or went: changed behaviour"
    ulps = diff.scaled_ulps
    rounding, small = bands(diff.dtype)
    most = f"at most {_ulps_text(ulps)} at its scale"
    if ulps <= rounding:
        return (f"{most}: rounding-level, as reordered arithmetic gives (another kernel, "
                "summation order, fused operations)")
    if ulps <= small:
        return (f"{most}: beyond one rounding; reordered arithmetic compounded over many "
                "operations, or a small change of behaviour")
    return f"up to {_ulps_text(ulps)} at its scale: changed behaviour, far beyond rounding"


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


def headline(diff: TensorDiff) -> str:
    """The difference in one line: how many elements, the largest change, the verdict."""
    head = f"{diff.differing} of {diff.numel} elements differ"
    largest = diff.largest
    if largest is None:
        return head
    where = diff.where(largest.index)
    if diff.floating and diff.largest_size == 0:
        first = diff.first[0]
        return (f"{head} in bits only (NaN payload or sign of zero); first at "
                f"{diff.where(first.index)} ({_values_text(diff, first, bits=True)})")
    return (f"{head}; max |diff| {diff.largest_size:.3g} at {where} "
            f"({_values_text(diff, largest)}); {verdict(diff)}")


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
    return (f"at the tensor's scale (RMS {diff.rms:.3g}; elements below it measured in ULPs "
            f"of the RMS): at most {_ulps_text(diff.scaled_ulps)}; per element up to "
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


@dataclass(frozen=True)
class Layout:
    """How one tensor holds another's values: its dims permuted, then reshaped."""

    order: tuple[int, ...]
    reshaped: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    """The shapes before and after a reshape that followed the permutation."""

    def __str__(self) -> str:
        return f"same values, {self.how}" if self.how else "bit-identical"

    @property
    def how(self) -> str:
        """The mapping alone: "dims permuted (1, 0, 2)"; "" for none."""
        moved = self.order != tuple(range(len(self.order)))
        permuted = f"dims permuted {self.order}" if moved else ""
        if self.reshaped is None:
            return permuted
        before, after = self.reshaped
        if not moved:
            return f"reshaped from {list(before)} to {list(after)}"
        return f"{permuted}, then reshaped to {list(after)}"


def layout(reference: torch.Tensor, actual: torch.Tensor) -> Layout | None:
    """How `actual` holds `reference`'s values in another layout (a permutation of dims, a
    reshape, or one then the other); None when it does not."""
    if reference.dtype != actual.dtype or reference.numel() != actual.numel() or \
            reference.is_complex():
        return None
    if not torch.equal(_sorted_bits(reference), _sorted_bits(actual)):
        return None  # not even the same values
    dims = range(reference.dim())
    orders = list(permutations(dims)) if reference.dim() <= MAX_PERMUTED else [tuple(dims)]
    exact = [o for o in orders if reference.permute(o).shape == actual.shape]
    for order in [*exact, *(o for o in orders if o not in exact)]:
        moved = reference.permute(order)
        if _bits_equal(moved.reshape(actual.shape), actual):
            reshaped = None if order in exact else (tuple(moved.shape), tuple(actual.shape))
            return Layout(order, reshaped)
    return None


def aligned(reference: torch.Tensor, actual: torch.Tensor, hint: tuple[int, ...] | None
            ) -> tuple[torch.Tensor, Layout] | None:
    """`reference` with its dims permuted into `actual`'s shape, so values can be compared
    where they differ: by `hint` where it fits, else by the one permutation that fits."""
    if reference.dim() != actual.dim() or reference.dim() > MAX_PERMUTED:
        return None
    fits = [o for o in permutations(range(reference.dim()))
            if reference.permute(o).shape == actual.shape]
    order = hint if hint in fits else fits[0] if len(fits) == 1 else None
    if order is None:
        return None
    return reference.permute(order).contiguous(), Layout(order)


def _sorted_bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of their width, sorted: equal for the same values
    in any order."""
    return torch.sort(_bits(_flat(tensor))).values


def _bits_equal(reference: torch.Tensor, actual: torch.Tensor) -> bool:
    return torch.equal(_bits(_flat(reference)), _bits(_flat(actual)))
