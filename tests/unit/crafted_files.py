"""Safetensors-like files made by hand: one valid, the others each broken in one way."""

from __future__ import annotations

import json
import pickle
import struct


def craft(header: dict[str, object] | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors-like file: length, header (JSON unless bytes), data."""
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(body) if length is None else length) + body + data


def entry(dtype: str, shape: list[object], start: int, stop: int) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, stop]}


CRAFTED = {
    "valid": craft({"a": entry("F32", [2], 0, 8)}, bytes(8)),
    "gap": craft({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, bytes(12)),
    "overlap": craft({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, bytes(8)),
    "size-not-shape": craft({"a": entry("F32", [3], 0, 8)}, bytes(8)),
    "trailing-bytes": craft({"a": entry("F32", [2], 0, 8)}, bytes(12)),
    "short-data": craft({"a": entry("F32", [2], 0, 8)}, bytes(4)),
    "unknown-dtype": craft({"a": entry("F128", [1], 0, 16)}, bytes(16)),
    "negative-dim": craft({"a": entry("U8", [-1], 0, 0)}),
    "float-dim": craft({"a": entry("U8", [1.0], 0, 1)}, bytes(1)),
    "bool-dim": craft({"a": entry("U8", [True], 0, 1)}, bytes(1)),
    "extra-field": craft({"a": {**entry("U8", [1], 0, 1), "code": "x"}}, bytes(1)),
    "missing-field": craft({"a": {"dtype": "U8", "shape": [1]}}, bytes(1)),
    "duplicate-name": craft(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                            b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', bytes(1)),
    "nan-constant": craft(b'{"a":{"dtype":"U8","shape":[NaN],"data_offsets":[0,1]}}', bytes(1)),
    "bad-metadata": craft({"__metadata__": {"k": 1}, "a": entry("U8", [1], 0, 1)}, bytes(1)),
    "list-header": craft([entry("U8", [1], 0, 1)], bytes(1)),  # type: ignore[arg-type]
    "not-utf8": craft(b'{"\xff":1}'),
    "header-too-long": craft({"a": entry("U8", [1], 0, 1)}, bytes(1), length=10**6),
    "bool-byte-2": craft({"a": entry("BOOL", [2], 0, 2)}, bytes([1, 2])),
    "pickle": pickle.dumps({"a": [1.0]}),
    "empty": b"",
}
