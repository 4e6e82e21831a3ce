"""Nested outputs <-> safetensors tensors + a JSON structure. Nothing is pickled."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save_file

from .errors import StoreError
from .files import os_failure, read_checked, temporary_file, umask, write_error
from .fingerprint import file_digest
from .nodes import MAX_DEPTH, deep_label, float_from_bits
from .nodes import float_bits as float_bits  # compare.py and tests read them from here
from .nodes import path_label as path_label

Node = dict[str, Any]


class Encoder:
    """Turns one nested value into a JSON structure, collecting its tensors by name."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tensors: dict[str, torch.Tensor] = {}

    def encode(self, value: object, path: tuple[object, ...] = ()) -> Node:
        """The node of `value`; StoreError for what cannot be stored or nests too deep."""
        return self._encode(value, path, 0)

    def _encode(self, value: object, path: tuple[object, ...], depth: int) -> Node:
        _require_depth(path, depth)
        if isinstance(value, torch.Tensor):
            return {"tensor": self._add(value, path)}
        scalar = _scalar_node(value, path)
        if scalar is not None:
            return scalar
        if isinstance(value, (list, tuple)):
            kind = "list" if isinstance(value, list) else "tuple"
            return {kind: [self._encode(v, (*path, i), depth + 1) for i, v in enumerate(value)]}
        if isinstance(value, dict):
            return {"dict": [self._item(k, v, path, depth + 1) for k, v in value.items()]}
        raise StoreError(
            f"cannot store {type(value).__module__}.{type(value).__qualname__} at "
            f"{path_label(path)}: check() takes tensors, numbers, strings, None and "
            "lists, tuples and dicts of them; convert it first (e.g. torch.as_tensor)"
        )

    def _item(self, key: object, value: object, path: tuple[object, ...], depth: int
              ) -> list[Node]:
        """A dict item's [key, value] nodes; the value first, so depth errors name its path."""
        value_node = self._encode(value, (*path, key), depth)
        return [_key_node(key, key, path, depth), value_node]

    def _add(self, tensor: torch.Tensor, path: tuple[object, ...]) -> str:
        problem = _tensor_problem(tensor, path_label(path))
        if problem:
            raise StoreError(f"cannot store {problem}")
        name = f"{self.prefix}{len(self.tensors)}"
        self.tensors[name] = tensor.detach().to("cpu", copy=True).contiguous()
        return name


def _tensor_problem(tensor: torch.Tensor, at: str) -> str:
    """Why safetensors cannot hold `tensor` and what to check instead ("" when it can)."""
    if tensor.is_meta:
        return f"a meta tensor at {at}: it has no data"
    if tensor.is_complex():
        return (f"a complex tensor at {at}: safetensors has no complex dtype; check "
                "torch.view_as_real(value) instead")
    if tensor.is_quantized:
        return (f"a quantized tensor ({tensor.dtype}) at {at}: safetensors has no quantized "
                "dtype; check value.dequantize() (its float values) or value.int_repr() (its "
                "stored integers) instead")
    if tensor.is_nested:
        return (f"a nested tensor at {at}: safetensors stores only dense tensors; check "
                "value.unbind() (its parts) or torch.nested.to_padded_tensor(value, 0.0) instead")
    if tensor.layout != torch.strided:
        return (f"a {tensor.layout} tensor at {at}: safetensors stores only dense tensors; "
                "check value.to_dense() instead")
    return ""


def _require_depth(path: tuple[object, ...], depth: int, what: str = "the value") -> None:
    if depth > MAX_DEPTH:
        raise StoreError(
            f"cannot store {what} at {deep_label(path)}: it is nested more than {MAX_DEPTH} "
            "levels deep (lists, tuples and dicts inside each other; a list that contains "
            "itself never ends); check() a flatter value, e.g. a dict of its parts"
        )


def _scalar_node(value: object, path: tuple[object, ...]) -> Node | None:
    """The node of None, a bool, int, float or string; None for anything else."""
    if value is None:
        return {"none": True}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        try:
            return {"int": str(int(value))}
        except ValueError:  # more digits than sys.get_int_max_str_digits() allows
            raise StoreError(f"cannot store the int at {path_label(path)}: it has more digits "
                             "than Python writes in decimal; check hex(value) instead") from None
    if isinstance(value, float):
        return {"float": float_bits(value)}
    if isinstance(value, str):
        return {"str": str(value)}
    return None


def _key_node(key: object, whole: object, path: tuple[object, ...], depth: int) -> Node:
    """The node of a dict key (`whole` is the key this one is part of, for the message)."""
    _require_depth(path, depth, "a dict key")
    if isinstance(key, tuple):
        return {"tuple": [_key_node(k, whole, path, depth + 1) for k in key]}
    scalar = _scalar_node(key, path)
    if scalar is None:
        raise StoreError(f"cannot store the dict key {whole!r} at {path_label(path)}: keys must "
                         "be strings, numbers, booleans, None or tuples of them")
    return scalar


def decode(node: Node, tensors: dict[str, torch.Tensor]) -> object:
    """The value a structure made by Encoder, or checked by nodes.tensor_names, stands for."""
    (kind, content), = node.items()
    if kind == "tensor":
        return tensors[content]
    if kind == "none":
        return None
    if kind in ("bool", "str"):
        return content
    if kind == "int":
        return int(content)
    if kind == "float":
        return float_from_bits(content)
    if kind == "list":
        return [decode(n, tensors) for n in content]
    if kind == "tuple":
        return tuple(decode(n, tensors) for n in content)
    if kind == "dict":
        return {decode(k, tensors): decode(v, tensors) for k, v in content}
    raise StoreError(f"unknown node kind {kind!r}")


def save_tensors(folder: Path, stem: str, tensors: dict[str, torch.Tensor]) -> tuple[str, str]:
    """Write tensors atomically as `<stem>.<hash>.safetensors`; returns (file name, hash)."""
    with temporary_file(folder, stem) as temporary:
        try:
            save_file(tensors, str(temporary))
        except (SafetensorError, ValueError, TypeError, KeyError, RuntimeError) as exc:
            failure = os_failure(exc)  # a full disk is not the dtypes' fault
            if failure is not None:
                raise write_error(folder / f"{stem}.safetensors", failure) from None
            dtypes = sorted({str(t.dtype) for t in tensors.values()})
            raise StoreError(f"safetensors cannot store these tensors ({', '.join(dtypes)}): "
                             f"{exc}") from None
        temporary.chmod(0o666 & ~umask())  # safetensors wrote a new 0600 file
        content_digest = file_digest(temporary)
        name = f"{stem}.{content_digest[:16]}.safetensors"
        os.replace(temporary, folder / name)
    return name, content_digest


def tensors_from_file(path: Path, expected_digest: str) -> dict[str, torch.Tensor]:
    """Tensors from a safetensors file, after checking its content hash."""
    data = read_checked(path, expected_digest)
    try:
        return load_tensors(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise StoreError(f"{path} is not a valid safetensors file: {exc}") from None
