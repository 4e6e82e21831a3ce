"""JSON parsed within bounds: nesting, numbers and keys are checked, so crafted text is an error.

The standard parser recurses once per level (a header nested 200,000 deep is a RecursionError),
turns `1e999` into infinity, accepts NaN and takes the last of two equal keys. Text from a file
that anyone with write access could have made is parsed here instead, and every such case is
a ValueError that names it. A leaf: it imports nothing of ours.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from itertools import accumulate

MAX_DIGITS = 20  # an unsigned 64-bit integer; nothing this tool writes has more
MAX_NUMBER_TEXT = 32  # characters of a float; time.time() and the like need 18

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_LEVELS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def nesting(data: bytes) -> int:
    """How deep arrays and objects nest in JSON text, counted without parsing it."""
    steps = _STRING.sub(b"", data).translate(_LEVELS, _NOT_BRACKET)
    return max(accumulate(array("b", steps)), default=0)


def loads(data: bytes, max_depth: int) -> object:
    """The value of UTF-8 JSON text; json.JSONDecodeError where it is not JSON, and ValueError,
    saying what the text does, where it nests deeper than `max_depth`, holds a number out of
    range, NaN or Infinity, or names a key twice in one object."""
    # no deeper than it has brackets: most texts need not be measured
    depth = nesting(data) if data.count(b"[") + data.count(b"{") > max_depth else 0
    if depth > max_depth:
        raise ValueError(f"nests too deeply ({depth} levels, more than {max_depth})")
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys,
                          parse_int=_int, parse_float=_float, parse_constant=_constant)
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text: {exc}") from None
    except RecursionError:  # only where the caller's own stack is already deep
        raise ValueError("nests too deeply to read") from None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object's items, each key at most once: of two, the last would silently win."""
    body = dict(pairs)
    if len(body) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"names the key {key[:80]!r} twice in one object")
            seen.add(key)
    return body


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise ValueError(f"holds an integer of {digits} digits, more than {MAX_DIGITS}")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if len(text) > MAX_NUMBER_TEXT or not math.isfinite(value):
        raise ValueError(f"holds the number {text[:40]}, out of range")
    return value


def _constant(text: str) -> float:
    raise ValueError(f"holds {text}, which is not a JSON number")
