"""Regression tests of the example zoo: forward passes, encoders and initial weights.

Written once for every device: each model is moved to `regression.device` (config.yaml's
`device`, or `--device`), and the input helpers already put their tensors there."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import zoo

MODELS = zoo.list_models()
IMAGE_ENCODERS = [n for n in MODELS if zoo.input_spec(n)["kind"] == "image_text"]
TEXT_ENCODERS = [n for n in MODELS if zoo.input_spec(n)["kind"] in ("text", "image_text")]
# The config with the fewest parameters in each family.
INIT_MODELS = ["clip-cnn-tiny", "cnn-bn-avgpool", "mlp-tiny", "text-last-token", "vit-mean-pool"]


def images(spec: dict[str, Any], regression: Any) -> torch.Tensor:
    """Return a batch of two random images matching `spec`."""
    return regression.randn(2, *spec["shape"])


def tokens(spec: dict[str, Any], regression: Any) -> torch.Tensor:
    """Return a batch of two random token sequences matching `spec`."""
    return regression.randint(0, spec["vocab_size"], (2, spec["context_length"]))


def make_inputs(spec: dict[str, Any], regression: Any) -> tuple[torch.Tensor, ...]:
    """Return the positional forward() arguments for a model with input spec `spec`."""
    kind = spec["kind"]
    if kind == "vector":
        return (regression.randn(2, spec["features"]),)
    if kind == "image":
        return (images(spec, regression),)
    if kind == "text":
        return (tokens(spec, regression),)
    if kind == "image_text":
        return (images(spec, regression), tokens(spec, regression))
    raise ValueError(f"unknown input kind {kind!r}")


@pytest.mark.parametrize("name", MODELS)
def test_forward(name: str, regression: Any) -> None:
    """Forward pass of every model on a batch of two."""
    model = zoo.create_model(name).to(regression.device)
    inputs = make_inputs(zoo.input_spec(name), regression)
    with torch.no_grad():
        regression.check(model(*inputs), name="forward")


@pytest.mark.parametrize("name", IMAGE_ENCODERS)
def test_encode_image(name: str, regression: Any) -> None:
    """Image features of the two-tower models."""
    model = zoo.create_model(name).to(regression.device)
    with torch.no_grad():
        features = model.encode_image(images(zoo.input_spec(name), regression))
    regression.check(features, name="encode_image")


@pytest.mark.parametrize("name", TEXT_ENCODERS)
def test_encode_text(name: str, regression: Any) -> None:
    """Text features of the text and two-tower models."""
    model = zoo.create_model(name).to(regression.device)
    with torch.no_grad():
        features = model.encode_text(tokens(zoo.input_spec(name), regression))
    regression.check(features, name="encode_text")


@pytest.mark.parametrize("name", INIT_MODELS)
def test_init(name: str, regression: Any) -> None:
    """Parameters and buffers right after initialisation, one model per family."""
    model = zoo.create_model(name).to(regression.device)
    regression.check(dict(model.state_dict()), name="init")
