"""A trace of every torch.nn.Module call of one case, for `invoke explain`.

Global forward hooks note each call in the order calls finish: its module's qualified name
in the outermost module, the digest of its tensor inputs (taken as the call starts) and its
outputs, which go to a file of their own at once. The outermost modules' parameters and
buffers are written when each is first called. Nothing stays in memory but one line per
call, so memory is bounded by the largest single module output, not by the trace.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch.utils.hooks import RemovableHandle

from .fingerprint import digest
from .store import Encoder, decode, save_tensors, tensors_digest, tensors_from_file, unwritable

CALLS = "calls.jsonl"
STATES = "states.jsonl"
OUTPUTS = "outputs.json"
MAX_DEPTH = 32
WHOLE = "<value>"
"""The path of a value that is itself a tensor."""


@dataclass(frozen=True)
class Call:
    """One finished module call."""

    entered: int
    """Its place in the order calls started (0 first)."""
    name: str
    """The module's qualified name in the outermost module, led by that module's label."""
    kind: str
    """The module's class."""
    number: int
    """1 for the first call of this name, 2 for the second, ..."""
    depth: int
    """0 for an outermost call."""
    inputs: str
    """Digest of the tensor inputs (positional ones as the call started) and the rest."""
    outputs: str
    """Digest of the outputs."""
    file: str = ""
    """The file in `calls/` holding the output tensors; "" when there are none."""
    file_digest: str = ""

    @property
    def key(self) -> tuple[str, int]:
        """What matches a call in one trace with the same call in another."""
        return self.name, self.number


@dataclass(frozen=True)
class State:
    """One parameter or buffer of an outermost module, when that module was first called."""

    name: str
    digest: str
    file: str
    file_digest: str


@dataclass(frozen=True)
class _Open:
    module: int
    name: str
    kind: str
    number: int
    depth: int
    entered: int
    inputs: str


class Tracer:
    """While entered, writes every module call of this process to `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.calls_folder = folder / "calls"
        self.calls_folder.mkdir(parents=True, exist_ok=True)
        self.stack: list[_Open] = []
        self.roots: dict[int, tuple[str, dict[int, str]]] = {}
        """Each outermost module by id: its label and its submodules' names by id."""
        self.labels: Counter[str] = Counter()
        self.numbers: Counter[str] = Counter()
        self.entered = 0
        self.handles: list[RemovableHandle] = []

    def __enter__(self) -> Tracer:
        hooks = torch.nn.modules.module
        self.handles = [hooks.register_module_forward_pre_hook(self._start),
                        hooks.register_module_forward_hook(self._finish, with_kwargs=True,
                                                           always_call=True)]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self.handles:
            handle.remove()

    def _start(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if not self.stack and id(module) not in self.roots:
            self._add_root(module)
        name = self._name(module)
        self.numbers[name] += 1
        self.stack.append(_Open(id(module), name, type(module).__qualname__,
                                self.numbers[name], len(self.stack), self.entered,
                                _digest(args)))
        self.entered += 1

    def _finish(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                output: Any) -> None:
        while self.stack and self.stack[-1].module != id(module):
            self.stack.pop()  # a call that raised before its hook ran
        if not self.stack:
            return
        started = self.stack.pop()
        tensors, other = _leaves(output)
        file = content = ""
        if tensors:
            file, content = save_tensors(self.calls_folder, f"{started.entered:06d}", tensors)
        inputs = digest(f"{started.inputs}|{_digest(kwargs)}".encode())
        call = Call(started.entered, started.name, started.kind, started.number,
                    started.depth, inputs, digest(json.dumps([content, other]).encode()),
                    file, content)
        _append(self.folder / CALLS, asdict(call))

    def _add_root(self, module: torch.nn.Module) -> None:
        kind = type(module).__qualname__
        self.labels[kind] += 1
        label = kind if self.labels[kind] == 1 else f"{kind}#{self.labels[kind]}"
        names = {id(m): f"{label}.{n}" if n else label for n, m in module.named_modules()}
        self.roots[id(module)] = (label, names)
        state = {f"{label}.{n}": t for n, t in [*module.named_parameters(),
                                                *module.named_buffers()]}
        stored = {n: s for n, s in ((n, _storable(t)) for n, t in state.items())
                  if s is not None}
        if not stored:
            return
        file, content = save_tensors(self.folder, f"state{len(self.roots)}", stored)
        for name, tensor in stored.items():
            _append(self.folder / STATES,
                    asdict(State(name, tensors_digest({"t": tensor}), file, content)))

    def _name(self, module: torch.nn.Module) -> str:
        """The module's name in the outermost module being called, or in any outermost
        module seen; its class in angle brackets when it belongs to none."""
        if self.stack:
            _, names = self.roots.get(self.stack[0].module, ("", {}))
            if id(module) in names:
                return names[id(module)]
        for _, names in self.roots.values():
            if id(module) in names:
                return names[id(module)]
        return f"<{type(module).__qualname__}>"


def _append(path: Path, data: Mapping[str, object]) -> None:
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(data) + "\n")


