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

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from regression.compare import Difference, compare, compare_outputs, compare_tensors
from regression.report import largest_relative
from regression.tensordiff import Layout, aligned, layout

if TYPE_CHECKING:
    import torch

    from regression.diagnose.trace import Call, Trace

AROUND = 4
"""Calls shown before and after the module found, in the order calls start."""
SHOWN_STATES = 5
"""Parameters and buffers that differ reported with their difference; the rest by module."""
SHOWN_GROUPS = 8
"""Modules named in the summary of the other parameters and buffers that differ."""
SAME, LAYOUT, DIFF, NEW, UNKNOWN = "same", "layout", "DIFF", "new", "?"
"""How a call's inputs or outputs compare with the reference's: `layout` where they hold the
same values in another layout, `?` where they hold values the trace cannot see into."""
Key = tuple[str, int]


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
    fed_same_inputs: list[Call] = field(default_factory=list)
    """The submodule calls of the one found that it gave the reference's inputs."""
    only_here: list[Call] = field(default_factory=list)
    """Working-tree calls the reference does not make (same name, same call number)."""
    only_there: list[Call] = field(default_factory=list)
    """Reference calls the working tree does not make."""
    window: list[tuple[Call, str, str]] = field(default_factory=list)
    """The calls around the one found, in the order they started, each with how its inputs
    and its outputs compare with the reference's."""
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
    result.states, result.moved = _state_differences(reference, candidate)
    result.all_states = list(dict.fromkeys([*reference.states, *candidate.states]))
    result.owners = list(dict.fromkeys(state.owner for trace in (reference, candidate)
                                       for state in trace.states.values()))
    verdicts = _Verdicts(reference, candidate)
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


def call_rows(reference: Trace, candidate: Trace) -> list[CallRow]:
    """Every working-tree call in the order calls start, with how far its outputs are from
    the reference's: where a change starts and how it grows on its way out."""
    verdicts = _Verdicts(reference, candidate)
    rows = []
    for call in sorted(candidate.calls, key=lambda c: c.entered):
        inputs, outputs = verdicts(call)
        relative: float | None = 0.0 if outputs in (SAME, LAYOUT) else None
        if outputs == DIFF and call.key in verdicts.before:
            relative = largest_relative(verdicts.output_differences(call))
        rows.append(CallRow(call, inputs, outputs, relative))
    return rows


def _describe_found(result: Explanation, found: Call, calls: list[Call],
                    verdicts: _Verdicts) -> None:
    """What the call found changed, what it called, and the calls around it."""
    result.found_differences = verdicts.output_differences(found)
    inner = _inner_calls(calls, found)
    result.found_calls_inner = bool(inner)
    result.hidden_inner = [c for c in inner if verdicts(c)[0] == UNKNOWN]
    result.fed_other_inputs = [c for c in inner if verdicts(c)[0] in (DIFF, NEW)]
    result.fed_same_inputs = [c for c in inner if verdicts(c)[0] in (SAME, LAYOUT)]
    result.window = _window(calls, found, verdicts)


