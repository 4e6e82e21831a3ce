"""Text transformer producing one pooled, projected embedding per sequence."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .layers import Block

POOLS = ("argmax", "last", "mean")


class TextTransformer(nn.Module):
    """Token + position embedding, transformer blocks, final LayerNorm, pooling and projection."""

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        width: int,
        depth: int,
        heads: int,
        embed_dim: int,
        mlp_ratio: float = 4.0,
        causal: bool = True,
        pool: str = "argmax",
    ) -> None:
        """Build the embeddings, blocks and projection."""
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}; expected one of {POOLS}")
        self.pool = pool
        self.context_length = context_length
        self.token_embed = nn.Embedding(vocab_size, width)
        self.pos_embed = nn.Parameter(torch.randn(1, context_length, width) * 0.01)
        blocks = [Block(width, heads, mlp_ratio, causal=causal) for _ in range(depth)]
        self.blocks = nn.Sequential(*blocks)
        self.ln_final = nn.LayerNorm(width)
        self.proj = nn.Linear(width, embed_dim, bias=False)

    def encode_text(self, tokens: Tensor) -> Tensor:
        """Map (B, L) int64 token ids to (B, embed_dim) features."""
        x = self.token_embed(tokens) + self.pos_embed[:, : tokens.shape[1]]
        x = self.ln_final(self.blocks(x))
        if self.pool == "argmax":
            # Like CLIP: the highest token id marks the end-of-text position.
            pooled = x[torch.arange(x.shape[0], device=x.device), tokens.argmax(dim=-1)]
        elif self.pool == "last":
            pooled = x[:, -1]
        else:
            pooled = x.mean(dim=1)
        return self.proj(pooled)

    def forward(self, tokens: Tensor) -> Tensor:
        """Same as `encode_text`."""
        return self.encode_text(tokens)


def build(cfg: dict[str, Any]) -> TextTransformer:
    """Build a text transformer from its config."""
    return TextTransformer(
        cfg["vocab_size"],
        cfg["context_length"],
        cfg["width"],
        cfg["depth"],
        cfg["heads"],
        cfg["embed_dim"],
        mlp_ratio=cfg.get("mlp_ratio", 4.0),
        causal=cfg.get("causal", True),
        pool=cfg.get("pool", "argmax"),
    )
