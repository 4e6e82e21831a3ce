"""Bitwise comparison of a stored value with a new one. Pure: no pytest here."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
import math
from typing import Iterator

import torch

from .store import float_bits, path_label

_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHUNK = 1 << 20  # elements compared at a time


@dataclass(frozen=True)
class Difference:
    """One leaf of an output that is not bit-identical to the reference."""

    path: str
    detail: str
    differing: int = 0
    max_abs: float | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


def compare(reference: object, actual: object, name: str = "") -> list[Difference]:
    """Every difference between two nested values; empty when they are bit-identical."""
    return [replace(d, path=name + d.path.removeprefix("<value>") if name else d.path)
            for d in _compare(reference, actual, ())]


def _compare(reference: object, actual: object, path: tuple[object, ...]) -> Iterator[Difference]:
    label = path_label(path)
    if _kind(reference) != _kind(actual):
        yield Difference(label, f"{_describe(actual)}, reference {_describe(reference)}")
    elif isinstance(reference, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        difference = compare_tensors(reference, actual, label)
        if difference:
            yield difference
    elif isinstance(reference, (list, tuple)):
        assert isinstance(actual, (list, tuple))
        if len(reference) != len(actual):
            yield Difference(label, f"length {len(actual)}, reference {len(reference)}")
        for i, (r, a) in enumerate(zip(reference, actual)):
            yield from _compare(r, a, (*path, i))
    elif isinstance(reference, dict):
        assert isinstance(actual, dict)
        yield from _compare_dicts(reference, actual, path)
    elif _scalar_bits(reference) != _scalar_bits(actual):
        yield Difference(label, f"{actual!r}, reference {reference!r}")


def _compare_dicts(reference: dict[object, object], actual: dict[object, object],
                   path: tuple[object, ...]) -> Iterator[Difference]:
    label = path_label(path)
    ref_keys, new_keys = _keys_by_identity(reference), _keys_by_identity(actual)
    missing = [k for i, k in ref_keys.items() if i not in new_keys]
    extra = [k for i, k in new_keys.items() if i not in ref_keys]
    if missing:
        yield Difference(label, f"keys missing: {_describe_keys(missing)}")
    if extra:
        yield Difference(label, f"keys not in reference: {_describe_keys(extra)}")
    if not missing and not extra and list(ref_keys) != list(new_keys):
        yield Difference(label, "same keys in another order")
    for identity, key in ref_keys.items():
        if identity in new_keys:
            yield from _compare(reference[key], actual[new_keys[identity]], (*path, key))


def _keys_by_identity(value: dict[object, object]) -> dict[object, object]:
    """The keys of a dict under their identities; equal-bit NaN keys by their rank."""
    seen: Counter[object] = Counter()
    keys: dict[object, object] = {}
    for key in value:
        identity = _key_identity(key)
        keys[(identity, seen[identity])] = key
        seen[identity] += 1
    return keys


def _key_identity(key: object) -> object:
    """A dict key by type and bits, as values are compared: 1, 1.0 and True are three keys,
    and so are 0.0 and -0.0."""
    if isinstance(key, tuple):
        return ("tuple", tuple(_key_identity(k) for k in key))
    return (type(key).__qualname__, _scalar_bits(key))


def _describe_keys(keys: list[object]) -> str:
    return ", ".join(f"{_key_text(k)} ({type(k).__name__})" for k in keys)


def _key_text(key: object) -> str:
    """repr of a key, with each NaN's bits, since NaNs differ by payload."""
    if isinstance(key, tuple):
        inner = ", ".join(_key_text(k) for k in key)
        return f"({inner},)" if len(key) == 1 else f"({inner})"
    if isinstance(key, float) and math.isnan(key):
        return f"nan[{float_bits(key)}]"
    return repr(key)


def _kind(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    return type(value).__name__


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {_signature(value)}"
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} {value!r}"


