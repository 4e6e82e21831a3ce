"""invoke explain: where in the model a case's outputs start to differ.

Two traces of one case (regression/trace.py), at the reference and in the working tree, are
matched call by call (a module's path and its call number). The first call, in the order
calls finish, whose inputs hold the reference's values and whose outputs differ is the
module whose own computation changed: its submodules that finished before it gave the same
outputs, or were given other inputs by it. Values count as the same in another layout (dims
permuted, reshaped), so a change of layout above a module does not stop the search. The
random generators' state counts only for calls that draw from it. The outermost modules'
parameters and buffers are compared first, since different weights change outputs with no
change of code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from regression.compare.layout import Layout, aligned, layout
from regression.compare.outputs import Difference, compare_outputs, compare_tensors
from regression.report import largest_relative

if TYPE_CHECKING:
    import torch

    from regression.diagnose.trace import Call, Trace

SAME, LAYOUT, DIFF, NEW, UNKNOWN = "same", "layout", "DIFF", "new", "?"
"""How a call's inputs or outputs compare with the reference's: `layout` where they hold the
same values in another layout, `?` where they hold values the trace cannot see into."""
Key = tuple[str, int]


class Verdicts:
    """How each call compares with the reference's, worked out when first asked: tensors
    are read back, for layouts, only where digests differ."""

    def __init__(self, reference: Trace, candidate: Trace) -> None:
        self.reference, self.candidate = reference, candidate
        self.before = {call.key: call for call in reference.calls}
        self.known: dict[Key, tuple[str, str]] = {}
        self.layouts: dict[Key, list[str]] = {}
        self.orders: dict[Key, tuple[int, ...]] = {}
        """The first permutation of a call's inputs: how to align its outputs."""
        self.notes: dict[Key, list[str]] = {}
        """Arguments that are not tensors passed on one side only (a new `pos=None`): noted,
        not taken as other inputs."""

    def __call__(self, call: Call) -> tuple[str, str]:
        if call.key not in self.known:
            before = self.before.get(call.key)
            self.known[call.key] = (NEW, NEW) if before is None else self._compare(before, call)
        return self.known[call.key]

    def _compare(self, before: Call, after: Call) -> tuple[str, str]:
        """Equal digests over values the trace cannot see into prove nothing: `?`."""
        hidden = f"{before.unknown} {after.unknown}"
        inputs = self._inputs(before, after)
        if inputs != DIFF and "inputs" in hidden:
            inputs = UNKNOWN
        if before.outputs == after.outputs:
            outputs = SAME
        elif inputs in (SAME, LAYOUT):
            outputs = self._outputs(before, after)
        else:
            outputs = DIFF  # other inputs: whether its values moved tells nothing
        if outputs != DIFF and "outputs" in hidden:
            outputs = UNKNOWN
        return inputs, outputs

    def _inputs(self, before: Call, after: Call) -> str:
        """SAME, LAYOUT or DIFF; the generators' state counts for calls that draw from it.
        An argument that is not a tensor (None too) passed on one side only is noted, not a
        difference: a new keyword that changes nothing changes no inputs."""
        if before.generators != after.generators and (before.draws or after.draws):
            return DIFF
        if before.inputs == after.inputs:
            return SAME
        shared = before.other_in.keys() & after.other_in.keys()
        if list(before.tensors_in) != list(after.tensors_in) or \
                any(before.other_in[path] != after.other_in[path] for path in shared):
            return DIFF
        self._note_one_sided(before, after)
        if all(before.tensors_in[path][1] == content[1]
               for path, content in after.tensors_in.items()):
            return SAME
        found = tensor_layouts(self.reference.call_inputs(before),
                               self.candidate.call_inputs(after))
        if found is None:
            return DIFF
        self.layouts[after.key] = [f"input{path}: {how}" for path, how in found.items()]
        self.orders[after.key] = next(iter(found.values())).order
        return LAYOUT

    def _note_one_sided(self, before: Call, after: Call) -> None:
        notes = [f"input{path}: {after.other_in[path]}, passed only in the working tree"
                 for path in after.other_in if path not in before.other_in]
        notes += [f"input{path}: {before.other_in[path]}, passed only at the reference"
                  for path in before.other_in if path not in after.other_in]
        if notes:
            self.notes[after.key] = notes

    def input_differences(self, after: Call) -> list[str]:
        """Each input of a call that differs from the reference's, named by its path: what
        makes its inputs other than at the reference."""
        before = self.before.get(after.key)
        if before is None:
            return []
        found = ["the random generators' state (it draws from them)"] \
            if before.generators != after.generators and (before.draws or after.draws) else []
        for path in dict.fromkeys([*before.tensors_in, *after.tensors_in]):
            was, now = before.tensors_in.get(path), after.tensors_in.get(path)
            if was is None or now is None:
                where = "in the working tree" if was is None else "at the reference"
                found.append(f"input{path}: a tensor only {where}")
            elif was[1] != now[1]:
                found.append(f"input{path}: other values")
        found += [f"input{path}: {after.other_in[path]}, reference {before.other_in[path]}"
                  for path in before.other_in
                  if path in after.other_in and before.other_in[path] != after.other_in[path]]
        return found

    def _outputs(self, before: Call, after: Call) -> str:
        """LAYOUT where the outputs hold the reference's values in another layout, else
        DIFF."""
        if before.other != after.other:
            return DIFF
        found = tensor_layouts(self._outputs_of(self.reference, before),
                         self._outputs_of(self.candidate, after))
        if found is None:
            return DIFF
        self.layouts.setdefault(after.key, []).extend(
            f"output{path}: {how}" for path, how in found.items())
        return LAYOUT

    @staticmethod
    def _outputs_of(trace: Trace, call: Call) -> dict[str, torch.Tensor]:
        """A call's output tensors by path ("" for a tensor it returned itself)."""
        import torch

        outputs = trace.call_outputs(call)
        return {"": outputs} if isinstance(outputs, torch.Tensor) else outputs  # type: ignore[return-value]

    def output_differences(self, after: Call) -> list[Difference]:
        """How the outputs of one call differ: its tensors (the reference's aligned to
        their layout where it is another), then its other values."""
        before = self.before[after.key]
        was, now = self._outputs_of(self.reference, before), self._outputs_of(self.candidate, after)
        found: list[Difference] = []
        for path in dict.fromkeys([*was, *now]):
            if path not in was or path not in now:
                found.append(Difference(f"output{path}", "in one trace only"))
                continue
            label, reference = f"output{path}", was[path]
            moved = aligned(reference, now[path], self.orders.get(after.key)) \
                if reference.shape != now[path].shape else None
            if moved is not None:
                reference, label = moved[0], f"{label} (against the reference's, {moved[1].how})"
            difference = compare_tensors(reference, now[path], label)
            if difference is not None:
                found.append(difference)
        for path in dict.fromkeys([*before.other, *after.other]):
            old, new = before.other.get(path, "(none)"), after.other.get(path, "(none)")
            if old != new:
                found.append(Difference(f"output{path}", f"{new}, reference {old}"))
        return found


