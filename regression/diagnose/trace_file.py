"""The files of a trace: the calls and states it lists, the case's outputs, and reading it back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch

from regression.store.codec import Encoder, decode, save_tensors, tensors_from_file

CALLS = "calls.jsonl"
STATES = "states.jsonl"
INPUTS = "inputs"
OUTPUTS = "outputs.json"
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
    """Digest of the inputs: tensors (positional ones as the call started) and other
    leaves."""
    outputs: str
    """Digest of the outputs."""
    file: str = ""
    """The file in `calls/` holding the output tensors; "" when there are none."""
    file_digest: str = ""
    """That file's content hash, checked when it is read."""
    other: dict[str, str] = field(default_factory=dict)
    """The outputs that are not tensors, by path, as text."""
    unknown: str = ""
    """What the digests cannot see ("inputs", "outputs", "inputs and outputs"): a value
    that is neither a tensor nor plain data nor a container of them (a cache object)."""
    tensors_in: dict[str, list[str]] = field(default_factory=dict)
    """The input tensors by path ("[0]", "['mask']"): their file in `inputs/` and its
    content hash."""
    other_in: dict[str, str] = field(default_factory=dict)
    """The inputs that are not tensors, by path, as text."""
    generators: str = ""
    """Digest of torch's random generators' state as the call started."""
    draws: bool = False
    """Whether the call drew random numbers: the generators' state changed during it, so
    it is one of its inputs."""

    @property
    def key(self) -> tuple[str, int]:
        """What matches a call in one trace with the same call in another."""
        return self.name, self.number


@dataclass(frozen=True)
class State:
    """One parameter or buffer of an outermost module, as that module was first called."""

    name: str
    file: str
    """Its own file, so that reading one reads no other."""
    digest: str
    """The file's content hash: equal hashes, equal dtype, shape and bits."""
    owner: str = ""
    """The name of the module whose parameter or buffer it is, as the test holds it."""


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

    def call_inputs(self, call: Call) -> dict[str, torch.Tensor]:
        """The input tensors of `call` by path, as the call started (keyword ones as it
        ended)."""
        return {path: tensors_from_file(self.folder / INPUTS / file, content)["t"]
                for path, (file, content) in call.tensors_in.items()}

    def state(self, name: str) -> torch.Tensor:
        """The parameter or buffer `name`, as first called."""
        state = self.states[name]
        return tensors_from_file(self.folder / "states" / state.file, state.digest)["t"]


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