def _signature(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"


def _scalar_bits(value: object) -> object:
    """Floats by their bits, so -0.0 and 0.0 differ and NaN equals itself."""
    return float_bits(value) if isinstance(value, float) else value


def _bits(piece: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D piece as integers of its width, so equal means bit-identical."""
    return piece.view(_SAME_WIDTH_INT[piece.element_size()])


def compare_tensors(reference: torch.Tensor, actual: torch.Tensor, label: str = "<value>",
                    *, chunk: int = _CHUNK) -> Difference | None:
    """The difference between two tensors, None when dtype, shape and bytes are equal.

    Works through `chunk` elements at a time, so memory stays the inputs plus small buffers.
    """
    if reference.dtype != actual.dtype:
        return Difference(label, f"dtype {_signature(actual)}, reference {_signature(reference)}")
    if reference.shape != actual.shape:
        return Difference(label, f"shape {_signature(actual)}, reference {_signature(reference)}")
    if reference.is_complex():
        reference, actual = torch.view_as_real(reference), torch.view_as_real(actual)
    count, change = _scan(reference, actual, chunk)
    if change is None:
        return None
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(change.index),
                                                        reference.shape))
    where = str(index) if reference.dim() else "()"
    head = f"{_signature(actual)}: {count} of {reference.numel()} elements differ"
    if reference.is_floating_point() and change.size == 0:
        detail = (f"{head} in bits only (NaN payload or sign of zero); first at {where} "
                  f"({_values(change)})")
    else:
        detail = f"{head}; max |diff| {change.size:.3g} at {where} ({_values(change)})"
    return Difference(label, detail, differing=count, max_abs=change.size)


@dataclass(frozen=True)
class _Change:
    """The largest change found: its flat index, its size and both elements (0-dim, CPU)."""

    index: int
    size: float
    reference: torch.Tensor
    actual: torch.Tensor


def _scan(reference: torch.Tensor, actual: torch.Tensor,
          chunk: int) -> tuple[int, _Change | None]:
    """How many elements differ, and the largest change (the first of equals), chunk by chunk."""
    count, best, offset = 0, None, 0
    for ref, new in zip(_pieces(reference, chunk), _pieces(actual, chunk)):
        where = (_bits(ref) != _bits(new)).nonzero().reshape(-1)
        if where.numel():
            count += where.numel()
            position, size = _largest(ref[where], new[where])
            if best is None or size > best.size:
                at = int(where[position])
                best = _Change(offset + at, size, ref[at].clone(), new[at].clone())
        offset += ref.numel()
    if best is not None and not best.reference.is_floating_point():
        best = replace(best, size=float(abs(int(best.actual.item()) - int(best.reference.item()))))
    return count, best


def _pieces(tensor: torch.Tensor, chunk: int) -> Iterator[torch.Tensor]:
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
            yield from _pieces(row, chunk)
    else:
        step = chunk // tensor[0].numel()
        for start in range(0, tensor.shape[0], step):
            yield _flat(tensor[start:start + step])


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).contiguous().cpu()


def _largest(reference: torch.Tensor, actual: torch.Tensor) -> tuple[int, float]:
    """The position and size of the largest change among differing elements.

    A NaN that appears or goes is infinitely far; a NaN that only changed its payload (or a
    zero its sign) is a change of size 0: its bits differ, its value does not.
    """
    if reference.dtype == torch.bool:
        reference, actual = reference.to(torch.int64), actual.to(torch.int64)
    size = (actual.to(torch.float64) - reference.to(torch.float64)).abs()
    if reference.is_floating_point():
        size = torch.where(size.isnan(), math.inf, size)
        size = torch.where(reference.isnan() & actual.isnan(), 0.0, size)
    position = int(torch.argmax(size))
    return position, float(size[position])


def _values(change: _Change) -> str:
    """Both elements; with their bits where the value alone would hide the change."""
    ref, new = change.reference.item(), change.actual.item()
    if change.reference.is_floating_point() and (
            change.size == 0 or math.isnan(ref) or math.isnan(new)):
        return (f"reference {ref!r} ({_hex_bits(change.reference)}), "
                f"now {new!r} ({_hex_bits(change.actual)})")
    return f"reference {ref!r}, now {new!r}"


def _hex_bits(element: torch.Tensor) -> str:
    """One element's bits in hex, as wide as its dtype (0x7fc00000 for a float32 NaN)."""
    width = element.element_size() * 8
    bits = int(element.reshape(1).view(_SAME_WIDTH_INT[element.element_size()]).item())
    return f"0x{bits & ((1 << width) - 1):0{width // 4}x}"
