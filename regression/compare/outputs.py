"""Bitwise comparison of a stored value with a new one. Pure: no pytest here."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterator

import torch

from regression.nodes import float_bits, named_signature, path_label
from regression.store.tensorbytes import DTYPES as STORED_DTYPES
from regression.store.tensorbytes import complex_name, dtype_name, resolved
from regression.store.digest import TensorDigest, digest_tensor, tensor_xxh3
from regression.compare.tensordiff import CHUNK, SAME_WIDTH_INT, scan, scan_complex
from regression.compare.tensordiff_text import (complex_headline, complex_report_lines, headline,
                                                report_lines, rounding_level)


VALUES, SHAPES, DTYPES, ORDER = "values", "shapes", "dtypes", "order"
MISSING, ADDED = "keys missing", "keys added"
KINDS = (VALUES, SHAPES, MISSING, ADDED, DTYPES, ORDER)
"""What a difference is about, the most telling first: a one-line summary names that one."""
KEY_KINDS = (MISSING, ADDED)
"""Keys a mapping lost or gained: counted by key, never as a shape."""


@dataclass(frozen=True)
class Difference:
    """One leaf of an output that is not bit-identical to the reference."""

    path: str
    detail: str
    differing: int = 0
    max_abs: float | None = None
    max_relative: float | None = None
    """The largest |actual - reference| / |reference| of a float tensor (inf where the
    reference is 0); None for other values."""
    lines: tuple[str, ...] = ()
    """The full report under the one-line detail (sizes, ULPs, first elements)."""
    kind: str = VALUES
    """One of KINDS: shapes also stands for other structure (types, lengths); for MISSING
    and ADDED, `differing` is the number of keys."""
    rounding: bool = False
    """Whether the verdict reads it as rounding-level; False for changed behaviour and for
    what no verdict measures (structure, digests)."""

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"

    def report(self) -> list[str]:
        """This difference in full: its line, then the report indented under it."""
        return [str(self), *(f"    {line}" for line in self.lines)]


def compare(reference: object, actual: object, name: str = "") -> list[Difference]:
    """Every difference between two nested values; empty when they are bit-identical."""
    if _identical_tensors(reference, actual):
        return []  # most checks: one tensor, unchanged; its labels are never made
    return [replace(d, path=name + d.path.removeprefix("<value>") if name else d.path)
            for d in _compare(reference, actual, ())]


def compare_outputs(before: dict[str, object], after: dict[str, object]
                    ) -> list[tuple[str, list[Difference]]]:
    """Two recordings of one case, outputs by name: each output that differs (or that only
    one of them has), with its differences, in order of name as first seen."""
    changed = []
    for name in dict.fromkeys([*before, *after]):
        if name not in before or name not in after:
            changed.append((name, [Difference(repr(name), "present in one recording only")]))
        else:
            differences = compare(before[name], after[name], name=repr(name))
            if differences:
                changed.append((name, differences))
    return changed


def _compare(reference: object, actual: object, path: tuple[object, ...]) -> Iterator[Difference]:
    label = path_label(path)
    if _kind(reference) != _kind(actual):
        yield Difference(label, f"{_describe(actual)}, reference {_describe(reference)}",
                         kind=SHAPES)
    elif isinstance(reference, TensorDigest) or isinstance(actual, TensorDigest):
        difference = compare_digest(reference, actual, label)  # type: ignore[arg-type]
        if difference:
            yield difference
    elif isinstance(reference, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        difference = compare_tensors(reference, actual, label)
        if difference:
            yield difference
    elif isinstance(reference, (list, tuple)):
        assert isinstance(actual, (list, tuple))
        if len(reference) != len(actual):
            yield Difference(label, f"length {len(actual)}, reference {len(reference)}",
                             kind=SHAPES)
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
        yield Difference(label, f"keys missing: {_describe_keys(missing, extra)}",
                         differing=len(missing), kind=MISSING)
    if extra:
        yield Difference(label, f"keys not in reference: {_describe_keys(extra, missing)}",
                         differing=len(extra), kind=ADDED)
    inner = [difference for identity, key in ref_keys.items() if identity in new_keys
             for difference in _compare(reference[key], actual[new_keys[identity]],
                                        (*path, key))]
    if not missing and not extra and list(ref_keys) != list(new_keys):
        detail = "same keys in another order" if inner else \
            "same keys and values, in another order: only the key order differs"
        yield Difference(label, detail, kind=ORDER)
    yield from inner


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


def _describe_keys(keys: list[object], others: list[object]) -> str:
    """The keys as their reprs; with its type where Python would take a key for one of
    `others` (1, 1.0 and True; 0.0 and -0.0; NaNs), since only that tells them apart."""
    return ", ".join(_key_text(k) + (f" ({type(k).__name__})" if _confusable(k, others) else "")
                     for k in keys)


def _confusable(key: object, others: list[object]) -> bool:
    return any(_loosely_equal(key, other) for other in others)


def _loosely_equal(one: object, other: object) -> bool:
    """Whether two keys are equal as Python compares them, NaNs equal to each other."""
    if isinstance(one, tuple) and isinstance(other, tuple):
        return len(one) == len(other) and all(map(_loosely_equal, one, other))
    if isinstance(one, float) and isinstance(other, float) and math.isnan(one) and \
            math.isnan(other):
        return True
    try:
        return bool(one == other)
    except Exception:  # noqa: BLE001 - a key whose == raises is no match
        return False


def _key_text(key: object) -> str:
    """repr of a key, with each NaN's bits, since NaNs differ by payload."""
    if isinstance(key, tuple):
        inner = ", ".join(_key_text(k) for k in key)
        return f"({inner},)" if len(key) == 1 else f"({inner})"
    if isinstance(key, float) and math.isnan(key):
        return f"nan[{float_bits(key)}]"
    return repr(key)


