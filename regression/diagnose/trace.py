"""A trace of every torch.nn.Module call of one case, for `invoke explain`.

Global forward hooks note each call in the order calls finish: its module's path from what
the test holds (`model.visual.transformer`), the digest of its inputs (taken as the call
starts), the state of torch's random generators as it starts and whether it drew from them,
and its output and input tensors, which go to files of their own at once (an input tensor
seen before is not written again). Each parameter and buffer of an outermost module is
written, one file each and once, when that module is first called. Nothing stays in memory
but one line per call, so memory is bounded by the largest single module output, not by the
trace.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import weakref
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping

import torch
from torch.utils.hooks import RemovableHandle

from regression.environment.fingerprint import digest
from regression.nodes import MAX_DEPTH
from regression.store.codec import (
    Encoder,
    decode,
    save_tensors,
    tensors_digest,
    tensors_from_file,
    unwritable,
)

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


PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
"""Leaves other than tensors whose text says all about them."""


def generators() -> str:
    """Digest of the state of torch's global random generators (what dropout draws from)."""
    states = {"cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states.update((f"cuda{i}", s) for i, s in enumerate(torch.cuda.get_rng_state_all()))
    return tensors_digest(states)


def as_storable(tensor: torch.Tensor) -> torch.Tensor | None:
    """`tensor`'s bits as a dense, contiguous CPU tensor safetensors can hold; None if it
    has none to read (a meta tensor)."""
    tensor = tensor.detach()
    if tensor.is_meta:
        return None
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    tensor = tensor.resolve_conj().resolve_neg().cpu().contiguous()
    if unwritable("t", tensor):  # a dtype safetensors has no name for: its bytes
        tensor = tensor.reshape(-1).view(torch.uint8)
    return tensor


def leaves(value: object) -> tuple[dict[str, torch.Tensor], dict[str, str], bool]:
    """The tensors nested in `value` by path, a text for every other leaf, and whether any
    leaf is a value these cannot show (an object that is no container, a tensor without
    data)."""
    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, str] = {}
    unknown = False
    for path, leaf in walk(value, "", 0):
        if isinstance(leaf, torch.Tensor):
            storable = as_storable(leaf)
            if storable is not None:
                tensors[path or WHOLE] = storable
                continue
            other[path] = f"tensor {leaf.dtype} {tuple(leaf.shape)} on {leaf.device}"
            unknown = True
        elif isinstance(leaf, PLAIN):
            other[path] = repr(leaf)
        else:
            other[path] = f"<{type(leaf).__qualname__}>"
            unknown = True
    return tensors, other, unknown


