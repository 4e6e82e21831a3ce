"""Explaining a change from two traces: real modules traced twice, one of them changed."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from regression.diagnose.explain import call_rows, explain
from regression.diagnose.explain_report import explanation_lines
from regression.diagnose.html import page
from regression.diagnose.trace import Tracer
from regression.diagnose.trace import Trace, read_trace, write_outputs


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
    assert "every submodule it called was given the reference's inputs and gave the " \
           "reference's outputs: the change is in its own forward code" in text
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


# Layouts, generators and weights: what real histories do to a trace.

import torch.nn.functional as F  # noqa: E402


class Attention(nn.Module):
    """Self-attention over (N, L, D); `batch_first=False` takes (L, N, D), as open_clip's
    did before it switched to the fused path."""

    def __init__(self, batch_first: bool, fused: bool) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(64, 192), nn.Linear(64, 64)
        self.batch_first, self.fused = batch_first, fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.batch_first:
            x = x.transpose(0, 1).contiguous()
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.fused:
            mixed = F.scaled_dot_product_attention(q, k, v)
        else:
            mixed = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1) @ v
        out: torch.Tensor = self.out(mixed)
        return out if self.batch_first else out.transpose(0, 1).contiguous()


class Block(nn.Module):
    def __init__(self, batch_first: bool, fused: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.attn = Attention(batch_first, fused)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.attn(self.norm(x))
        return out


class Tower(nn.Module):
    """Embeds (N, L, 8) to width 64, runs two blocks (in (L, N, D) unless batch-first), and a
    head."""

    def __init__(self, batch_first: bool = False, fused: bool = False) -> None:
        super().__init__()
        self.embed, self.head = nn.Linear(8, 64), nn.Linear(64, 4)
        self.blocks = nn.Sequential(Block(batch_first, fused), Block(batch_first, fused))
        self.batch_first = batch_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        h = h if self.batch_first else h.permute(1, 0, 2).contiguous()
        h = self.blocks(h)
        h = h if self.batch_first else h.permute(1, 0, 2).contiguous()
        out: torch.Tensor = self.head(h)
        return out


def _traced_by_path(folder: Path, model: nn.Module, features: bool = False) -> Trace:
    """`model` traced as a test would call it: named by its path from the local `model`;
    with `features`, its blocks are called on their own as well."""
    x = torch.linspace(-1, 1, 2 * 5 * 8).reshape(2, 5, 8)
    with Tracer(folder, test=_traced_by_path):
        out = model(x)
        if features:
            model.blocks(torch.ones(5, 2, 64))
    write_outputs(folder, {"out": out})
    return read_trace(folder)


def _tower(seed: int = 0, **settings: bool) -> Tower:
    torch.manual_seed(seed)
    return Tower(**settings)


def test_a_layout_change_above_a_changed_attention_names_the_attention(tmp_path: Path) -> None:
    reference = _traced_by_path(tmp_path / "r", _tower())
    changed = _traced_by_path(tmp_path / "c", _tower(batch_first=True, fused=True))
    found = explain(reference, changed)
    assert found.found is not None and found.found.name == "model.blocks.0.attn"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert ("first module whose inputs hold the reference's values (in another layout) and "
            "outputs differ: model.blocks.0.attn (Attention), call 1\n"
            "  its inputs: input[0]: same values, dims permuted (1, 0, 2)\n") in text
    assert ("  it gave model.blocks.0.attn.out other inputs than at the reference (input[0]: "
            "other values), and the submodules it gave the reference's inputs gave the "
            "reference's outputs: the change is before those calls, in its own forward code") \
        in text
    assert "  output (against the reference's, dims permuted (1, 0, 2)): float32[2, 5, 64]: " \
        in text
    assert "rounding-level" in text
    # the calls it was made inside come first, though they started long before it
    assert "  same    DIFF     model (Tower), call 1\n" in text
    assert "layout  DIFF         model.blocks.0 (Block), call 1" in text
    assert "DIFF    DIFF         model.blocks.1 (Block), call 1  (input[0]: other values)" \
        in text
    assert "layout  layout         model.blocks.0.norm (LayerNorm), call 1" in text
    assert "same    same             model.blocks.0.attn.qkv (Linear), call 1" in text
    assert "  layout: the reference's values in another layout" in text


def _reinitialised(seed: int = 0, parts: tuple[str, ...] = ("qkv",)) -> Tower:
    """The tower with an init refactor, as timm's: the named parts of each block drawn
    again, so the generator is left in another state too."""
    tower = _tower(seed)
    for block in tower.blocks:
        for part in parts:
            nn.init.trunc_normal_(getattr(block.attn, part).weight, std=0.02)
            nn.init.normal_(getattr(block.attn, part).bias)
    return tower


def test_an_init_change_names_the_weights_and_never_contradicts_itself(tmp_path: Path) -> None:
    reference = _traced_by_path(tmp_path / "r", _tower(), features=True)
    found = explain(reference, _traced_by_path(tmp_path / "c", _reinitialised(), features=True))
    assert len(found.all_states) == 16  # model.blocks, called on its own too, counted once
    assert [name for name, _ in found.states] == [
        f"model.blocks.{i}.attn.qkv.{p}" for i in (0, 1) for p in ("weight", "bias")]
    assert found.found is not None and found.found.name == "model.blocks.0.attn.qkv"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert ("parameters and buffers of the outermost module (model): 4 of 16 differ, as first "
            "called: weights initialised or loaded differently\n"
            "  model.blocks.0.attn.qkv.weight: float32[192, 64]: 12288 of 12288 elements "
            "differ") in text
    assert ("the random generators' state differs from the reference's as 25 calls started, "
            "but they drew no random numbers, so the state is set aside in comparing them"
            ) in text
    assert "model.blocks.0.attn.qkv (Linear), call 1\n  its own parameters or buffers differ" \
        in text
    assert "code between module calls" not in text


def test_many_differing_weights_are_shown_first_few_then_by_module(tmp_path: Path) -> None:
    reference = _traced_by_path(tmp_path / "r", _tower())
    found = explain(reference, _traced_by_path(tmp_path / "c", _reinitialised(
        parts=("qkv", "out"))))
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "8 of 16 differ, as first called" in text
    states = text.split("first module")[0]
    assert states.count(" elements differ") == 1 + 5  # the case's output, then the first five
    assert "  and 3 more, by module: model.blocks.1 (3)" in text


class Pair(nn.Module):
    """Two weights drawn in the order given."""

    def __init__(self, swap: bool) -> None:
        super().__init__()
        first, second = nn.Parameter(torch.randn(4, 4)), nn.Parameter(torch.randn(4, 4))
        self.a, self.b = (second, first) if swap else (first, second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.a @ self.b


def test_weights_drawn_in_another_order_are_said_to_hold_the_same_values(
        tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = _traced(tmp_path / "r", Pair(swap=False))
    torch.manual_seed(0)
    found = explain(reference, _traced(tmp_path / "c", Pair(swap=True)))
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert ("parameters and buffers of the outermost module (Pair): 2 of 2 differ only in where "
            "their values are: the reference's values under other names or in another layout"
            ) in text
    assert "  Pair.a: the values the reference has as Pair.b\n" in text
    torch.manual_seed(0)
    renamed = Pair(swap=False)
    renamed.c = renamed.a
    del renamed.a
    renamed.forward = lambda x: x @ renamed.c @ renamed.b * 2  # type: ignore[method-assign]
    found = explain(reference, _traced(tmp_path / "n", renamed))
    assert [str(d) for _, ds in found.states for d in ds] == [
        "Pair.a: only in the reference; the working tree has its values as Pair.c",
        "Pair.c: the values the reference has as Pair.a"]
    transposed = Pair(swap=False)
    with torch.no_grad():
        transposed.a.data = reference.state("Pair.a").t().contiguous()
        transposed.b.data = reference.state("Pair.b")
    found = explain(reference, _traced(tmp_path / "t", transposed))
    assert [str(d) for _, ds in found.states for d in ds] == [
        "Pair.a: same values, dims permuted (1, 0)"]


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(self.drop(x))
        return out


def test_a_call_that_draws_from_a_generator_in_another_state_is_not_blamed(
        tmp_path: Path) -> None:
    def traced(folder: Path, extra_draw: bool) -> Trace:
        torch.manual_seed(0)
        model = Noisy()
        if extra_draw:
            torch.rand(1)  # code before the call draws one more number
        return _traced(folder, model)

    found = explain(traced(tmp_path / "r", False), traced(tmp_path / "c", True))
    assert found.found is None and found.generators_drawn == 2  # the dropout and its caller
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert ("2 calls drew random numbers from generators in another state than at the "
            "reference") in text


class Positional(nn.Module):
    """A weight used by a method outside every module call, as timm's `pos_embed` is in
    `forward_features` when a test calls that method."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(4) * scale)
        self.proj = nn.Linear(4, 4)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(x + self.pos)
        return out


