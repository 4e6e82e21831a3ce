"""The JSON form of a stored value, checked without torch: a record is valid only if it decodes.

A value is a tree of one-item nodes: {"tensor": name}, {"digest": {dtype, shape, xxh3,
min, max, mean, std, nan, inf}} (a tensor stored as a digest), {"complex": {"dtype":
"complex64", "view": tensor or digest node}} (a complex tensor, by its real view: its real
and imaginary parts as a last dim of 2, in F16, F32 or F64), {"none": true}, {"bool": b},
{"int": "digits"}, {"float": "16 hex digits"}, {"str": s}, {"list": [node...]},
{"tuple": [node...]}, {"named": {"type": name, "fields": [name...], "values": [node...]}}
(a namedtuple: its type's name and its fields, which code reads by name) and
{"dict": [[key node, value node]...]}. Dict keys are None, bools,
ints, floats, strings or tuples of them, each key at most once. Nothing nests more than
MAX_DEPTH levels. The invoke process checks records with this module and never imports torch.
"""

from __future__ import annotations

import re
import struct

from regression.errors import StoreError

MAX_DEPTH = 100
"""How deep lists, tuples and dicts may nest in a checked value (the value itself is level 0)."""

_SCALARS = frozenset({"none", "bool", "int", "float", "str"})
_INT = re.compile(r"0|-?[1-9][0-9]*")
_FLOAT = re.compile(r"[0-9a-f]{16}")
_DTYPE = re.compile(r"[A-Z][A-Z0-9_]{0,15}")
_XXH3 = re.compile(r"[0-9a-f]{32}")
_DIGEST_FIELDS = frozenset({"dtype", "shape", "xxh3", "min", "max", "mean", "std", "nan", "inf"})
COMPLEX_PARTS = {"complex32": "F16", "complex64": "F32", "complex128": "F64"}
"""Each complex dtype (torch's name) and the safetensors dtype of its parts: a complex tensor
is stored as its real view, torch.view_as_real, with the complex dtype in its node."""


def float_bits(value: float) -> str:
    """A Python float's exact bits (sign and NaN payload included), as hex."""
    return struct.pack(">d", value).hex()


def float_from_bits(bits: str) -> float:
    """The float whose bits float_bits wrote."""
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


def path_label(path: tuple[object, ...]) -> str:
    """A readable location inside a nested output, e.g. "[0]['logits']"."""
    return "".join(f"[{p!r}]" for p in path) or "<value>"


def deep_label(path: tuple[object, ...]) -> str:
    """path_label, shortened in the middle for a path too long to read."""
    if len(path) <= 8:
        return path_label(path)
    return f"{path_label(path[:4])}...{path_label(path[-2:])} ({len(path)} levels)"


def tensor_names(node: object) -> list[str]:
    """The tensor names a stored value refers to; StoreError naming the first malformed node."""
    names: list[str] = []
    _check(node, (), 0, names)
    return names


def _check(node: object, path: tuple[object, ...], depth: int, names: list[str]) -> None:
    kind, content = _one_item(node, path, depth)
    if kind == "tensor":
        if not isinstance(content, str) or not content:
            raise _malformed(path, "a tensor node must hold a tensor name")
        names.append(content)
    elif kind == "digest":
        _digest(content, path)
    elif kind == "complex":
        _complex(content, path, depth, names)
    elif kind in _SCALARS:
        _scalar(kind, content, path)
    elif kind in ("list", "tuple"):
        if not isinstance(content, list):
            raise _malformed(path, f"a {kind} node must hold a list of nodes")
        for i, item in enumerate(content):
            _check(item, (*path, i), depth + 1, names)
    elif kind == "named":
        for i, item in enumerate(_named_values(content, path)):
            _check(item, (*path, i), depth + 1, names)
    elif kind == "dict":
        for key, value in _dict_items(content, path, depth):
            _check(value, (*path, key), depth + 1, names)
    else:
        raise _malformed(path, f"unknown node kind {kind!r}")


