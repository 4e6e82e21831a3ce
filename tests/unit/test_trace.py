"""The module-call tracer behind `invoke explain`: real torch modules, real files."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from regression.diagnose.trace import Tracer
from regression.diagnose.trace import read_trace, write_outputs


class Scale(nn.Module):
    """Multiplies by a factor, in place when asked."""

    def __init__(self, factor: float, in_place: bool = False) -> None:
        super().__init__()
        self.factor = factor
        self.in_place = in_place

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        out = x.mul_(self.factor) if self.in_place else x * self.factor
        return out if bias is None else out + bias


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.scale = Scale(2.0)
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        y = self.scale(self.proj(x))
        return {"y": self.scale(y) + self.offset, "steps": 2}


def _trace(folder: Path, run: object) -> None:
    with Tracer(folder):
        assert callable(run)
        run()
    write_outputs(folder, {})


def test_calls_are_named_numbered_and_ordered_as_they_finish(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 3)
    _trace(tmp_path, lambda: net(x))
    calls = read_trace(tmp_path).calls
    assert [(c.name, c.kind, c.number, c.depth) for c in calls] == [
        ("Net.proj", "Linear", 1, 1), ("Net.scale", "Scale", 1, 1),
        ("Net.scale", "Scale", 2, 1), ("Net", "Net", 1, 0)]
    assert [c.entered for c in calls] == [1, 2, 3, 0]
    # the same module given other inputs: other digests; its outputs are read back in full
    assert calls[1].inputs != calls[2].inputs
    expected = net.scale(net.proj(x))
    stored = read_trace(tmp_path).call_outputs(calls[1])
    assert isinstance(stored, torch.Tensor) and torch.equal(stored, expected)
    outermost = read_trace(tmp_path).call_outputs(calls[3])
    assert isinstance(outermost, dict) and set(outermost) == {"['y']"}


def test_outermost_parameters_and_buffers_are_kept_as_first_called(tmp_path: Path) -> None:
    net = Net()
    before = net.proj.weight.detach().clone()

    def run() -> None:
        net(torch.ones(1, 3))
        with torch.no_grad():
            net.proj.weight.add_(1.0)  # after the first call: not what the trace keeps
        net(torch.ones(1, 3))

    _trace(tmp_path, run)
    trace = read_trace(tmp_path)
    assert set(trace.states) == {"Net.proj.weight", "Net.proj.bias", "Net.offset"}
    assert torch.equal(trace.state("Net.proj.weight"), before)
    assert [c.number for c in trace.calls if c.name == "Net"] == [1, 2]


def test_inputs_are_taken_as_the_call_starts_and_keyword_tensors_count(tmp_path: Path) -> None:
    in_place = Scale(3.0, in_place=True)
    _trace(tmp_path / "a", lambda: in_place(torch.ones(2)))
    _trace(tmp_path / "b", lambda: Scale(3.0)(torch.ones(2)))
    a, b = read_trace(tmp_path / "a").calls[0], read_trace(tmp_path / "b").calls[0]
    assert a.inputs == b.inputs and a.outputs == b.outputs  # the in-place edit came later
    scale = Scale(1.0)
    _trace(tmp_path / "c", lambda: scale(torch.ones(2), bias=torch.zeros(2)))
    _trace(tmp_path / "d", lambda: scale(torch.ones(2), bias=torch.ones(2)))
    c, d = read_trace(tmp_path / "c").calls[0], read_trace(tmp_path / "d").calls[0]
    assert c.inputs != d.inputs


def test_two_outermost_modules_of_one_class_get_two_labels(tmp_path: Path) -> None:
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    _trace(tmp_path, lambda: (first(torch.ones(2)), second(torch.ones(2)), first(torch.ones(2))))
    assert [(c.name, c.number) for c in read_trace(tmp_path).calls] == [
        ("Linear", 1), ("Linear#2", 1), ("Linear", 2)]


def _reachable_tensors(start: object) -> list[torch.Tensor]:
    """The tensors reachable from `start` through containers and plain objects."""
    found, seen, todo = [], set(), [start]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, (type, nn.Module)):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
            continue
        todo.extend(gc.get_referents(item))
    return found


def test_the_tracer_keeps_no_tensor_and_leaves_no_hook(tmp_path: Path) -> None:
    """Memory stays bounded by one module output: each goes to its file and is let go."""
    net = Net()
    with Tracer(tmp_path) as tracer:
        net(torch.ones(4, 3))
        net(torch.ones(4, 3))
        assert tracer.entered == 8
        assert _reachable_tensors(tracer) == []
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks
    net(torch.ones(1, 3))  # after the trace: not written
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 8


class Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no")


def test_a_call_that_raises_is_left_out_and_the_trace_goes_on(tmp_path: Path) -> None:
    outer = nn.Sequential(nn.Identity(), Fails())
    after = nn.Sequential(nn.Linear(2, 2))

    def run() -> None:
        try:
            outer(torch.ones(2))
        except ValueError:
            pass
        after(torch.ones(2))

    _trace(tmp_path, run)
    trace = read_trace(tmp_path)
    assert [(c.name, c.depth) for c in trace.calls] == [
        ("Sequential.0", 1), ("Sequential#2.0", 1), ("Sequential#2", 0)]
    assert "Sequential#2.0.weight" in trace.states  # the next model is an outermost one


def test_a_freed_module_whose_id_comes_back_is_not_mistaken_for_it(tmp_path: Path) -> None:
    def run() -> None:
        for _ in range(3):
            model = nn.Sequential(nn.Linear(2, 2))
            model(torch.ones(2))
            del model
            gc.collect()

    _trace(tmp_path, run)
    trace = read_trace(tmp_path)
    outermost = [c.name for c in trace.calls if c.depth == 0]
    assert outermost == ["Sequential", "Sequential#2", "Sequential#3"]
    assert {"Sequential#3.0.weight", "Sequential#3.0.bias"} <= set(trace.states)


class Pair(nn.Module):
    def forward(self, x: torch.Tensor, cache: object = None) -> Out:
        return Out(x * 2, x.shape[0], cache)


@dataclass
class Out:
    value: torch.Tensor
    count: int
    cache: object


def test_dataclasses_are_walked_and_opaque_values_are_marked_unknown(tmp_path: Path) -> None:
    pair = Pair()
    _trace(tmp_path / "plain", lambda: pair(torch.ones(3)))
    _trace(tmp_path / "opaque", lambda: pair(torch.ones(3), cache=object()))
    plain, opaque = read_trace(tmp_path / "plain"), read_trace(tmp_path / "opaque")
    assert plain.calls[0].unknown == "" and plain.calls[0].other == {
        ".count": "3", ".cache": "None"}
    stored = plain.call_outputs(plain.calls[0])
    assert isinstance(stored, dict) and torch.equal(stored[".value"], torch.full((3,), 2.0))
    assert opaque.calls[0].unknown == "inputs and outputs"
    assert opaque.calls[0].other[".cache"] == "<object>"


def test_conjugate_and_negative_views_count_by_their_values(tmp_path: Path) -> None:
    value = torch.tensor([1 + 2j, 3 - 1j])
    _trace(tmp_path / "a", lambda: nn.Identity()(value))
    _trace(tmp_path / "b", lambda: nn.Identity()(value.conj()))
    a, b = read_trace(tmp_path / "a"), read_trace(tmp_path / "b")
    assert a.calls[0].inputs != b.calls[0].inputs
    stored = b.call_outputs(b.calls[0])
    assert isinstance(stored, torch.Tensor) and torch.equal(stored, value.conj().resolve_conj())


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_a_value_the_tracer_cannot_read_stops_the_trace_not_the_case(tmp_path: Path) -> None:
    class Jagged(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nested.nested_tensor([x, x[:1]])

    with Tracer(tmp_path) as tracer:
        out = Jagged()(torch.ones(2))
        nn.Identity()(torch.ones(2))  # after the problem: not traced
    assert out.is_nested and tracer.problem.startswith("RuntimeError")
    assert not torch.nn.modules.module._global_forward_hooks
    assert not (tmp_path / "calls.jsonl").read_text()


def test_the_case_outputs_are_read_back(tmp_path: Path) -> None:
    value = {"logits": torch.arange(4.0), "n": 3}
    with Tracer(tmp_path):
        pass
    write_outputs(tmp_path, {"forward": value})
    trace = read_trace(tmp_path)
    assert trace.calls == [] and trace.states == {}
    stored = trace.outputs["forward"]
    assert isinstance(stored, dict) and isinstance(stored["logits"], torch.Tensor)
    assert torch.equal(stored["logits"], torch.arange(4.0))
    assert stored["n"] == 3


def test_lazy_parameters_are_kept_once_they_exist(tmp_path: Path) -> None:
    """A model with lazy modules gets a dummy forward first (what init's starter asks)."""
    model = nn.Sequential(nn.LazyLinear(3))

    def run() -> None:
        model(torch.zeros(1, 4))  # the dummy batch: the weights come into being here
        model(torch.ones(2, 4))

    with Tracer(tmp_path) as tracer:
        run()
    write_outputs(tmp_path, {})
    assert tracer.problem == ""
    trace = read_trace(tmp_path)
    assert set(trace.states) == {"Sequential.0.weight", "Sequential.0.bias"}
    assert torch.equal(trace.state("Sequential.0.weight"), model[0].weight.detach())
    assert [c.number for c in trace.calls if c.name == "Sequential"] == [1, 2]


def _run_as_a_test(folder: Path) -> None:
    """Calls as a test body would: the model, then one of its parts on its own."""
    torch.manual_seed(0)
    model = Net()
    with Tracer(folder, test=_run_as_a_test):
        model(torch.ones(2, 3))
        model.proj(torch.ones(2, 3))
        nn.Dropout(0.5).train()(torch.ones(4))  # held by no variable; draws random numbers
    write_outputs(folder, {})


def test_modules_are_named_by_their_path_from_the_tests_variables(tmp_path: Path) -> None:
    _run_as_a_test(tmp_path)
    trace = read_trace(tmp_path)
    assert [(c.name, c.number) for c in trace.calls] == [
        ("model.proj", 1), ("model.scale", 1), ("model.scale", 2), ("model", 1),
        ("model.proj", 2), ("Dropout", 1)]
    # each parameter and buffer once, though model.proj was also called on its own
    assert sorted(trace.states) == ["model.offset", "model.proj.bias", "model.proj.weight"]
    assert [c.draws for c in trace.calls] == [False] * 5 + [True]


def test_input_tensors_are_kept_once_each_and_read_back(tmp_path: Path) -> None:
    _run_as_a_test(tmp_path)
    trace = read_trace(tmp_path)
    proj, _, second_scale, model = trace.calls[:4]
    assert proj.tensors_in == model.tensors_in  # the same ones: one file
    assert torch.equal(trace.call_inputs(proj)["[0]"], torch.ones(2, 3))
    stored = trace.call_outputs(trace.calls[1])
    assert isinstance(stored, torch.Tensor)
    assert torch.equal(trace.call_inputs(second_scale)["[0]"], stored)
    assert len(list((tmp_path / "inputs").iterdir())) == 4  # ones, two scale inputs, Dropout's


def _build() -> Net:
    """A helper that builds and calls the model, as a test's `build()` does for lazy
    modules."""
    torch.manual_seed(0)
    built = Net()
    built(torch.zeros(1, 3))
    return built


def _run_through_a_helper(folder: Path) -> None:
    with Tracer(folder, test=_run_through_a_helper):
        model = _build()
        model(torch.ones(2, 3))
    write_outputs(folder, {})


def test_a_module_first_called_in_a_helper_is_named_by_the_helpers_variable(
        tmp_path: Path) -> None:
    _run_through_a_helper(tmp_path)
    assert [(c.name, c.number) for c in read_trace(tmp_path).calls if c.depth == 0] == [
        ("built", 1), ("built", 2)]


def test_frames_of_every_layer_of_this_package_name_nothing_of_the_users() -> None:
    import regression
    from regression.diagnose.trace import _NOT_THE_USERS

    assert str(Path(regression.__file__).parent) in _NOT_THE_USERS