def tensor_layouts(reference: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]
             ) -> dict[str, Layout] | None:
    """How each tensor of `actual` holds the reference's values in another layout (those
    in the same layout left out); None when one of them does not."""
    if list(reference) != list(actual):
        return None
    moved = {}
    for path, tensor in reference.items():
        how = layout(tensor, actual[path])
        if how is None:
            return None
        if how.how:
            moved[path] = how
    return moved


AROUND = 4
"""Calls shown before and after the module found, in the order calls start."""
SHOWN_STATES = 5
"""Parameters and buffers that differ reported with their difference; the rest by module."""


@dataclass
class Explanation:
    """What two traces of one case say about a change."""

    outputs: list[tuple[str, list[Difference]]]
    """The case's checked outputs that differ."""
    calls: tuple[int, int]
    """How many module calls each trace holds: reference, working tree."""
    states: list[tuple[str, list[Difference]]] = field(default_factory=list)
    """Parameters and buffers of the outermost modules that differ (or are in one only),
    each once: the first few with their difference, the rest with none."""
    moved: int = 0
    """How many of those hold values the reference had under another name or layout."""
    revalued: list[str] = field(default_factory=list)
    """Those in both traces whose values changed in place (not moved): weights that
    changed, where the rest only changed name or came or went with a submodule."""
    all_states: list[str] = field(default_factory=list)
    """The names of the parameters and buffers in either trace."""
    owners: list[str] = field(default_factory=list)
    """The modules whose parameters and buffers those are, by name."""
    found: Call | None = None
    """The first call whose inputs hold the reference's values and whose outputs differ."""
    found_differences: list[Difference] = field(default_factory=list)
    found_calls_inner: bool = False
    """Whether the call found called submodules of its own."""
    hidden_inner: list[Call] = field(default_factory=list)
    """The submodule calls of the one found whose inputs the trace cannot compare."""
    fed_other_inputs: list[Call] = field(default_factory=list)
    """The submodule calls of the one found that it gave other inputs than at the
    reference."""
    other_inputs: dict[Key, list[str]] = field(default_factory=dict)
    """For each call given other inputs than at the reference (those fed by the one found,
    and those in `window`): which of its inputs differ, by path."""
    noted: dict[Key, list[str]] = field(default_factory=dict)
    """Arguments that are not tensors passed on one side only, by call: noted, not taken
    as other inputs."""
    fed_same_inputs: list[Call] = field(default_factory=list)
    """The submodule calls of the one found that it gave the reference's inputs."""
    only_here: list[Call] = field(default_factory=list)
    """Working-tree calls the reference does not make (same name, same call number)."""
    only_there: list[Call] = field(default_factory=list)
    """Reference calls the working tree does not make."""
    window: list[tuple[Call, str, str]] = field(default_factory=list)
    """The calls around the one found and the calls it was made inside, in the order they
    started, each with how its inputs and its outputs compare with the reference's."""
    layouts: dict[Key, list[str]] = field(default_factory=dict)
    """For calls whose inputs or outputs hold the same values in another layout: how."""
    generators_aside: int = 0
    """Calls whose random generators' state differs but which draw none: compared without."""
    generators_drawn: int = 0
    """Calls that draw random numbers from generators in another state than at the
    reference."""