_NAMED_FIELDS = frozenset({"type", "fields", "values"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


def _named_values(content: object, path: tuple[object, ...]) -> list[object]:
    """A named node's value nodes, after checking its type name and fields (identifiers,
    one value each, none twice)."""
    if not isinstance(content, dict) or set(content) != _NAMED_FIELDS:
        raise _malformed(path, "a named node must hold its type, fields and values")
    kind, fields, values = content["type"], content["fields"], content["values"]
    if not isinstance(kind, str) or not _IDENTIFIER.fullmatch(kind) or \
            not isinstance(fields, list) or not isinstance(values, list) or \
            not all(isinstance(f, str) and _IDENTIFIER.fullmatch(f) for f in fields) or \
            len(set(fields)) != len(fields) or len(fields) != len(values):
        raise _malformed(path, "a named node's type and fields must be names, one field for "
                         "each value, none twice")
    return values


class NamedValues(tuple):  # type: ignore[type-arg]
    """A namedtuple as stored and compared: its values, its type's name and its fields
    (a namedtuple whose fields were renamed or reordered hands code other values by name)."""

    type_name: str
    fields: tuple[str, ...]

    def __new__(cls, type_name: str, fields: tuple[str, ...], values: object) -> NamedValues:
        made = super().__new__(cls, values)  # type: ignore[arg-type]
        made.type_name, made.fields = type_name, fields
        return made


def named_signature(value: object) -> str | None:
    """A namedtuple's type as code sees it, `Heads(logits, probs)`, stored or not; None for
    any other value."""
    fields = namedtuple_fields(value)
    if fields is None:
        return None
    name = value.type_name if isinstance(value, NamedValues) else type(value).__name__
    return f"{name}({', '.join(fields)})"


def namedtuple_fields(value: object) -> tuple[str, ...] | None:
    """The fields of a namedtuple (a tuple whose type has `_fields`, one name per value);
    None for any other value."""
    if isinstance(value, NamedValues):
        return value.fields
    fields = getattr(type(value), "_fields", None)
    if isinstance(value, tuple) and isinstance(fields, tuple) and len(fields) == len(value) \
            and all(isinstance(f, str) for f in fields):
        return fields
    return None


def _digest(content: object, path: tuple[object, ...]) -> None:
    """Check a digest node's content: every field present, each of its form."""
    if not isinstance(content, dict) or set(content) != _DIGEST_FIELDS:
        raise _malformed(path, "a digest node must hold exactly " +
                         ", ".join(sorted(_DIGEST_FIELDS)))
    shape = content["shape"]
    good = (isinstance(content["dtype"], str) and bool(_DTYPE.fullmatch(content["dtype"]))
            and isinstance(shape, list) and len(shape) <= 64
            and all(_natural(n) for n in shape)
            and isinstance(content["xxh3"], str) and bool(_XXH3.fullmatch(content["xxh3"]))
            and all(content[k] is None or isinstance(content[k], str)
                    and bool(_FLOAT.fullmatch(content[k])) for k in ("min", "max", "mean", "std"))
            and _natural(content["nan"]) and _natural(content["inf"]))
    if not good:
        raise _malformed(path, "an ill-formed digest node")


def _complex(content: object, path: tuple[object, ...], depth: int, names: list[str]) -> None:
    """Check a complex node: its dtype, and the tensor or digest node of its real view."""
    if not isinstance(content, dict) or set(content) != {"dtype", "view"} or \
            content["dtype"] not in COMPLEX_PARTS:
        raise _malformed(path, "a complex node must hold exactly a dtype (one of " +
                         ", ".join(COMPLEX_PARTS) + ") and the view node")
    kind, view = _one_item(content["view"], path, depth + 1)
    if kind not in ("tensor", "digest"):
        raise _malformed(path, f"a complex node's view must be a tensor or digest node, "
                               f"not a {kind!r} node")
    _check(content["view"], path, depth + 1, names)
    if kind == "digest":
        assert isinstance(view, dict)  # checked by _digest
        shape = view["shape"]
        if view["dtype"] != COMPLEX_PARTS[content["dtype"]] or not shape or shape[-1] != 2:
            raise _malformed(path, f"the digest of a {content['dtype']} tensor's real view "
                                   f"must be {COMPLEX_PARTS[content['dtype']]} with a last "
                                   "dim of 2")


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _one_item(node: object, path: tuple[object, ...], depth: int) -> tuple[str, object]:
    """The kind and content of a node, after checking its form and depth."""
    if depth > MAX_DEPTH:
        raise StoreError(f"at {deep_label(path)}: nested more than {MAX_DEPTH} levels deep, "
                         "deeper than any value check() stores")
    if not isinstance(node, dict) or len(node) != 1:
        raise _malformed(path, "a node must be a JSON object with exactly one item")
    ((kind, content),) = node.items()
    return kind, content


def _scalar(kind: str, content: object, path: tuple[object, ...]) -> object:
    """The Python value of a scalar node, after checking its content."""
    if kind == "none" and content is True:
        return None
    if kind == "bool" and isinstance(content, bool) or kind == "str" and isinstance(content, str):
        return content
    if kind == "int" and isinstance(content, str) and _INT.fullmatch(content):
        try:
            return int(content)
        except ValueError:  # past sys.get_int_max_str_digits()
            raise _malformed(path, "an int node holds too many digits") from None
    if kind == "float" and isinstance(content, str) and _FLOAT.fullmatch(content):
        return float_from_bits(content)
    raise _malformed(path, f"an ill-formed {kind} node holding {content!r}")


def _dict_items(content: object, path: tuple[object, ...], depth: int) -> list[tuple[object,
                                                                                     object]]:
    """The (key, value node) pairs of a dict node; keys decoded, each present once."""
    if not isinstance(content, list) or not all(
            isinstance(pair, list) and len(pair) == 2 for pair in content):
        raise _malformed(path, "a dict node must hold a list of [key, value] pairs")
    pairs = [(_key(pair[0], path, depth + 1), pair[1]) for pair in content]
    if len(dict(pairs)) != len(pairs):
        raise _malformed(path, "a dict node holds one key twice")
    return pairs


def _key(node: object, path: tuple[object, ...], depth: int) -> object:
    """The Python value of a dict key node: a scalar or a tuple of keys."""
    kind, content = _one_item(node, path, depth)
    if kind in _SCALARS:
        return _scalar(kind, content, path)
    if kind == "tuple" and isinstance(content, list):
        return tuple(_key(item, path, depth + 1) for item in content)
    raise _malformed(path, f"a dict key must be a scalar or a tuple of them, not a {kind!r} node")


def _malformed(path: tuple[object, ...], problem: str) -> StoreError:
    return StoreError(f"at {deep_label(path)}: {problem}")
