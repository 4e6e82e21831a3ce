"""Explaining a change from two traces: real modules traced twice, one of them changed."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from regression.explain import explain, explanation_lines
from regression.trace import Trace, Tracer, read_trace, write_outputs


class Mix(nn.Module):
    """A projection, then its own arithmetic: where a change of code can hide."""

    def __init__(self, bump: float = 0.0) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.bump = bump

    def forward(self, x: torch.Tensor, cache: object = None) -> torch.Tensor:
        return torch.tanh(self.inner(x)) * (1 + self.bump)


class Model(nn.Module):
    def __init__(self, bump: float = 0.0) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.mix = Mix(bump)
        self.last = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.last(self.mix(self.first(x)))
        return out


def _traced(folder: Path, model: nn.Module, after: float | None = 1.0) -> Trace:
    """`model` traced on fixed inputs; its output times `after` is the case's output (its
    output as it is: None)."""
    x = torch.linspace(-1, 1, 8).reshape(2, 4)
    with Tracer(folder):
        out = model(x) if after is None else model(x) * after
    write_outputs(folder, {"out": out})
    return read_trace(folder)


def _model(bump: float = 0.0) -> Model:
    torch.manual_seed(0)
    return Model(bump)


def test_a_change_in_a_modules_own_code_names_that_module(tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _model())
    found = explain(reference, _traced(tmp_path / "c", _model(bump=1e-6)))
    assert found.found is not None
    assert (found.found.name, found.found.kind, found.found.number) == ("Model.mix", "Mix", 1)
    assert found.states == [] and len(found.all_states) == 6
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "first module whose inputs are bit-identical and outputs differ: Model.mix (Mix)" \
        in text
    assert "every submodule it called with the same inputs gave the same outputs: the " \
           "change is in its own forward code" in text
    assert "output: float32[2, 4]: " in text and "ULP distances" in text
    # the table: its inner Linear was given the same inputs and computed the same
    assert "same    same         Model.mix.inner (Linear), call 1" in text
    assert "DIFF    DIFF       Model.last (Linear), call 1" in text
    assert "Model.mix (Mix), call 1  <- here" in text


def test_changed_weights_are_named_as_parameters_not_code(tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _model())
    changed = _model()
    with torch.no_grad():
        changed.last.weight.mul_(0.5)
    found = explain(reference, _traced(tmp_path / "c", changed))
    assert [name for name, _ in found.states] == ["Model.last.weight"]
    assert found.found is not None and found.found.name == "Model.last"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "parameters and buffers of the outermost module (Model): 1 of 6 differ, as first " \
           "called: weights initialised or loaded differently" in text
    assert "Model.last.weight: float32[2, 4]: 8 of 8 elements differ" in text
    assert "its own parameters or buffers differ (above)" in text


def test_a_changed_setting_of_a_leaf_module_names_that_module(tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = _traced(tmp_path / "r", nn.Sequential(nn.Linear(4, 4), nn.GELU()))
    torch.manual_seed(0)
    changed = nn.Sequential(nn.Linear(4, 4), nn.GELU(approximate="tanh"))
    found = explain(reference, _traced(tmp_path / "c", changed))
    assert found.found is not None and found.found.name == "Sequential.1"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "Sequential.1 (GELU), call 1\n  it calls no submodule: the change is in its " \
           "forward code, its settings" in text


def test_a_change_outside_every_module_is_said_to_be_between_calls(tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _model())
    found = explain(reference, _traced(tmp_path / "c", _model(), after=1.5))
    assert found.outputs and found.found is None
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "the change is in code between module calls" in text


def test_identical_outputs_leave_nothing_to_explain(tmp_path: Path) -> None:
    found = explain(_traced(tmp_path / "r", _model()), _traced(tmp_path / "c", _model()))
    assert found.outputs == [] and found.found is None
    assert explanation_lines(found, "t::case", "v1")[-1].endswith("nothing to explain")


def test_calls_only_the_working_tree_makes_are_listed(tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _model())
    wrapped = nn.Sequential(_model(), nn.Hardtanh(-0.01, 0.01))
    found = explain(reference, _traced(tmp_path / "c", wrapped))
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert found.found is None
    assert "the two make different calls (below): the model's structure changed" in text
    assert "calls the reference does not make: Sequential.0.first (call 1), " in text
    assert " and 2 more\ncalls the working tree does not make: Model.first (call 1), " in text
    assert "outermost modules (Model, Sequential): 12 of 12 differ" in text  # in one only


class Cached(nn.Module):
    """Mix, given a cache object the trace cannot see into."""

    def __init__(self, bump: float) -> None:
        super().__init__()
        self.mix = Mix(bump)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.mix(x, cache=object())
        return out


def test_a_call_with_values_the_trace_cannot_see_is_never_named(tmp_path: Path) -> None:
    def model(bump: float) -> nn.Module:
        torch.manual_seed(0)
        return Cached(bump)

    found = explain(_traced(tmp_path / "r", model(0.0)), _traced(tmp_path / "c", model(1e-6)))
    assert found.found is not None and found.found.name == "Cached"  # not Cached.mix
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "?       DIFF       Cached.mix (Mix), call 1" in text
    assert "it called Cached.mix with values the trace cannot compare (?)" in text
    assert "?: holds values that are neither tensors nor plain data" in text


class Counted(nn.Module):
    def __init__(self, extra: int) -> None:
        super().__init__()
        self.extra = extra

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return x, x.shape[0] + self.extra


def test_a_differing_value_that_is_not_a_tensor_is_shown(tmp_path: Path) -> None:
    found = explain(_traced(tmp_path / "r", Counted(0), after=None),
                    _traced(tmp_path / "c", Counted(1), after=None))
    assert found.found is not None and found.found.name == "Counted"
    assert [str(d) for d in found.found_differences] == ["output[1]: 3, reference 2"]
