"""The module-call tracer behind `invoke explain`: real torch modules, real files."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import torch
from torch import nn

from regression.trace import Tracer, read_trace, write_outputs


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
    assert torch.equal(read_trace(tmp_path).call_outputs(calls[1]), expected)  # type: ignore[arg-type]
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


def test_the_tracer_keeps_no_output_and_leaves_no_hook(tmp_path: Path) -> None:
    """Memory stays bounded by one module output: each goes to its file and is let go."""
    scale = Scale(2.0)
    seen: list[weakref.ref[torch.Tensor]] = []
    with Tracer(tmp_path):
        seen.append(weakref.ref(scale(torch.ones(1000))))
        gc.collect()
        assert seen[0]() is None
    handles = torch.nn.modules.module._global_forward_hooks
    assert not handles and not torch.nn.modules.module._global_forward_pre_hooks
    scale(torch.ones(3))  # after the trace: not written
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 1


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