def _kind(value: object) -> str:
    if isinstance(value, (torch.Tensor, TensorDigest)):
        return "tensor"
    named = named_signature(value)
    return type(value).__name__ if named is None else f"namedtuple {named}"  # read by name


def _describe(value: object) -> str:
    if isinstance(value, (torch.Tensor, TensorDigest)):
        return f"tensor {_signature(value)}"
    named = named_signature(value)
    if named is not None:
        return f"namedtuple {named} of {len(value)}"  # type: ignore[arg-type]
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} {value!r}"


def _signature(tensor: torch.Tensor | TensorDigest) -> str:
    if isinstance(tensor, TensorDigest):
        return f"{_DTYPE_NAMES.get(tensor.dtype, tensor.dtype)}{list(tensor.shape)}"
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"


FULL_VALUES = ("the reference kept only a digest of these bytes and the summary above, not "
               "the values: `invoke test --full-values` records them at the reference and "
               "reports the difference in full; `invoke explain CASE` traces where it starts")


def compare_digest(reference: torch.Tensor | TensorDigest, actual: torch.Tensor | TensorDigest,
                   label: str = "<value>") -> Difference | None:
    """The difference between tensors of which one (or both) is stored as a digest: dtype,
    shape and the xxh3-128 of the bytes; None when all three are equal."""
    if _dtype_of(reference) != _dtype_of(actual):
        return Difference(label, f"dtype {_signature(actual)}, reference {_signature(reference)}",
                          kind=DTYPES)
    if tuple(reference.shape) != tuple(actual.shape):
        return Difference(label, f"shape {_signature(actual)}, reference {_signature(reference)}",
                          kind=SHAPES)
    if _xxh3(reference) == _xxh3(actual):
        return None
    before, after = _digest(reference), _digest(actual)
    return Difference(label, f"{_signature(actual)}: its bytes differ from the reference's "
                             "(a digest: the values were not stored)",
                      lines=(f"reference: {before.summary()}", f"now:       {after.summary()}",
                             FULL_VALUES))


