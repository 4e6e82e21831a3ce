"""Named JSON configs, the family registry and model creation."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from torch import nn

from . import clip, cnn, mlp, text, vit

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

_BUILDERS: dict[str, Callable[[dict[str, Any]], nn.Module]] = {
    "mlp": mlp.build,
    "cnn": cnn.build,
    "vit": vit.build,
    "text": text.build,
    "clip": clip.build,
}


class UnknownModelError(KeyError):
    """Raised for a model name that has no config."""

    def __str__(self) -> str:
        """Return the message without KeyError's quoting."""
        return str(self.args[0]) if self.args else ""


@lru_cache(maxsize=None)
def _configs() -> dict[str, dict[str, Any]]:
    """Read every config in this package's configs folder, keyed by file stem."""
    configs: dict[str, dict[str, Any]] = {}
    for path in sorted(CONFIG_DIR.glob("*.json")):
        cfg = json.loads(path.read_text(encoding="utf-8"))
        if cfg.get("architecture") not in _BUILDERS:
            raise ValueError(f"{path}: unknown architecture {cfg.get('architecture')!r}")
        configs[path.stem] = cfg
    return configs


def list_models() -> list[str]:
    """Return the sorted names of all model configs."""
    return sorted(_configs())


def get_config(name: str) -> dict[str, Any]:
    """Return a copy of the config called `name`."""
    configs = _configs()
    if name not in configs:
        available = ", ".join(sorted(configs))
        raise UnknownModelError(f"unknown model {name!r}; available models: {available}")
    return copy.deepcopy(configs[name])


def model_family(name: str) -> str:
    """Return the architecture family (mlp, cnn, vit, text or clip) of model `name`."""
    return str(get_config(name)["architecture"])


def _image_spec(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return the image input description of a vision config."""
    size = cfg["image_size"]
    return {"shape": [cfg["in_channels"], size, size]}


def _text_spec(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return the token input description of a text config."""
    return {"vocab_size": cfg["vocab_size"], "context_length": cfg["context_length"]}


def input_spec(name: str) -> dict[str, Any]:
    """Describe the input model `name` expects.

    Kinds: {"kind": "vector", "features": F} for (B, F) floats; {"kind": "image",
    "shape": [C, H, W]} for (B, C, H, W) floats; {"kind": "text", "vocab_size": V,
    "context_length": L} for (B, L) int64 ids in [0, V); {"kind": "image_text", ...both
    image and text keys...} for models called as model(images, tokens).
    """
    cfg = get_config(name)
    family = cfg["architecture"]
    if family == "mlp":
        return {"kind": "vector", "features": cfg["in_features"]}
    if family in ("cnn", "vit"):
        return {"kind": "image", **_image_spec(cfg)}
    if family == "text":
        return {"kind": "text", **_text_spec(cfg)}
    return {"kind": "image_text", **_image_spec(cfg["vision"]), **_text_spec(cfg["text"])}


def create_model(name: str) -> nn.Module:
    """Build model `name` with random init from torch's global RNG and return it in eval mode."""
    cfg = get_config(name)
    model = _BUILDERS[cfg["architecture"]](cfg)
    return model.eval()
