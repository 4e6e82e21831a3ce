"""Nested outputs <-> safetensors tensors + a JSON structure. Nothing is pickled."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol

import torch

from regression.errors import StoreError
from regression.store.files import Layout, read_tensor_file, temporary_file
from regression.environment.fingerprint import content_hasher
from regression.nodes import COMPLEX_PARTS, MAX_DEPTH, NamedValues, deep_label, float_bits, \
    float_from_bits, namedtuple_fields, path_label
from regression.store.digest import TensorDigest, digest_tensor
from regression.store.tensorbytes import DTYPES, NAMES, byte_blocks, complex_name, dtype_name, \
    resolved
from regression.store.tensorfile import LENGTH_BYTES, Slot, build_header, header_length, \
    parse_header

Node = dict[str, Any]


class Encoder:
    """Turns one nested value into a JSON structure, collecting its tensors by name."""

    def __init__(self, prefix: str, copy: bool = True, digest_above: int | None = None) -> None:
        self.prefix = prefix
        self.copy = copy  # False: detached views, for a value used before its owner can edit it
        self.digest_above = digest_above
        """Tensors of more bytes than this are kept as digests (None: never)."""
        self.tensors: dict[str, torch.Tensor] = {}

    def encode(self, value: object, path: tuple[object, ...] = ()) -> Node:
        """The node of `value`; StoreError for what cannot be stored or nests too deep."""
        return self._encode(value, path, 0)

    def _encode(self, value: object, path: tuple[object, ...], depth: int) -> Node:
        _require_depth(path, depth)
        if isinstance(value, torch.Tensor):
            return self._tensor_node(value, path)
        if isinstance(value, TensorDigest):
            return digest_node(value)
        scalar = _scalar_node(value, path)
        if scalar is not None:
            return scalar
        fields = namedtuple_fields(value)
        if fields is not None:
            assert isinstance(value, tuple)
            return {"named": {"type": value.type_name if isinstance(value, NamedValues)
                              else type(value).__name__, "fields": list(fields),
                              "values": [self._encode(v, (*path, i), depth + 1)
                                         for i, v in enumerate(value)]}}
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

    def _tensor_node(self, tensor: torch.Tensor, path: tuple[object, ...]) -> Node:
        """A tensor's node: its values by name, or its digest where it is large enough; a
        complex tensor's holds those of its real view, under its complex dtype."""
        if tensor.layout != torch.strided or tensor.is_meta or tensor.is_quantized or \
                tensor.is_nested:  # what _tensor_problem names; its label made only then
            raise StoreError(f"cannot store {_tensor_problem(tensor, path_label(path))}")
        if self.digest_above is not None and \
                tensor.numel() * tensor.element_size() > self.digest_above:
            if not tensor.is_complex():
                dtype_name(tensor.dtype, path_label(path))
            return digest_node(digest_tensor(tensor))
        if tensor.is_complex():
            view = torch.view_as_real(resolved(tensor.detach()))
            return {"complex": {"dtype": complex_name(tensor.dtype),
                                "view": {"tensor": self._add(view)}}}
        return {"tensor": self._add(tensor)}

    def _add(self, tensor: torch.Tensor) -> str:
        name = f"{self.prefix}{len(self.tensors)}"
        tensor = resolved(tensor.detach())
        self.tensors[name] = tensor.to("cpu", copy=True).contiguous() if self.copy else tensor
        return name


def digest_node(digest: TensorDigest) -> Node:
    """The node of a digest: a complex tensor's holds its real view's, under its dtype."""
    node = {"digest": digest.real_view().node()}
    return {"complex": {"dtype": digest.dtype, "view": node}} if digest.is_complex else node


def complex_view(view: torch.Tensor, dtype: str) -> torch.Tensor:
    """The complex tensor of torch dtype `dtype` whose real view was stored as `view`;
    StoreError when `view` cannot be one (another dtype, no last dim of 2)."""
    parts = DTYPES.get(COMPLEX_PARTS.get(dtype, ""))
    if view.dtype != parts or view.dim() == 0 or view.shape[-1] != 2:
        raise StoreError(f"a stored {dtype} tensor's real view is {view.dtype} of shape "
                         f"{list(view.shape)}, not {parts} with a last dim of 2")
    if view.stride(-1) != 1 or any(stride % 2 for stride in view.stride()[:-1]) or \
            view.storage_offset() % 2 or view.data_ptr() % (2 * view.element_size()):
        view = view.clone(memory_format=torch.contiguous_format)  # e.g. a file's, misaligned
    return torch.view_as_complex(view)


