"""How two tensors of one dtype and shape differ, element by element: how many elements,
the largest absolute and relative change, distances in ULPs, the first differing elements,
and the verdict: rounding or changed behaviour, judged on the tensor's own scale. Complex
tensors part by part: real and imaginary.

Works through a chunk of elements at a time, so memory stays the inputs plus small buffers.
Pure: no pytest, no storage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    """Root mean square of the bulk of both tensors' elements: the tensor's own scale."""
    aside: int = 0
    """Elements of both tensors the scale leaves out: non-finite, sentinels (±finfo.max),
    huge outliers; a few of them must not set the scale of the rest."""
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
        position = []
        for size in reversed(self.shape):  # not torch.unravel_index: its first call imports
            index, at = divmod(index, size) if size else (index, 0)  # sympy, 0.7 s
            position.append(at)
        return str(tuple(reversed(position)))


def scan(reference: torch.Tensor, actual: torch.Tensor, chunk: int = CHUNK,
         scale: tuple[torch.Tensor, torch.Tensor] | None = None) -> TensorDiff:
    """Every differing element of two tensors of one (real) dtype and shape, chunk by chunk;
    their scale is the RMS of `scale` where given, else their own."""
    diff = TensorDiff(tuple(reference.shape), reference.numel(), reference.is_floating_point(),
                      reference.dtype)
    offset = 0
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        where = (as_int(ref) != as_int(new)).nonzero().reshape(-1)
        if where.numel():
            _add(diff, offset, where, ref[where], new[where])
        offset += ref.numel()
    if diff.largest is not None and not diff.floating:  # exact, also beyond 2**53
        largest = diff.largest
        diff.largest_size = float(abs(int(largest.actual.item()) - int(largest.reference.item())))
    if diff.differing and diff.floating:  # only then: identical tensors cost one pass
        diff.rms, diff.aside = _rms(*(scale or (reference, actual)), chunk)
        diff.scaled_ulps = _scaled_ulps(reference, actual, diff.rms, chunk)
    return diff


@dataclass
class ComplexDiff:
    """What differs between two complex tensors of one dtype and shape, part by part."""

    differing: int
    """Complex elements whose real or imaginary part (or both) differ."""
    numel: int
    real: TensorDiff
    imag: TensorDiff


def scan_complex(reference: torch.Tensor, actual: torch.Tensor, chunk: int = CHUNK
                 ) -> ComplexDiff:
    """Both parts of two complex tensors of one dtype and shape (no lazy conjugate bit),
    each scanned as a tensor of the complex shape, at the scale of both parts together:
    rounding in complex arithmetic follows the magnitudes, not one part's alone."""
    scale = torch.view_as_real(reference), torch.view_as_real(actual)
    real = scan(reference.real, actual.real, chunk, scale)
    imag = scan(reference.imag, actual.imag, chunk, scale)
    differing = 0
    if real.differing and imag.differing:  # else the one part's count is the count
        for ref_re, new_re, ref_im, new_im in zip(
                *(pieces(part, chunk) for part in (reference.real, actual.real,
                                                   reference.imag, actual.imag))):
            either = (as_int(ref_re) != as_int(new_re)) | (as_int(ref_im) != as_int(new_im))
            differing += int(either.sum())
    return ComplexDiff(differing or real.differing + imag.differing, reference.numel(),
                       real, imag)


OUTLIERS = 20
"""Binades above the median magnitude from which a value is an outlier (a mask's fill such
as -1e9): like non-finite values and sentinels (±finfo.max), it does not set the scale."""
_LOWEST, _EXPONENTS = -1080, 2112
"""The float64 exponents frexp gives (subnormals included), as bins from the lowest."""


def _rms(reference: torch.Tensor, actual: torch.Tensor, chunk: int) -> tuple[float, int]:
    """Root mean square of the bulk of both tensors, their own scale, and how many elements
    were set aside: those non-finite, at a sentinel's size (|x| >= finfo.max / 2, what
    attention masks are filled with) or OUTLIERS binades above the median magnitude."""
    limit = torch.finfo(reference.dtype).max / 2
    median = _median_exponent(reference, actual, chunk, limit)
    ceiling = min(limit, math.ldexp(1.0, median + OUTLIERS))
    squares, counted, aside = 0.0, 0, 0
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        for piece in (ref, new):
            values = piece.to(torch.float64)
            kept = values[values.abs() < ceiling]  # NaN and inf compare False
            squares, counted = squares + float((kept * kept).sum()), counted + kept.numel()
            aside += values.numel() - kept.numel()
    return (math.sqrt(squares / counted) if counted else 0.0), aside


def _median_exponent(reference: torch.Tensor, actual: torch.Tensor, chunk: int,
                     limit: float) -> int:
    """The binary exponent of the median nonzero magnitude below `limit` of both tensors."""
    counts = torch.zeros(_EXPONENTS, dtype=torch.int64)
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        for piece in (ref, new):
            magnitudes = piece.to(torch.float64).abs()
            _, exponents = torch.frexp(magnitudes[(magnitudes > 0) & (magnitudes < limit)])
            counts += torch.bincount(exponents.to(torch.int64) - _LOWEST, minlength=_EXPONENTS)
    total = int(counts.sum())
    if not total:
        return 0
    return int((counts.cumsum(0) >= (total + 1) // 2).nonzero()[0]) + _LOWEST


def _scaled_ulps(reference: torch.Tensor, actual: torch.Tensor, rms: float, chunk: int
                 ) -> float:
    """The largest difference in ULPs at the tensor's scale: rounding moves an element near
    zero by ULPs of the values it was computed from, not of its own (tiny) magnitude."""
    unit = ulp_at(rms, reference.dtype)
    largest = 0.0
    for ref, new in zip(pieces(reference, chunk), pieces(actual, chunk)):
        where = (as_int(ref) != as_int(new)).nonzero().reshape(-1)
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


def as_int(piece: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D piece as integers of its width, so equal means bit-identical."""
    return piece.view(SAME_WIDTH_INT[piece.element_size()])


def pieces(tensor: torch.Tensor, chunk: int) -> Iterator[torch.Tensor]:
    """The elements in row-major order as 1-D contiguous CPU pieces of at most `chunk`.

    Contiguous tensors give views; others copy one piece at a time. The cut depends on the
    shape only, so two tensors of one shape are cut alike.
    """
    tensor = tensor.detach()
    if tensor.numel() <= chunk:
        yield flat_cpu(tensor)
    elif tensor.dim() == 1:
        for start in range(0, tensor.numel(), chunk):
            yield flat_cpu(tensor[start:start + chunk])
    elif tensor[0].numel() > chunk:
        for row in tensor:
            yield from pieces(row, chunk)
    else:
        step = chunk // tensor[0].numel()
        for start in range(0, tensor.shape[0], step):
            yield flat_cpu(tensor[start:start + step])


def flat_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).contiguous().cpu()
