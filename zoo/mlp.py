"""Multi-layer perceptron on flat feature vectors."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from .layers import make_activation


class MLP(nn.Module):
    """Stack of Linear + activation layers followed by a Linear head."""

    def __init__(
        self, in_features: int, width: int, depth: int, out_features: int, activation: str = "gelu"
    ) -> None:
        """Build `depth` hidden layers of size `width`."""
        super().__init__()
        layers: list[nn.Module] = []
        features = in_features
        for _ in range(depth):
            layers += [nn.Linear(features, width), make_activation(activation)]
            features = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(features, out_features)

    def forward(self, x: Tensor) -> Tensor:
        """Map (B, in_features) to (B, out_features)."""
        return self.head(self.body(x))


def build(cfg: dict[str, Any]) -> MLP:
    """Build an MLP from its config."""
    return MLP(
        cfg["in_features"],
        cfg["width"],
        cfg["depth"],
        cfg["out_features"],
        activation=cfg.get("activation", "gelu"),
    )