def _storable(tensor: torch.Tensor) -> torch.Tensor | None:
    """`tensor` as a dense, contiguous CPU tensor safetensors can hold; None if it cannot be
    made one (a meta tensor)."""
    tensor = tensor.detach()
    if tensor.is_meta:
        return None
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    tensor = tensor.cpu().contiguous()
    if unwritable("t", tensor):
        tensor = tensor.view(torch.uint8) if tensor.dim() else tensor.reshape(1).view(torch.uint8)
    return tensor


def _leaves(value: object) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors nested in `value` by path, and a text for every other leaf."""
    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, str] = {}
    for path, leaf in _walk(value, "", 0):
        if isinstance(leaf, torch.Tensor):
            storable = _storable(leaf)
            if storable is not None:
                tensors[path or WHOLE] = storable
                continue
            other[path] = f"tensor {leaf.dtype} {tuple(leaf.shape)} on {leaf.device}"
        elif leaf is None or isinstance(leaf, (bool, int, float, str, torch.dtype)):
            other[path] = repr(leaf)
        else:
            other[path] = type(leaf).__qualname__
    return tensors, other


def _walk(value: object, path: str, depth: int) -> Iterator[tuple[str, object]]:
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]", depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(item, f"{path}[{key!r}]", depth + 1)
    else:
        yield path, value


def _digest(value: object) -> str:
    """One digest of every tensor's bits and every other leaf in `value`."""
    tensors, other = _leaves(value)
    return digest(json.dumps([tensors_digest(tensors) if tensors else "", other]).encode())


def write_outputs(folder: Path, outputs: Mapping[str, object]) -> None:
    """The case's checked outputs, by name, next to its trace."""
    encoder = Encoder(prefix="t", copy=False)
    body: dict[str, object] = {"outputs": {n: encoder.encode(v) for n, v in outputs.items()}}
    if encoder.tensors:
        file, content = save_tensors(folder, "outputs", encoder.tensors)
        body["tensors"] = {"file": file, "digest": content}
    (folder / OUTPUTS).write_text(json.dumps(body), encoding="utf-8")


@dataclass
class Trace:
    """A trace read back: the calls in the order they finished, the outermost modules'
    parameters and buffers, and the case's checked outputs."""

    folder: Path
    calls: list[Call]
    states: dict[str, State]
    outputs: dict[str, object]

    def call_outputs(self, call: Call) -> object:
        """The output tensors of `call`: the tensor a module returned, or its tensors by
        path in what it returned."""
        if not call.file:
            return {}
        tensors = tensors_from_file(self.folder / "calls" / call.file, call.file_digest)
        return tensors.get(WHOLE, tensors)

    def state(self, name: str) -> torch.Tensor:
        """The parameter or buffer `name`, as first called."""
        state = self.states[name]
        return tensors_from_file(self.folder / state.file, state.file_digest)[name]


def read_trace(folder: Path) -> Trace:
    """The trace a Tracer and `write_outputs` left in `folder`."""
    calls = [Call(**json.loads(line)) for line in _lines(folder / CALLS)]
    states = {s.name: s for s in (State(**json.loads(line)) for line in _lines(folder / STATES))}
    body = json.loads((folder / OUTPUTS).read_text(encoding="utf-8"))
    tensors = {}
    if "tensors" in body:
        tensors = tensors_from_file(folder / body["tensors"]["file"], body["tensors"]["digest"])
    outputs = {name: decode(node, tensors) for name, node in body["outputs"].items()}
    return Trace(folder, calls, states, outputs)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
