"""Two-tower image-text model in the style of CLIP."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import cnn, text, vit

_VISION_TOWERS: dict[str, Callable[[dict[str, Any]], nn.Module]] = {
    "vit": vit.build,
    "cnn": cnn.build,
}


class CLIP(nn.Module):
    """Image tower and text tower projecting into a shared, L2-normalised embedding space.

    `forward(images, tokens)` returns a dict with "image_features" (B, E) and
    "text_features" (B, E), both L2-normalised, and "logit_scale", the exponentiated
    learnable temperature (a 0-dim tensor). Logits are `logit_scale * img @ txt.T`.
    """

    def __init__(
        self, visual: nn.Module, transformer: text.TextTransformer, init_logit_scale: float
    ) -> None:
        """Wrap the two towers and create the learnable logit scale."""
        super().__init__()
        self.visual = visual
        self.transformer = transformer
        self.logit_scale = nn.Parameter(torch.tensor(init_logit_scale))

    def encode_image(self, images: Tensor, normalize: bool = False) -> Tensor:
        """Map (B, C, H, W) images to (B, embed_dim) features."""
        features = self.visual(images)
        return F.normalize(features, dim=-1) if normalize else features

    def encode_text(self, tokens: Tensor, normalize: bool = False) -> Tensor:
        """Map (B, L) token ids to (B, embed_dim) features."""
        features = self.transformer.encode_text(tokens)
        return F.normalize(features, dim=-1) if normalize else features

    def forward(self, images: Tensor, tokens: Tensor) -> dict[str, Tensor]:
        """Return normalised image and text features and the exponentiated logit scale."""
        return {
            "image_features": self.encode_image(images, normalize=True),
            "text_features": self.encode_text(tokens, normalize=True),
            "logit_scale": self.logit_scale.exp(),
        }


def build(cfg: dict[str, Any]) -> CLIP:
    """Build a CLIP model; each tower's output size is set to the shared embed_dim."""
    embed_dim = cfg["embed_dim"]
    vision_cfg = dict(cfg["vision"], out_features=embed_dim)
    kind = vision_cfg.get("architecture")
    if kind not in _VISION_TOWERS:
        raise ValueError(f"unknown vision tower {kind!r}; expected one of {sorted(_VISION_TOWERS)}")
    visual = _VISION_TOWERS[kind](vision_cfg)
    transformer = text.build(dict(cfg["text"], embed_dim=embed_dim))
    return CLIP(visual, transformer, cfg.get("init_logit_scale", math.log(1 / 0.07)))