def _identical_tensors(reference: object, actual: object) -> bool:
    """Whether two values are real CPU tensors of one dtype and shape with the same bits:
    what compare_tensors would find no difference in, asked first (False: look further)."""
    return isinstance(reference, torch.Tensor) and isinstance(actual, torch.Tensor) and \
        reference.dtype == actual.dtype and reference.shape == actual.shape and \
        not reference.is_complex() and _same_bits(reference, actual)


def _same_bits(reference: torch.Tensor, actual: torch.Tensor) -> bool:
    """Whether two CPU tensors of one dtype and shape hold the same bits (False elsewhere:
    the chunked scan then decides, copying a piece at a time)."""
    if reference.device.type != "cpu" or actual.device.type != "cpu":
        return False
    integers = SAME_WIDTH_INT[reference.element_size()]
    return bool(torch.equal(reference.view(integers), actual.view(integers)))


def _dtype_of(value: torch.Tensor | TensorDigest) -> str:
    """A digest's dtype name; a tensor's, named as its digest would name it."""
    if isinstance(value, TensorDigest):
        return value.dtype
    return complex_name(value.dtype) if value.is_complex() else dtype_name(value.dtype)


def _xxh3(value: torch.Tensor | TensorDigest) -> str:
    return value.xxh3 if isinstance(value, TensorDigest) else tensor_xxh3(value)


def _digest(value: torch.Tensor | TensorDigest) -> TensorDigest:
    return value if isinstance(value, TensorDigest) else digest_tensor(value)


_DTYPE_NAMES = {name: str(dtype).removeprefix("torch.")
                for name, dtype in STORED_DTYPES.items()}


def _scalar_bits(value: object) -> object:
    """Floats by their bits, so -0.0 and 0.0 differ and NaN equals itself."""
    return float_bits(value) if isinstance(value, float) else value


def compare_tensors(reference: torch.Tensor, actual: torch.Tensor, label: str = "<value>",
                    *, chunk: int = CHUNK, weight: bool = False) -> Difference | None:
    """The difference between two tensors, None when dtype, shape and bytes are equal;
    `weight`: values not computed (a weight as initialised), judged as such.

    Works through `chunk` elements at a time, so memory stays the inputs plus small buffers.
    """
    if reference.dtype != actual.dtype:
        return Difference(label, f"dtype {_signature(actual)}, reference {_signature(reference)}",
                          kind=DTYPES)
    if reference.shape != actual.shape:
        return Difference(label, f"shape {_signature(actual)}, reference {_signature(reference)}",
                          kind=SHAPES)
    if reference.is_complex():
        return _compare_complex(resolved(reference), resolved(actual), label, chunk)
    if _same_bits(reference, actual):
        return None  # the common case, in one pass with no copy: most cases are identical
    diff = scan(reference, actual, chunk)
    if not diff.differing:
        return None
    return Difference(label, f"{_signature(actual)}: {headline(diff, weight)}",
                      differing=diff.differing, max_abs=diff.largest_size,
                      max_relative=diff.relative_size if diff.floating else None,
                      lines=tuple(report_lines(diff)), rounding=rounding_level(diff, weight))


def _compare_complex(reference: torch.Tensor, actual: torch.Tensor, label: str, chunk: int
                     ) -> Difference | None:
    """The difference between two complex tensors of one dtype and shape, part by part:
    which part, real or imaginary, differs and by how much."""
    if _same_bits(torch.view_as_real(reference), torch.view_as_real(actual)):
        return None
    diff = scan_complex(reference, actual, chunk)
    if not diff.differing:
        return None
    parts = [part for part in (diff.real, diff.imag) if part.differing]
    return Difference(label, f"{_signature(actual)}: {complex_headline(diff)}",
                      differing=diff.differing,
                      max_abs=max(part.largest_size for part in parts),
                      max_relative=max(part.relative_size for part in parts),
                      lines=tuple(complex_report_lines(diff)),
                      rounding=all(rounding_level(part) for part in parts))