def test_weights_used_between_calls_are_named_without_blaming_code(tmp_path: Path) -> None:
    def traced(folder: Path, scale: float) -> Trace:
        torch.manual_seed(0)
        model = Positional(scale)
        with Tracer(folder, test=traced):
            out = model.features(torch.ones(2, 4))
        write_outputs(folder, {"out": out})
        return read_trace(folder)

    found = explain(traced(tmp_path / "r", 1.0), traced(tmp_path / "c", 0.5))
    assert found.found is None and [name for name, _ in found.states] == ["model.pos"]
    assert [c.name for c in found.only_here] == [] and found.calls == (1, 1)  # model.proj
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert ("each call that differs was given other inputs (made with the parameters that "
            "differ, above, or by code between module calls), so the calls cannot be compared "
            "through them") in text
    assert "every module computes" not in text and "each module given the reference's" not in text
    assert "parameters and buffers of the outermost module (model): 1 of 3 differ" in text


class Layers(nn.Module):
    """x-transformers' attention layers: a keyword argument it may be given or not."""

    def __init__(self, bump: float = 0.0) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.bump = bump

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                pos: object = None) -> torch.Tensor:
        x = x if mask is None else x.masked_fill(~mask, 0.0)
        return torch.tanh(self.proj(x)) * (1 + self.bump)