class _Verdicts:
    """How each call compares with the reference's, worked out when first asked: tensors
    are read back, for layouts, only where digests differ."""

    def __init__(self, reference: Trace, candidate: Trace) -> None:
        self.reference, self.candidate = reference, candidate
        self.before = {call.key: call for call in reference.calls}
        self.known: dict[Key, tuple[str, str]] = {}
        self.layouts: dict[Key, list[str]] = {}
        self.orders: dict[Key, tuple[int, ...]] = {}
        """The first permutation of a call's inputs: how to align its outputs."""

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
        """SAME, LAYOUT or DIFF; the generators' state counts for calls that draw from it."""
        if before.generators != after.generators and (before.draws or after.draws):
            return DIFF
        if before.inputs == after.inputs:
            return SAME
        if before.other_in != after.other_in or list(before.tensors_in) != list(after.tensors_in):
            return DIFF
        found = _layouts(self.reference.call_inputs(before), self.candidate.call_inputs(after))
        if found is None:
            return DIFF
        self.layouts[after.key] = [f"input{path}: {how}" for path, how in found.items()]
        self.orders[after.key] = next(iter(found.values())).order
        return LAYOUT

    def _outputs(self, before: Call, after: Call) -> str:
        """LAYOUT where the outputs hold the reference's values in another layout, else
        DIFF."""
        if before.other != after.other:
            return DIFF
        found = _layouts(self._outputs_of(self.reference, before),
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


def _layouts(reference: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]
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


def _inner_calls(calls: list[Call], found: Call) -> list[Call]:
    """The modules `found` called: calls that started after it, one level deeper, and
    finished before it."""
    return [call for call in calls[:calls.index(found)]
            if call.entered > found.entered and call.depth == found.depth + 1]


def _state_differences(reference: Trace, candidate: Trace
                       ) -> tuple[list[tuple[str, list[Difference]]], int]:
    """Each parameter or buffer that differs, once: the first few with their difference,
    each with where its values were at the reference when they were there under another
    name or layout; and how many are such."""
    names = ({s.digest: name for name, s in reversed(reference.states.items())},
             {s.digest: name for name, s in reversed(candidate.states.items())})
    changed: list[tuple[str, list[Difference]]] = []
    moved = 0
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
            found = compare(reference.state(name), candidate.state(name), name=name)
            changed.append((name, found or [Difference(name, "differs")]))
        else:
            changed.append((name, []))
    return changed, moved


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


def _window(calls: list[Call], found: Call, verdicts: _Verdicts) -> list[tuple[Call, str, str]]:
    ordered = sorted(calls, key=lambda call: call.entered)
    at = ordered.index(found)
    return [(call, *verdicts(call)) for call in ordered[max(0, at - AROUND):at + AROUND + 1]]


def explanation_lines(result: Explanation, case: str, reference: str) -> list[str]:
    """What explain found, for the terminal."""
    from regression.report import changed_detail

    lines = [f"{case}: traced {result.calls[0]} module calls at the reference {reference}, "
             f"{result.calls[1]} in the working tree"]
    if not result.outputs:
        lines.append("its outputs are bit-identical at the reference and in the working tree: "
                     "nothing to explain")
        return lines
    lines.append(f"outputs: {changed_detail(result.outputs)}")
    lines += _state_lines(result)
    if not result.calls[1]:
        lines.append("no torch.nn.Module was called in the test's body, so there is no layer "
                     "to name: the outputs above are all there is")
        return lines
    lines += _generator_lines(result)
    lines += _found_lines(result) if result.found is not None else _not_found_lines(result)
    lines += _unmatched_lines("calls the reference does not make", result.only_here)
    lines += _unmatched_lines("calls the working tree does not make", result.only_there)
    return lines


def _not_found_lines(result: Explanation) -> list[str]:
    """Why no call is named: each reason says what the traces show, never more."""
    head = "no module call that both traces make has identical inputs and differing outputs"
    if result.only_here or result.only_there:
        return [f"{head}, and the two make different calls (below): the model's structure "
                "changed"]
    if result.states:
        return [f"{head}: each call that differs was given other inputs (made with the "
                "parameters that differ, above, or by code between module calls), so the "
                "calls cannot be compared through them: look at those weights first"]
    if result.generators_drawn:
        return [f"{head}; {_calls(result.generators_drawn)} drew random numbers from "
                "generators in another state than at the reference: code before them drew "
                "other random numbers, or the change is in code between module calls"]
    return [f"{head}: each module given the reference's inputs computes as at the reference, "
            "so the change is in code between module calls (the test, or functions called "
            "outside any module)"]


def _generator_lines(result: Explanation) -> list[str]:
    if not result.generators_aside:
        return []
    return [f"the random generators' state differs from the reference's as "
            f"{_calls(result.generators_aside)} started, but {_pronoun(result.generators_aside)} "
            "drew no random numbers, so the state is set aside in comparing them"]


def _calls(count: int) -> str:
    return f"{count} call{'s' if count != 1 else ''}"


def _pronoun(count: int) -> str:
    return "they" if count != 1 else "it"


def _unmatched_lines(title: str, calls: list[Call], most: int = 5) -> list[str]:
    if not calls:
        return []
    names = ", ".join(f"{c.name} (call {c.number})" for c in calls[:most])
    more = f" and {len(calls) - most} more" if len(calls) > most else ""
    return [f"{title}: {names}{more}"]


def _state_lines(result: Explanation) -> list[str]:
    if not result.all_states:
        return []
    roots = [o for o in result.owners if not any(o.startswith(f"{p}.") for p in result.owners)]
    whose = f"of the outermost module{'s' if len(roots) > 1 else ''} ({', '.join(roots)})"
    total, count = len(result.all_states), len(result.states)
    if not result.states:
        return [f"parameters and buffers {whose}: all {total} bit-identical, as first called"]
    if result.moved == count:
        lines = [f"parameters and buffers {whose}: {count} of {total} differ only in where their "
                 "values are: the reference's values under other names or in another layout "
                 "(created, named or stored in another order)"]
    else:
        moved = (f"; {result.moved} of them hold the reference's values under another name or "
                 "in another layout") if result.moved else ""
        lines = [f"parameters and buffers {whose}: {count} of {total} differ, as first called: "
                 f"weights initialised or loaded differently{moved}"]
    lines += [f"  {difference}" for _, changed in result.states for difference in changed]
    rest = [name for name, changed in result.states if not changed]
    if rest:
        lines.append(f"  and {len(rest)} more, by module: {_groups(rest)}")
    return lines


def _groups(names: list[str]) -> str:
    """Names counted by module: up to the first numbered one (`model.blocks.3`), else the
    module that holds them."""
    counts = Counter(_group(name) for name in names)
    shown = [f"{group} ({count})" for group, count in list(counts.items())[:SHOWN_GROUPS]]
    more = len(counts) - SHOWN_GROUPS
    return ", ".join(shown) + (f" and {more} more modules" if more > 0 else "")


def _group(name: str) -> str:
    parts = name.split(".")
    numbered = next((i for i, part in enumerate(parts[:-1]) if re.fullmatch(r"\d+", part)), None)
    return ".".join(parts[:numbered + 1] if numbered is not None else parts[:-1]) or name


def _found_lines(result: Explanation) -> list[str]:
    found = result.found
    assert found is not None
    moved = result.layouts.get(found.key, [])
    moved_inputs = [line for line in moved if line.startswith("input")]
    same = "hold the reference's values (in another layout)" if moved_inputs else \
        "are bit-identical"
    lines = [f"first module whose inputs {same} and outputs differ: {_named(found)}"]
    if moved_inputs:
        lines.append(f"  its inputs: {'; '.join(moved_inputs)}")
    lines.append(f"  {_reason(result, found)}")
    lines += [f"  {line}" for difference in result.found_differences
              for line in difference.report()]
    return lines + _window_lines(result, found)


def _named(call: Call) -> str:
    return f"{call.name} ({call.kind}), call {call.number}"


def _reason(result: Explanation, found: Call) -> str:
    """Why the change is in the module found, in what it calls or in its weights."""
    code = ("its own forward code, its settings (attributes that are not parameters) or a "
            "function it calls")
    if any(name.startswith(f"{found.name}.") for name, _ in result.states):
        return "its own parameters or buffers differ (above): the weights changed, not " \
            "necessarily its code"
    if result.hidden_inner:
        names = ", ".join(call.name for call in result.hidden_inner)
        return (f"it called {names} with values the trace cannot compare (?): the change may "
                "be there, or in its own forward code")
    if result.fed_other_inputs:
        names = ", ".join(call.name for call in result.fed_other_inputs)
        given = ("the submodules it gave the reference's inputs gave the reference's outputs"
                 if result.fed_same_inputs else "it gave no submodule the reference's inputs")
        return (f"it gave {names} other inputs than at the reference, and {given}: the change "
                f"is before those calls, in {code}")
    if result.found_calls_inner:
        return (f"every submodule it called was given the reference's inputs and gave the "
                f"reference's outputs: the change is in {code}")
    return ("it calls no submodule: the change is in its forward code, its settings "
            "(attributes that are not parameters) or a function it calls")


def _window_lines(result: Explanation, found: Call) -> list[str]:
    lines = ["calls around it, in the order they start:", f"  {'inputs':<6}  {'outputs':<7}  module"]
    top = min(call.depth for call, _, _ in result.window)
    for call, inputs, outputs in result.window:
        mark = "  <- here" if call is found else ""
        indent = "  " * (call.depth - top)
        lines.append(f"  {inputs:<6}  {outputs:<7}  {indent}{_named(call)}{mark}")
    marks = {mark for _, inputs, outputs in result.window for mark in (inputs, outputs)}
    if LAYOUT in marks:
        lines.append(f"  {LAYOUT}: the reference's values in another layout (dims permuted or "
                     "reshaped)")
    if UNKNOWN in marks:
        lines.append(f"  {UNKNOWN}: holds values that are neither tensors nor plain data nor "
                     "containers of them (a cache object): the trace cannot compare them")
    return lines
