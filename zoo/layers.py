"""Shared building blocks: activations and a pre-norm transformer block."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}


def make_activation(name: str) -> nn.Module:
    """Return a fresh activation module for `name` (gelu, relu or silu)."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        expected = sorted(_ACTIVATIONS)
        raise ValueError(f"unknown activation {name!r}; expected one of {expected}") from None


class Attention(nn.Module):
    """Multi-head self-attention written out with nn.Linear projections."""

    def __init__(self, width: int, heads: int, causal: bool = False) -> None:
        """Build the qkv and output projections."""
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}")
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the sequence dimension of a (B, N, D) tensor."""
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        attn = scores.softmax(dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-norm transformer block: LayerNorm, attention, LayerNorm, MLP, residuals."""

    def __init__(
        self, width: int, heads: int, mlp_ratio: float = 4.0, causal: bool = False
    ) -> None:
        """Build the attention and MLP sub-layers."""
        super().__init__()
        hidden = int(width * mlp_ratio)
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads, causal=causal)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to a (B, N, D) tensor."""
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))