def walk(value: object, path: str, depth: int) -> Iterator[tuple[str, object]]:
    """Each leaf of `value` with its path: lists, tuples, mappings and dataclasses are
    walked into."""
    if depth >= MAX_DEPTH or isinstance(value, (torch.Tensor, *PLAIN)):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from walk(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from walk(item, f"{path}[{key!r}]", depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from walk(getattr(value, item.name), f"{path}.{item.name}", depth + 1)
    else:
        yield path, value


@dataclass(frozen=True)
class _Open:
    """A call that has started and not finished."""

    module: int
    name: str
    kind: str
    number: int
    depth: int
    entered: int
    tensors: dict[str, list[str]]
    other: dict[str, str]
    generators: str
    unknown: bool


@dataclass
class _Root:
    """An outermost module: the module, its label, its submodules' names by id, and the
    names of its parameters and buffers written so far."""

    module: weakref.ref[torch.nn.Module]
    label: str
    names: dict[int, str]
    kept: set[str] = field(default_factory=set)
    lazy: bool = True
    """Whether some of its parameters may not exist yet: until a call finds none lazy, its
    later calls look again; after that they skip the look."""
    holder: _Root | None = None
    """The module a variable of the test holds it in, when that is another: its parameters
    and buffers are the weights, even those no module call uses (`model.pos_embed`)."""


class Tracer:
    """While entered, writes every module call of this process to `folder`. A failure of
    its own (a full disk, a tensor it cannot read) stops the trace, never the case: it is
    kept in `problem`."""

    def __init__(self, folder: Path, test: Callable[..., object] | None = None) -> None:
        self.folder = folder
        self.calls_folder = folder / "calls"
        self.states_folder = folder / "states"
        self.inputs_folder = folder / INPUTS
        self.test_code = getattr(inspect.unwrap(test), "__code__", None) if test else None
        """The test function's code: its locals name the modules the test calls."""
        self.written_inputs: dict[str, str] = {}
        """The file of each input tensor written, by content hash."""
        self.kept: dict[int, weakref.ref[torch.Tensor]] = {}
        """Each parameter and buffer written, by id: one shared by two outermost modules
        is written once."""
        self.stack: list[_Open] = []
        self.roots: dict[int, _Root] = {}
        """Each outermost module seen, by id."""
        self.labels: Counter[str] = Counter()
        self.numbers: Counter[str] = Counter()
        self.entered = 0
        self.stored = 0
        """Parameters and buffers written so far."""
        self.handles: list[RemovableHandle] = []
        self.problem = ""
        self.calls: IO[str] | None = None
        self.states: IO[str] | None = None

    def __enter__(self) -> Tracer:
        for folder in (self.calls_folder, self.states_folder, self.inputs_folder):
            folder.mkdir(parents=True, exist_ok=True)
        self.calls = open(self.folder / CALLS, "a", encoding="utf-8")
        self.states = open(self.folder / STATES, "a", encoding="utf-8")
        hooks = torch.nn.modules.module
        self.handles = [hooks.register_module_forward_pre_hook(self._start),
                        hooks.register_module_forward_hook(self._finish, with_kwargs=True,
                                                           always_call=True)]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self.handles:
            handle.remove()
        for stream in (self.calls, self.states):
            if stream is not None:
                stream.close()

    def _start(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self.problem:
            return
        try:
            if not self.stack:
                root = self._root(module) or self._add_root(module)
                if root.holder is not None and root.holder.module() is not None:
                    self._keep_states(root.holder, root.holder.module())  # type: ignore[arg-type]
                self._keep_states(root, module)
            name = self._name(module)
            self.numbers[name] += 1
            tensors, other, unknown = self._write_inputs(args)
            self.stack.append(_Open(id(module), name, type(module).__qualname__,
                                    self.numbers[name], len(self.stack), self.entered,
                                    tensors, other, generators(), unknown))
            self.entered += 1
        except Exception as exc:  # noqa: BLE001 - the case goes on; explain reports it
            self._stop(exc)

    def _finish(self, module: torch.nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        """After a call: (kwargs, output); after a call that raised, torch passes only
        (output) and the call is dropped from the trace."""
        if self.problem:
            return
        while self.stack and self.stack[-1].module != id(module):
            self.stack.pop()  # a call that raised where no hook saw it
        if not self.stack:
            return
        started = self.stack.pop()
        if len(rest) != 2:
            return
        try:
            self._write_call(started, *rest)
        except Exception as exc:  # noqa: BLE001 - the case goes on; explain reports it
            self._stop(exc)

    def _write_call(self, started: _Open, kwargs: dict[str, Any], output: Any) -> None:
        tensors, other, unknown_outputs = leaves(output)
        file = content = ""
        if tensors:
            file, content = save_tensors(self.calls_folder, f"{started.entered:06d}", tensors)
        keywords, other_keywords, unknown_keywords = self._write_inputs(kwargs)
        unknown = [part for part, hidden in (("inputs", started.unknown or unknown_keywords),
                                             ("outputs", unknown_outputs)) if hidden]
        tensors_in = {**started.tensors, **keywords}
        other_in = {**started.other, **other_keywords}
        inputs = digest(json.dumps([[c for _, c in tensors_in.values()], other_in]).encode())
        call = Call(started.entered, started.name, started.kind, started.number,
                    started.depth, inputs, digest(json.dumps([content, other]).encode()), file,
                    content, other, " and ".join(unknown), tensors_in, other_in,
                    started.generators, generators() != started.generators)
        self._append(self.calls, asdict(call))

    def _write_inputs(self, value: object) -> tuple[dict[str, list[str]], dict[str, str], bool]:
        """The tensors in a call's inputs, each written to its file unless written before,
        the other leaves as text, and whether a leaf is one the trace cannot see into."""
        tensors, other, unknown = leaves(value)
        written = {}
        for path, tensor in tensors.items():
            content = tensors_digest({"t": tensor})
            file = self.written_inputs.get(content)
            if file is None:
                file, _ = save_tensors(self.inputs_folder, f"{len(self.written_inputs):06d}",
                                       {"t": tensor})
                self.written_inputs[content] = file
            written[path] = [file, content]
        return written, other, unknown

    def _stop(self, exc: Exception) -> None:
        self.problem = f"{type(exc).__name__}: {exc}"
        for handle in self.handles:
            handle.remove()

    def _append(self, stream: IO[str] | None, data: Mapping[str, object]) -> None:
        assert stream is not None, "the tracer writes only while entered"
        stream.write(json.dumps(data) + "\n")

    def _root(self, module: torch.nn.Module) -> _Root | None:
        """`module` as an outermost module already seen; None when it is not one (an id of
        a module since freed does not count)."""
        known = self.roots.get(id(module))
        return known if known is not None and known.module() is module else None

    def _add_root(self, module: torch.nn.Module) -> _Root:
        """An outermost module seen for the first time, named; the module a variable of the
        test holds it in, when that is another, named and kept as its holder."""
        held = self._inside_known(module)
        holder = None
        if held is None:
            variable = self._variable(module)
            if variable is not None and variable[1] is not module:
                holder = self._root(variable[1]) or self._register(variable[1], variable[0])
            held = self._inside_known(module) or (variable[0] if variable else "")
        root = self._register(module, held or type(module).__qualname__)
        root.holder = holder
        return root

    def _register(self, module: torch.nn.Module, label: str) -> _Root:
        """A module named `label` (made unique with `#2`, `#3`, ...), its submodules under it."""
        self.labels[label] += 1
        label = label if self.labels[label] == 1 else f"{label}#{self.labels[label]}"
        names = {id(m): f"{label}.{n}" if n else label for n, m in module.named_modules()}
        root = self.roots[id(module)] = _Root(weakref.ref(module), label, names)
        return root

    def _inside_known(self, module: torch.nn.Module) -> str | None:
        """`module`'s name in a module named before (`model.visual.transformer`), if any."""
        return next((known.names[id(module)] for known in self.roots.values()
                     if known.module() is not None and id(module) in known.names), None)

    def _variable(self, module: torch.nn.Module) -> tuple[str, torch.nn.Module] | None:
        """The variable of the running test that holds `module` by the shortest path, else
        of a function it is calling (a `build()` helper), nearest the test first: its name
        and its module. None when the test is unknown or none holds it."""
        between = []
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not self.test_code:
            if not frame.f_code.co_filename.startswith(_NOT_THE_USERS):
                between.append(frame)
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        for caller in [frame, *reversed(between)]:
            found = _holding(caller.f_locals, module)
            if found is not None:
                return found
        return None

    def _keep_states(self, root: _Root, module: torch.nn.Module) -> None:
        """Write the parameters and buffers of an outermost module not written yet: all of
        them at its first call, but for those of lazy modules, written once they exist."""
        if not root.lazy:
            return
        root.lazy = False
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if torch.nn.parameter.is_lazy(tensor):
                root.lazy = True
                continue
            if name in root.kept:
                continue
            root.kept.add(name)
            known = self.kept.get(id(tensor))
            if known is not None and known() is tensor:
                continue  # written under another outermost module's name
            self.kept[id(tensor)] = weakref.ref(tensor)
            stored = as_storable(tensor)  # one at a time: one tensor in host memory at once
            if stored is None:
                continue
            file, content = save_tensors(self.states_folder, f"{self.stored:06d}",
                                         {"t": stored})
            self.stored += 1
            self._append(self.states, asdict(State(f"{root.label}.{name}", file, content,
                                                   root.label)))

    def _name(self, module: torch.nn.Module) -> str:
        """The module's name in the outermost module being called, or in any outermost
        module seen; its class in angle brackets when it belongs to none."""
        outermost = [self.stack[0].module] if self.stack else []
        for root in [*outermost, *self.roots]:
            known = self.roots.get(root)
            if known is not None and known.module() is not None and id(module) in known.names:
                return known.names[id(module)]
        return f"<{type(module).__qualname__}>"


_NOT_THE_USERS = (str(Path(torch.__file__).parent), str(Path(__file__).parents[1]))
"""Where frames are torch's or this package's: their variables name nothing the user knows."""


def _holding(variables: Mapping[str, object], module: torch.nn.Module
             ) -> tuple[str, torch.nn.Module] | None:
    """The variable that holds `module` by the shortest path, `self` aside (a method's own
    module says nothing of where the test holds it): its name and its module."""
    found = [(len(inner), name, value) for name, value in variables.items()
             if name != "self" and isinstance(value, torch.nn.Module)
             for inner, sub in value.named_modules() if sub is module]
    if not found:
        return None
    _, name, value = min(found, key=lambda item: item[0])
    return name, value
