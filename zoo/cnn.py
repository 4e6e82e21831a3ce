"""Small convolutional classifier with BatchNorm or GroupNorm."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


def _norm(kind: str, channels: int, groups: int) -> nn.Module:
    """Return a BatchNorm2d or GroupNorm layer for `channels`."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(groups, channels)
    raise ValueError(f"unknown norm {kind!r}; expected 'batch' or 'group'")


class CNN(nn.Module):
    """Conv-norm-ReLU-pool stages, global average pooling and a Linear head."""

    def __init__(
        self,
        in_channels: int,
        channels: list[int],
        out_features: int,
        norm: str = "batch",
        groups: int = 4,
        pool: str = "max",
    ) -> None:
        """Build one downsampling stage per entry of `channels`."""
        super().__init__()
        pool_layer: type[nn.Module] = {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}[pool]
        stages: list[nn.Module] = []
        prev = in_channels
        for ch in channels:
            stages += [
                nn.Conv2d(prev, ch, kernel_size=3, padding=1, bias=False),
                _norm(norm, ch, groups),
                nn.ReLU(),
                pool_layer(2),
            ]
            prev = ch
        self.features = nn.Sequential(*stages)
        self.head = nn.Linear(prev, out_features)

    def forward(self, images: Tensor) -> Tensor:
        """Map (B, C, H, W) images to (B, out_features)."""
        return self.head(self.features(images).mean(dim=(2, 3)))


def build(cfg: dict[str, Any]) -> CNN:
    """Build a CNN from its config."""
    return CNN(
        cfg["in_channels"],
        list(cfg["channels"]),
        cfg["out_features"],
        norm=cfg.get("norm", "batch"),
        groups=cfg.get("groups", 4),
        pool=cfg.get("pool", "max"),
    )
