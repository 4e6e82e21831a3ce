"""Leaves of calls' inputs and outputs, and the random generators' state, as a trace keeps them."""

from __future__ import annotations

import dataclasses
from typing import Iterator, Mapping

import torch

from regression.diagnose.trace_file import WHOLE
from regression.nodes import MAX_DEPTH
from regression.store.codec import tensors_digest, unwritable

PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
"""Leaves other than tensors whose text says all about them."""


def generators() -> str:
    """Digest of the state of torch's global random generators (what dropout draws from)."""
    states = {"cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states.update((f"cuda{i}", s) for i, s in enumerate(torch.cuda.get_rng_state_all()))
    return tensors_digest(states)


def as_storable(tensor: torch.Tensor) -> torch.Tensor | None:
    """`tensor`'s bits as a dense, contiguous CPU tensor safetensors can hold; None if it
    has none to read (a meta tensor)."""
    tensor = tensor.detach()
    if tensor.is_meta:
        return None
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    tensor = tensor.resolve_conj().resolve_neg().cpu().contiguous()
    if unwritable("t", tensor):  # a dtype safetensors has no name for: its bytes
        tensor = tensor.reshape(-1).view(torch.uint8)
    return tensor


def leaves(value: object) -> tuple[dict[str, torch.Tensor], dict[str, str], bool]:
    """The tensors nested in `value` by path, a text for every other leaf, and whether any
    leaf is a value these cannot show (an object that is no container, a tensor without
    data)."""
    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, str] = {}
    unknown = False
    for path, leaf in walk(value, "", 0):
        if isinstance(leaf, torch.Tensor):
            storable = as_storable(leaf)
            if storable is not None:
                tensors[path or WHOLE] = storable
                continue
            other[path] = f"tensor {leaf.dtype} {tuple(leaf.shape)} on {leaf.device}"
            unknown = True
        elif isinstance(leaf, PLAIN):
            other[path] = repr(leaf)
        else:
            other[path] = f"<{type(leaf).__qualname__}>"
            unknown = True
    return tensors, other, unknown


def walk(value: object, path: str, depth: int) -> Iterator[tuple[str, object]]:
    """Each leaf of `value` with its path: lists, tuples, mappings and dataclasses are
    walked into."""
    if depth >= MAX_DEPTH or isinstance(value, (torch.Tensor, *PLAIN)):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from walk(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from walk(item, f"{path}[{key!r}]", depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from walk(getattr(value, item.name), f"{path}.{item.name}", depth + 1)
    else:
        yield path, value