class Wrapper(nn.Module):
    """x-transformers' TransformerWrapper: the working tree passes a new `pos=None`."""

    def __init__(self, new_keyword: bool, bump: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.attn_layers = Layers(bump)
        self.new_keyword = new_keyword

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        out: torch.Tensor = self.attn_layers(x, pos=None) if self.new_keyword else \
            self.attn_layers(x)
        return out


def _wrapper(new_keyword: bool, bump: float = 0.0) -> Wrapper:
    torch.manual_seed(0)
    return Wrapper(new_keyword, bump)


def test_a_new_keyword_argument_of_none_is_noted_not_taken_as_other_inputs(
        tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _wrapper(False), after=None)
    found = explain(reference, _traced(tmp_path / "c", _wrapper(True, bump=1e-3), after=None))
    assert found.found is not None and found.found.name == "Wrapper.attn_layers"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert ("first module whose inputs are bit-identical and outputs differ: "
            "Wrapper.attn_layers (Layers), call 1\n"
            "  noted, not taken as other inputs: input['pos']: None, passed only in the working "
            "tree\n") in text


def test_a_new_keyword_argument_alone_changes_no_call(tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _wrapper(False), after=None)
    found = explain(reference, _traced(tmp_path / "c", _wrapper(True), after=2.0))
    assert found.found is None  # the change is the test's own `* 2.0`
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "the change is in code between module calls" in text
    assert ("arguments that are not tensors, passed on one side only (noted, not taken as "
            "other inputs):\n  Wrapper.attn_layers (call 1): input['pos']: None, passed only "
            "in the working tree") in text


class Masked(nn.Module):
    """Gives its inner module another mask, the input that differs."""

    def __init__(self, flip: bool) -> None:
        super().__init__()
        self.layers = Layers()
        self.flip = flip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(2, 4, dtype=torch.bool)
        mask[0, 0] = not self.flip
        out: torch.Tensor = self.layers(x, mask=mask)
        return out


def _masked(flip: bool) -> Masked:
    torch.manual_seed(0)
    return Masked(flip)


def test_the_input_that_differs_is_named_in_the_terminal_and_on_the_page(
        tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _masked(False), after=None)
    found = explain(reference, _traced(tmp_path / "c", _masked(True), after=None))
    assert found.found is not None and found.found.name == "Masked"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "it gave Masked.layers other inputs than at the reference (input['mask']: other " \
           "values)" in text
    assert "  DIFF    DIFF       Masked.layers (Layers), call 1  (input['mask']: other values)" \
        in text
    rows = call_rows(reference, found_trace := _traced(tmp_path / "c2", _masked(True), None))
    assert [row.note for row in rows if row.call.name == "Masked.layers"] == [
        "input['mask']: other values"]
    html = page("t::case", "v1", explain(reference, found_trace), rows, [])
    assert "(other inputs: input[&#x27;mask&#x27;]: other values)" in html


class Deep(nn.Module):
    """A parent whose changed child starts long after it: more than AROUND calls between."""

    def __init__(self, bump: float) -> None:
        super().__init__()
        self.early = nn.Sequential(*(nn.Identity() for _ in range(8)))
        self.body = nn.Sequential(nn.Identity(), Mix(bump))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(self.early(x))
        return out


def test_the_calls_it_was_made_inside_are_shown_however_early_they_started(
        tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = _traced(tmp_path / "r", Deep(0.0), after=None)
    torch.manual_seed(0)
    found = explain(reference, _traced(tmp_path / "c", Deep(1e-3), after=None))
    assert found.found is not None and found.found.name == "Deep.body.1"
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    window = text.split("calls around it and those it was made inside, in the order they "
                        "start:\n")[1].splitlines()
    assert window[1] == "  same    DIFF     Deep (Deep), call 1"
    assert window[2] == "                   ..."
    assert "  same    DIFF       Deep.body (Sequential), call 1" in window


class Head(nn.Module):
    """vit-pytorch's t2t head: a LayerNorm and a Linear, or (now) the Linear alone."""

    def __init__(self, norm: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        linear = nn.Linear(4, 2)
        self.mlp_head: nn.Module = nn.Sequential(nn.LayerNorm(4), linear) if norm else linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.mlp_head(x)
        return out


def test_a_call_that_is_gone_leads_and_renamed_weights_are_not_called_changed(
        tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", Head(norm=True), after=None)
    found = explain(reference, _traced(tmp_path / "c", Head(norm=False), after=None))
    assert found.found is not None and found.found.name == "Head.mlp_head"
    assert found.revalued == []
    text = "\n".join(explanation_lines(found, "t::case", "v1"))
    assert "differ by name, none in value: they are in one trace only, 4 of them holding the " \
           "reference's values under another name: a submodule was added, removed or renamed" \
        in text
    assert "initialised or loaded differently" not in text
    assert ("  the working tree no longer calls Head.mlp_head.0 (LayerNorm), Head.mlp_head.1 "
            "(Linear) inside it, as the reference did: the module's structure changed") in text
    assert "the weights changed" not in text


def test_a_one_ulp_change_of_a_weight_is_an_initialisation_change(tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r", _model())
    nudged = _model()
    with torch.no_grad():
        nudged.last.weight.copy_(torch.nextafter(nudged.last.weight, torch.tensor(9.0)))
    text = "\n".join(explanation_lines(explain(reference, _traced(tmp_path / "c", nudged)),
                                       "t::case", "v1"))
    assert ("  Model.last.weight: float32[2, 4]: 8 of 8 elements differ; max |diff| ") in text
    assert "an initialisation (or loading) change of that size" in text
    weights = text.split("parameters and buffers")[1].split("first module")[0]
    assert "reordered arithmetic" in weights and "reordered arithmetic gives" not in weights
