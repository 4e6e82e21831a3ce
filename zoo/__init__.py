"""A miniature PyTorch model zoo: small models built from named JSON configs."""

from __future__ import annotations

from .factory import (
    UnknownModelError,
    create_model,
    get_config,
    input_spec,
    list_models,
    model_family,
)

__all__ = [
    "UnknownModelError",
    "create_model",
    "get_config",
    "input_spec",
    "list_models",
    "model_family",
]
