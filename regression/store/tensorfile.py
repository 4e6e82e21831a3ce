"""The safetensors file layout, built exactly and parsed strictly; no torch, no tensor data.

A file is an 8-byte little-endian header length N, N bytes of JSON naming each tensor's dtype,
shape and byte range, then the tensors' bytes back to back. Parsing applies the safetensors
library's own rules (ranges contiguous from 0 to the end, sizes matching dtype and shape) and
refuses anything else, so what this reads is a valid safetensors file and nothing else.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from dataclasses import dataclass

from regression.store import strictjson

ITEM_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "C64": 8,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
}
LENGTH_BYTES = 8
MAX_HEADER = 100_000_000  # the safetensors library's own limit
HEADER_DEPTH = 3  # {name: {"shape": [...]}}: no header of a valid file nests deeper
_METADATA = "__metadata__"
_FIELDS = {"dtype", "shape", "data_offsets"}


@dataclass(frozen=True)
class Slot:
    """One tensor of a file: its name, dtype name, shape and byte range in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    stop: int


def build_header(tensors: list[tuple[str, str, tuple[int, ...]]]) -> tuple[bytes, list[Slot]]:
    """The bytes before the data, and where each (name, dtype, shape) goes, in writing order.

    Widest dtypes first, then by name, as the safetensors library writes them: with the header
    padded to a multiple of 8 bytes, every tensor starts at a multiple of its item size.
    """
    order = sorted(tensors, key=lambda t: (-ITEM_SIZES[t[1]], t[0]))
    entries: dict[str, object] = {}
    ranges, offset = [], 0
    for name, dtype, shape in order:
        size = math.prod(shape) * ITEM_SIZES[dtype]
        entries[name] = {"dtype": dtype, "shape": list(shape),
                         "data_offsets": [offset, offset + size]}
        ranges.append((offset, offset + size))
        offset += size
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    start = LENGTH_BYTES + len(header)
    slots = [Slot(name, dtype, shape, start + begin, start + end)
             for (name, dtype, shape), (begin, end) in zip(order, ranges)]
    return struct.pack("<Q", len(header)) + header, slots


def header_length(first: bytes, file_size: int) -> int:
    """N from a file's first 8 bytes; ValueError unless the header fits in the file."""
    if len(first) < LENGTH_BYTES or file_size < LENGTH_BYTES:
        raise ValueError("shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", first[:LENGTH_BYTES])
    if length > MAX_HEADER or LENGTH_BYTES + length > file_size:
        raise ValueError(f"header length {length} does not fit a file of {file_size} bytes")
    return int(length)


def parse_header(header: bytes, file_size: int) -> list[Slot]:
    """Every tensor the JSON header names, checked to tile the data exactly; ValueError if not.
    Cases of one suite often store tensors of the same names and shapes: a header seen before
    is not parsed again."""
    return list(_parsed_header(header, file_size))


@functools.lru_cache(maxsize=256)
def _parsed_header(header: bytes, file_size: int) -> tuple[Slot, ...]:
    if not header.startswith(b"{"):
        raise ValueError("the header is not a JSON object")
    try:
        body = strictjson.loads(header, HEADER_DEPTH)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the header is not valid JSON: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"the header {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("the header is not a JSON object")
    start = LENGTH_BYTES + len(header)
    slots = [_slot(name, entry, start) for name, entry in body.items() if name != _METADATA]
    _check_metadata(body.get(_METADATA, {}))
    _check_tiling(sorted(slots, key=lambda s: (s.start, s.stop)), start, file_size)
    return tuple(slots)


def _slot(name: str, entry: object, start: int) -> Slot:
    """One header entry as a Slot, its dtype, shape and size checked."""
    if not isinstance(entry, dict) or set(entry) != _FIELDS:
        raise ValueError(f"tensor {name!r} must have exactly dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in ITEM_SIZES:
        raise ValueError(f"tensor {name!r} has an unknown dtype {dtype!r}")
    if not _naturals(shape) or not _naturals(offsets) or len(offsets) != 2:
        raise ValueError(f"tensor {name!r} has a bad shape or data_offsets")
    if offsets[1] - offsets[0] != math.prod(shape) * ITEM_SIZES[dtype]:
        raise ValueError(f"tensor {name!r}: data_offsets {offsets} do not hold a {dtype} "
                         f"tensor of shape {shape}")
    return Slot(name, dtype, tuple(shape), start + offsets[0], start + offsets[1])


def _naturals(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def _check_metadata(metadata: object) -> None:
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("__metadata__ must map strings to strings")


def _check_tiling(slots: list[Slot], start: int, file_size: int) -> None:
    """The byte ranges must follow each other from the data's start to the file's end."""
    end = start
    for slot in slots:
        if slot.start != end:
            raise ValueError(f"tensor {slot.name!r} does not start where the one before ends")
        end = slot.stop
    if end != file_size:
        raise ValueError(f"the tensors end at byte {end}, the file at byte {file_size}")