def _tensor_problem(tensor: torch.Tensor, at: str) -> str:
    """Why safetensors cannot hold `tensor` and what to check instead ("" when it can)."""
    if tensor.is_meta:
        return f"a meta tensor at {at}: it has no data"
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
    if kind == "digest":
        return TensorDigest.from_node(content)
    if kind == "complex":
        view = decode(content["view"], tensors)
        if isinstance(view, TensorDigest):
            return view.of_complex(content["dtype"])
        assert isinstance(view, torch.Tensor)  # a tensor node (nodes.tensor_names checks)
        return complex_view(view, content["dtype"])
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
    if kind == "named":
        return NamedValues(content["type"], tuple(content["fields"]),
                           [decode(n, tensors) for n in content["values"]])
    if kind == "dict":
        return {decode(k, tensors): decode(v, tensors) for k, v in content}
    raise StoreError(f"unknown node kind {kind!r}")


def save_tensors(folder: Path, stem: str, tensors: dict[str, torch.Tensor]) -> tuple[str, str]:
    """Write tensors atomically as `<stem>.<hash>.safetensors`; returns (file name, hash).

    Streams each tensor's memory to the file and hashes it on the way: no serialized copy.
    """
    _require_little_endian()
    problem = next(filter(None, (unwritable(n, t) for n, t in tensors.items())), "")
    if problem:
        dtypes = sorted({str(t.dtype) for t in tensors.values()})
        raise StoreError(f"safetensors cannot store these tensors ({', '.join(dtypes)}): "
                         f"{problem}")
    with temporary_file(folder, stem) as temporary:
        content_digest = _write(temporary, tensors)
        name = f"{stem}.{content_digest[:16]}.safetensors"
        temporary.replace(folder / name)
    return name, content_digest


def unwritable(name: str, tensor: torch.Tensor) -> str:
    """Why `tensor` cannot be written as it is; "" when it can."""
    if tensor.dtype not in NAMES:
        return f"{name!r} is {tensor.dtype}, which safetensors has no name for"
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_meta:
        return f"{name!r} is not a dense tensor with data"
    if not tensor.is_contiguous():
        return f"{name!r} is not contiguous; pass tensor.contiguous()"
    return ""


class _Writer(Protocol):
    def write(self, data: bytes | memoryview, /) -> int: ...


class _Nowhere:
    """A stream that keeps nothing: for a digest of what a file would hold."""

    def write(self, data: bytes | memoryview) -> int:
        return len(data)


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """The content hash `save_tensors` would give these (contiguous, storable) tensors,
    without writing them anywhere."""
    return _write(_Nowhere(), tensors)


def _write(stream: _Writer, tensors: dict[str, torch.Tensor]) -> str:
    """Write the file's bytes to `stream`; returns their content hash."""
    header, slots = build_header([(n, NAMES[t.dtype], tuple(t.shape))
                                  for n, t in tensors.items()])
    hasher = content_hasher()
    hasher.update(header)
    stream.write(header)
    for slot in slots:
        tensor = tensors[slot.name].detach().cpu()  # a copy only of a tensor on another device
        for block in byte_blocks(tensor):
            hasher.update(block)
            stream.write(block)
    return hasher.hexdigest()


def tensors_from_file(path: Path, expected_digest: str, known: Layout | None = None
                      ) -> dict[str, torch.Tensor]:
    """Tensors from a safetensors file, after checking its content hash (or, with `known`,
    that it is unchanged since verified_layout checked it).

    The file is read once into one buffer; the tensors are views of it, not copies.
    """
    _require_little_endian()
    data, slots = read_tensor_file(path, expected_digest, known)
    try:
        if slots is None:
            length = header_length(bytes(data[:LENGTH_BYTES]), len(data))
            slots = tuple(parse_header(bytes(data[LENGTH_BYTES:LENGTH_BYTES + length]),
                                       len(data)))
        return {slot.name: _tensor(data, slot) for slot in slots}
    except ValueError as exc:
        raise StoreError(f"{path} is not a valid safetensors file: {exc}") from None


def _tensor(data: bytearray, slot: Slot) -> torch.Tensor:
    """The tensor in `slot` of a file read into `data`, sharing its memory."""
    if slot.dtype not in DTYPES:
        raise ValueError(f"tensor {slot.name!r} has dtype {slot.dtype}, which torch "
                         f"{torch.__version__} lacks")
    dtype = DTYPES[slot.dtype]
    if slot.stop == slot.start:
        return torch.empty(slot.shape, dtype=dtype)
    count = (slot.stop - slot.start) // dtype.itemsize
    tensor = torch.frombuffer(data, dtype=dtype, count=count, offset=slot.start)
    if tensor.data_ptr() % dtype.itemsize:
        tensor = tensor.clone()  # misaligned (a file this tool did not write): copy it
    if dtype == torch.bool and bool((tensor.view(torch.uint8) > 1).any()):
        raise ValueError(f"bool tensor {slot.name!r} holds bytes other than 0 and 1")
    return tensor.view(slot.shape)  # contiguous: a view, at a tenth of reshape's cost


def _require_little_endian() -> None:
    if sys.byteorder != "little":
        raise StoreError("the cache stores tensors little-endian, as safetensors does; this "
                         "big-endian machine cannot use it")