def explain(reference: Trace, candidate: Trace) -> Explanation:
    """Compare the traces of one case at the reference and in the working tree."""
    result = Explanation(compare_outputs(reference.outputs, candidate.outputs),
                         calls=(len(reference.calls), len(candidate.calls)))
    result.states, result.moved, result.revalued = _state_differences(reference, candidate)
    result.all_states = list(dict.fromkeys([*reference.states, *candidate.states]))
    result.owners = list(dict.fromkeys(state.owner for trace in (reference, candidate)
                                       for state in trace.states.values()))
    verdicts = Verdicts(reference, candidate)
    here = {call.key for call in candidate.calls}
    result.only_there = [call for call in reference.calls if call.key not in here]
    result.only_here = [call for call in candidate.calls if call.key not in verdicts.before]
    for call in candidate.calls:  # in the order calls finish: innermost first
        if verdicts(call)[0] in (SAME, LAYOUT) and verdicts(call)[1] == DIFF:
            result.found = call
            break
    if result.found is not None:
        _describe_found(result, result.found, candidate.calls, verdicts)
    result.layouts = verdicts.layouts
    result.noted = verdicts.notes
    moved = [(before, call) for call in candidate.calls
             if (before := verdicts.before.get(call.key)) and before.generators != call.generators]
    result.generators_drawn = sum(1 for b, a in moved if b.draws or a.draws)
    result.generators_aside = len(moved) - result.generators_drawn
    return result


@dataclass(frozen=True)
class CallRow:
    """One call of the working tree's trace, as a page that shows every call draws it."""

    call: Call
    inputs: str
    """How its inputs compare with the reference's: SAME, LAYOUT, DIFF, NEW or UNKNOWN."""
    outputs: str
    """How its outputs compare, likewise."""
    relative: float | None = None
    """The largest relative difference of its output tensors from the reference's: 0 where
    they hold the reference's values; None where nothing can be measured (a new call, values
    the trace cannot see into, outputs that are not float tensors)."""
    note: str = ""
    """Inputs that differ, by path, where its inputs differ; else arguments that are not
    tensors passed on one side only (noted, not a difference)."""


def call_rows(reference: Trace, candidate: Trace) -> list[CallRow]:
    """Every working-tree call in the order calls start, with how far its outputs are from
    the reference's: where a change starts and how it grows on its way out."""
    verdicts = Verdicts(reference, candidate)
    rows = []
    for call in sorted(candidate.calls, key=lambda c: c.entered):
        inputs, outputs = verdicts(call)
        relative: float | None = 0.0 if outputs in (SAME, LAYOUT) else None
        if outputs == DIFF and call.key in verdicts.before:
            relative = largest_relative(verdicts.output_differences(call))
        note = verdicts.input_differences(call) if inputs == DIFF else \
            verdicts.notes.get(call.key, [])
        rows.append(CallRow(call, inputs, outputs, relative, "; ".join(note)))
    return rows


