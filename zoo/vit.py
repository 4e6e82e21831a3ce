"""Small vision transformer with a class token and learned position embedding."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .layers import Block


class ViT(nn.Module):
    """Patch embedding, class token, transformer blocks, final LayerNorm and Linear head."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        in_channels: int,
        width: int,
        depth: int,
        heads: int,
        out_features: int,
        mlp_ratio: float = 4.0,
        pool: str = "cls",
    ) -> None:
        """Build the patch embedding, blocks and head."""
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not divisible by patch_size {patch_size}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"unknown pool {pool!r}; expected 'cls' or 'mean'")
        self.pool = pool
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, width, kernel_size=patch_size, stride=patch_size)
        self.class_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, width) * 0.02)
        self.blocks = nn.Sequential(*[Block(width, heads, mlp_ratio) for _ in range(depth)])
        self.ln_post = nn.LayerNorm(width)
        self.head = nn.Linear(width, out_features)

    def forward(self, images: Tensor) -> Tensor:
        """Map (B, C, H, W) images to (B, out_features)."""
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.ln_post(self.blocks(x))
        pooled = x[:, 0] if self.pool == "cls" else x[:, 1:].mean(dim=1)
        return self.head(pooled)


def build(cfg: dict[str, Any]) -> ViT:
    """Build a ViT from its config."""
    return ViT(
        cfg["image_size"],
        cfg["patch_size"],
        cfg["in_channels"],
        cfg["width"],
        cfg["depth"],
        cfg["heads"],
        cfg["out_features"],
        mlp_ratio=cfg.get("mlp_ratio", 4.0),
        pool=cfg.get("pool", "cls"),
    )
