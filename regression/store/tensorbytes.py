"""A tensor's bytes and dtype as the store names them: safetensors' dtype names, the values
as they read (no lazy bit), and the bytes in blocks without a copy. Used by the codec, which
writes them, and by digests, which hash them."""

from __future__ import annotations

import ctypes
from typing import Iterator

import torch

from regression.errors import StoreError

_TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32",
    "U16": "uint16", "U8": "uint8", "BOOL": "bool", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
DTYPES = {name: getattr(torch, t) for name, t in _TORCH_NAMES.items() if hasattr(torch, t)}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
_BLOCK = 64 << 20  # bytes handed to one write() call


def dtype_name(dtype: torch.dtype, at: str = "") -> str:
    """The safetensors name of a dtype; StoreError for one it has no name for."""
    if dtype not in NAMES:
        where = f" at {at}" if at else ""
        raise StoreError(f"cannot store the {dtype} tensor{where}: safetensors has no name "
                         "for its dtype; convert it first (e.g. .to(torch.float32))")
    return NAMES[dtype]


def complex_name(dtype: torch.dtype) -> str:
    """torch's name of a complex dtype, as a complex node holds it: complex64."""
    return str(dtype).removeprefix("torch.")


def resolved(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` without a lazy negative or conjugate bit (`z.conj().imag`): its values as
    they read, which are what is stored and compared bit for bit; its memory holds others,
    and a bit-level view of it is refused. A copy only where a bit is set."""
    return tensor.resolve_conj().resolve_neg()


def byte_blocks(tensor: torch.Tensor) -> Iterator[memoryview]:
    """A contiguous CPU tensor's bytes, without copying them, in blocks of at most _BLOCK."""
    size = tensor.numel() * tensor.element_size()
    if size:
        memory = memoryview((ctypes.c_char * size).from_address(tensor.data_ptr())).cast("B")
        for start in range(0, size, _BLOCK):
            yield memory[start:start + _BLOCK]
