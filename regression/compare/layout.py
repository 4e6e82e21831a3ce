"""Whether one tensor holds another's values in another layout: dims permuted, reshaped."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import torch

from regression.compare.tensordiff import as_int, flat_cpu

MAX_PERMUTED = 6  # dims up to which every permutation is tried for a layout


@dataclass(frozen=True)
class Layout:
    """How one tensor holds another's values: its dims permuted, then reshaped."""

    order: tuple[int, ...]
    reshaped: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    """The shapes before and after a reshape that followed the permutation."""

    def __str__(self) -> str:
        return f"same values, {self.how}" if self.how else "bit-identical"

    @property
    def how(self) -> str:
        """The mapping alone: "dims permuted (1, 0, 2)"; "" for none."""
        moved = self.order != tuple(range(len(self.order)))
        permuted = f"dims permuted {self.order}" if moved else ""
        if self.reshaped is None:
            return permuted
        before, after = self.reshaped
        if not moved:
            return f"reshaped from {list(before)} to {list(after)}"
        return f"{permuted}, then reshaped to {list(after)}"


def layout(reference: torch.Tensor, actual: torch.Tensor) -> Layout | None:
    """How `actual` holds `reference`'s values in another layout (a permutation of dims, a
    reshape, or one then the other); None when it does not."""
    if reference.dtype != actual.dtype or reference.numel() != actual.numel() or \
            reference.is_complex():
        return None
    if not torch.equal(_sorted_bits(reference), _sorted_bits(actual)):
        return None  # not even the same values
    dims = range(reference.dim())
    orders = list(permutations(dims)) if reference.dim() <= MAX_PERMUTED else [tuple(dims)]
    exact = [o for o in orders if reference.permute(o).shape == actual.shape]
    for order in [*exact, *(o for o in orders if o not in exact)]:
        moved = reference.permute(order)
        if _bits_equal(moved.reshape(actual.shape), actual):
            reshaped = None if order in exact else (tuple(moved.shape), tuple(actual.shape))
            return Layout(order, reshaped)
    return None


def aligned(reference: torch.Tensor, actual: torch.Tensor, hint: tuple[int, ...] | None
            ) -> tuple[torch.Tensor, Layout] | None:
    """`reference` with its dims permuted into `actual`'s shape, so values can be compared
    where they differ: by `hint` where it fits, else by the one permutation that fits."""
    if reference.dim() != actual.dim() or reference.dim() > MAX_PERMUTED:
        return None
    fits = [o for o in permutations(range(reference.dim()))
            if reference.permute(o).shape == actual.shape]
    order = hint if hint in fits else fits[0] if len(fits) == 1 else None
    if order is None:
        return None
    return reference.permute(order).contiguous(), Layout(order)


def _sorted_bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of their width, sorted: equal for the same values
    in any order."""
    return torch.sort(as_int(flat_cpu(tensor))).values


def _bits_equal(reference: torch.Tensor, actual: torch.Tensor) -> bool:
    return torch.equal(as_int(flat_cpu(reference)), as_int(flat_cpu(actual)))