def _describe_found(result: Explanation, found: Call, calls: list[Call],
                    verdicts: Verdicts) -> None:
    """What the call found changed, what it called, and the calls around it."""
    result.found_differences = verdicts.output_differences(found)
    inner = _inner_calls(calls, found)
    result.found_calls_inner = bool(inner)
    result.hidden_inner = [c for c in inner if verdicts(c)[0] == UNKNOWN]
    result.fed_other_inputs = [c for c in inner if verdicts(c)[0] in (DIFF, NEW)]
    result.fed_same_inputs = [c for c in inner if verdicts(c)[0] in (SAME, LAYOUT)]
    result.window = _window(calls, found, verdicts)
    result.other_inputs = {call.key: verdicts.input_differences(call)
                           for call in [*result.fed_other_inputs,
                                        *(c for c, inputs, _ in result.window if inputs == DIFF)]}


def _inner_calls(calls: list[Call], found: Call) -> list[Call]:
    """The modules `found` called: calls that started after it, one level deeper, and
    finished before it."""
    return [call for call in calls[:calls.index(found)]
            if call.entered > found.entered and call.depth == found.depth + 1]


def _state_differences(reference: Trace, candidate: Trace
                       ) -> tuple[list[tuple[str, list[Difference]]], int, list[str]]:
    """Each parameter or buffer that differs, once: the first few with their difference,
    each with where its values were at the reference when they were there under another
    name or layout; how many are such; and the names of those whose values changed in
    place."""
    names = ({s.digest: name for name, s in reversed(reference.states.items())},
             {s.digest: name for name, s in reversed(candidate.states.items())})
    changed: list[tuple[str, list[Difference]]] = []
    moved, revalued = 0, []
    for name in dict.fromkeys([*reference.states, *candidate.states]):
        before, after = reference.states.get(name), candidate.states.get(name)
        if before is not None and after is not None and before.digest == after.digest:
            continue
        elsewhere = _values_elsewhere(reference, candidate, name, names)
        moved += bool(elsewhere)
        if elsewhere:
            changed.append((name, [Difference(name, elsewhere)]))
        elif before is None or after is None:
            where = "the working tree" if before is None else "the reference"
            changed.append((name, [Difference(name, f"only in {where}")]))
        elif len(changed) < SHOWN_STATES:
            revalued.append(name)
            found = compare_tensors(reference.state(name), candidate.state(name), name,
                                    weight=True)
            changed.append((name, [found or Difference(name, "differs")]))
        else:
            revalued.append(name)
            changed.append((name, []))
    return changed, moved, revalued


def _values_elsewhere(reference: Trace, candidate: Trace, name: str,
                      names: tuple[dict[str, str], dict[str, str]]) -> str:
    """Where the other side has the values one side has under `name`: under another name,
    or under this name in another layout; "" when nowhere."""
    before, after = reference.states.get(name), candidate.states.get(name)
    if after is not None:
        other = names[0].get(after.digest)
        if other is not None and other != name and not _constant(candidate.state(name)):
            return f"the values the reference has as {other}"
    elif before is not None:
        other = names[1].get(before.digest)
        if other is not None and other != name and not _constant(reference.state(name)):
            return f"only in the reference; the working tree has its values as {other}"
    if before is None or after is None:
        return ""
    how = layout(reference.state(name), candidate.state(name))
    return str(how) if how is not None else ""


def _constant(tensor: torch.Tensor) -> bool:
    """Whether every element is one value (zeros, ones): such values match by chance."""
    flat = tensor.reshape(-1)
    return flat.numel() <= 1 or bool((flat == flat[0]).all())


def _window(calls: list[Call], found: Call, verdicts: Verdicts) -> list[tuple[Call, str, str]]:
    """The calls that started just before and after `found`, and every call it was made
    inside (its parent, whose outputs differ too, may have started long before)."""
    ordered = sorted(calls, key=lambda call: call.entered)
    at = ordered.index(found)
    around = ordered[max(0, at - AROUND):at + AROUND + 1]
    inside = [call for call in calls[calls.index(found) + 1:] if call.entered < found.entered]
    shown = sorted({call.key: call for call in [*around, *inside]}.values(),
                   key=lambda call: call.entered)
    return [(call, *verdicts(call)) for call in shown]
