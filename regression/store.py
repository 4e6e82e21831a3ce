"""Nested outputs <-> safetensors tensors + a JSON structure. Nothing is pickled."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save_file

from .errors import StoreError
from .files import os_failure, read_checked, temporary_file, umask, write_error
from .fingerprint import file_digest

Node = dict[str, Any]


def float_bits(value: float) -> str:
    """A Python float's exact bits (sign and NaN payload included), as hex."""
    return struct.pack(">d", value).hex()


def path_label(path: tuple[object, ...]) -> str:
    """A readable location inside a nested output, e.g. "[0]['logits']"."""
    return "".join(f"[{p!r}]" for p in path) or "<value>"


class Encoder:
    """Turns one nested value into a JSON structure, collecting its tensors by name."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tensors: dict[str, torch.Tensor] = {}

    def encode(self, value: object, path: tuple[object, ...] = ()) -> Node:
        if isinstance(value, torch.Tensor):
            return {"tensor": self._add(value, path)}
        if value is None:
            return {"none": True}
        if isinstance(value, bool):
            return {"bool": value}
        if isinstance(value, int):
            return {"int": str(value)}
        if isinstance(value, float):
            return {"float": float_bits(value)}
        if isinstance(value, str):
            return {"str": value}
        if isinstance(value, (list, tuple)):
            kind = "list" if isinstance(value, list) else "tuple"
            return {kind: [self.encode(v, (*path, i)) for i, v in enumerate(value)]}
        if isinstance(value, dict):
            bad = [k for k in value if not _plain_key(k)]
            if bad:
                raise StoreError(f"cannot store the dict key {bad[0]!r} at {path_label(path)}: "
                                 "keys must be strings, numbers, booleans, None or tuples "
                                 "of them")
            return {"dict": [[self.encode(k, path), self.encode(v, (*path, k))]
                             for k, v in value.items()]}
        raise StoreError(
            f"cannot store {type(value).__module__}.{type(value).__qualname__} at "
            f"{path_label(path)}: check() takes tensors, numbers, strings, None and "
            "lists, tuples and dicts of them; convert it first (e.g. torch.as_tensor)"
        )

    def _add(self, tensor: torch.Tensor, path: tuple[object, ...]) -> str:
        if tensor.is_meta:
            raise StoreError(f"cannot store a meta tensor at {path_label(path)}: it has no data")
        if tensor.is_complex():
            raise StoreError(f"cannot store a complex tensor at {path_label(path)}: safetensors "
                             "has no complex dtype; check torch.view_as_real(value) instead")
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested:
            raise StoreError(f"cannot store a {tensor.layout} tensor at {path_label(path)}; "
                             "convert it to a dense tensor first (e.g. .to_dense())")
        name = f"{self.prefix}{len(self.tensors)}"
        self.tensors[name] = tensor.detach().to("cpu", copy=True).contiguous()
        return name


def _plain_key(key: object) -> bool:
    if isinstance(key, tuple):
        return all(_plain_key(k) for k in key)
    return key is None or isinstance(key, (str, int, float))


def decode(node: Node, tensors: dict[str, torch.Tensor]) -> object:
    """The value a structure made by Encoder stands for."""
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
        return struct.unpack(">d", bytes.fromhex(content))[0]
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
