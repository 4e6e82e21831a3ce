"""invoke explain: where in the model a case's outputs start to differ.

Two traces of one case (regression/trace.py), at the reference and in the working tree, are
matched call by call (a module's qualified name and its call number). The first call, in the
order calls finish, whose inputs are bit-identical and whose outputs differ is the module
whose own computation changed: its submodules that finished before it gave the same
outputs, or were given other inputs by it. The outermost modules' parameters and buffers are
compared first, since different weights change outputs with no change of code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .compare import Difference, compare, compare_outputs

if TYPE_CHECKING:
    from .trace import Call, Trace

AROUND = 4
"""Calls shown before and after the module found, in the order calls start."""
SHOWN_STATES = 5
"""Parameters and buffers that differ reported with their difference; the rest by name."""
SAME, DIFF, NEW, UNKNOWN = "same", "DIFF", "new", "?"
"""How a call's inputs or outputs compare with the reference's: `?` where they hold values
the trace cannot see into."""


@dataclass
class Explanation:
    """What two traces of one case say about a change."""

    outputs: list[tuple[str, list[Difference]]]
    """The case's checked outputs that differ."""
    calls: tuple[int, int]
    """How many module calls each trace holds: reference, working tree."""
    states: list[tuple[str, list[Difference]]] = field(default_factory=list)
    """Parameters and buffers of the outermost modules that differ (or are in one only)."""
    all_states: list[str] = field(default_factory=list)
    """The names of the parameters and buffers in either trace."""
    found: Call | None = None
    """The first call whose inputs are identical and outputs differ."""
    found_differences: list[Difference] = field(default_factory=list)
    found_calls_inner: bool = False
    """Whether the call found called submodules of its own."""
    hidden_inner: list[Call] = field(default_factory=list)
    """The submodule calls of the one found whose inputs the trace cannot compare."""
    only_here: list[Call] = field(default_factory=list)
    """Working-tree calls the reference does not make (same name, same call number)."""
    only_there: list[Call] = field(default_factory=list)
    """Reference calls the working tree does not make."""
    window: list[tuple[Call, str, str]] = field(default_factory=list)
    """The calls around the one found, in the order they started, each with how its inputs
    and its outputs compare with the reference's."""


def explain(reference: Trace, candidate: Trace) -> Explanation:
    """Compare the traces of one case at the reference and in the working tree."""
    result = Explanation(compare_outputs(reference.outputs, candidate.outputs),
                         calls=(len(reference.calls), len(candidate.calls)))
    result.states = _state_differences(reference, candidate)
    result.all_states = list(dict.fromkeys([*reference.states, *candidate.states]))
    at_reference = {call.key: call for call in reference.calls}
    here = {call.key for call in candidate.calls}
    result.only_there = [call for call in reference.calls if call.key not in here]
    verdicts: dict[tuple[str, int], tuple[str, str]] = {}
    for call in candidate.calls:  # in the order calls finish: innermost first
        before = at_reference.get(call.key)
        if before is None:
            result.only_here.append(call)
            verdicts[call.key] = (NEW, NEW)
            continue
        verdicts[call.key] = _verdicts(before, call)
        if result.found is None and verdicts[call.key] == (SAME, DIFF):
            result.found = call
            result.found_differences = _output_differences(reference, before, candidate, call)
    if result.found is not None:
        inner = _inner_calls(candidate.calls, result.found)
        result.found_calls_inner = bool(inner)
        result.hidden_inner = [c for c in inner if verdicts[c.key][0] == UNKNOWN]
        result.window = _window(candidate.calls, result.found, verdicts)
    return result


def _verdicts(before: Call, after: Call) -> tuple[str, str]:
    """How a call's inputs and outputs compare: equal digests over values the trace cannot
    see into prove nothing, so they are `?`."""
    def verdict(equal: bool, hidden: bool) -> str:
        return DIFF if not equal else UNKNOWN if hidden else SAME

    hidden = f"{before.unknown} {after.unknown}"
    return (verdict(before.inputs == after.inputs, "inputs" in hidden),
            verdict(before.outputs == after.outputs, "outputs" in hidden))


def _output_differences(reference: Trace, before: Call, candidate: Trace, after: Call
                        ) -> list[Difference]:
    """How the outputs of one call differ: its tensors, then its other values."""
    found = compare(reference.call_outputs(before), candidate.call_outputs(after),
                    name="output")
    for path in dict.fromkeys([*before.other, *after.other]):
        was, now = before.other.get(path, "(none)"), after.other.get(path, "(none)")
        if was != now:
            found.append(Difference(f"output{path}", f"{now}, reference {was}"))
    return found


def _inner_calls(calls: list[Call], found: Call) -> list[Call]:
    """The modules `found` called: calls that started after it, one level deeper, and
    finished before it."""
    return [call for call in calls[:calls.index(found)]
            if call.entered > found.entered and call.depth == found.depth + 1]


def _state_differences(reference: Trace, candidate: Trace) -> list[tuple[str, list[Difference]]]:
    """Each parameter or buffer that differs, with its difference (the first few read and
    compared, the rest named)."""
    changed: list[tuple[str, list[Difference]]] = []
    for name in dict.fromkeys([*reference.states, *candidate.states]):
        before, after = reference.states.get(name), candidate.states.get(name)
        if before is None or after is None:
            where = "the working tree" if before is None else "the reference"
            changed.append((name, [Difference(name, f"only in {where}")]))
        elif before.digest != after.digest:
            if len(changed) < SHOWN_STATES:
                found = compare(reference.state(name), candidate.state(name), name=name)
                changed.append((name, found or [Difference(name, "differs")]))
            else:
                changed.append((name, [Difference(name, "differs")]))
    return changed


def _window(calls: list[Call], found: Call, verdicts: dict[tuple[str, int], tuple[str, str]]
            ) -> list[tuple[Call, str, str]]:
    ordered = sorted(calls, key=lambda call: call.entered)
    at = ordered.index(found)
    return [(call, *verdicts[call.key]) for call in ordered[max(0, at - AROUND):at + AROUND + 1]]


def explanation_lines(result: Explanation, case: str, reference: str) -> list[str]:
    """What explain found, for the terminal."""
    from .report import changed_detail

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
    if result.found is not None:
        lines += _found_lines(result)
    elif result.only_here or result.only_there:
        lines.append("no module call that both traces make has identical inputs and differing "
                     "outputs, and the two make different calls (below): the model's "
                     "structure changed")
    else:
        lines.append("no module call has identical inputs and differing outputs: every module "
                     "computes as at the reference, so the change is in code between module "
                     "calls (the test, or functions called outside any module)")
    lines += _unmatched_lines("calls the reference does not make", result.only_here)
    lines += _unmatched_lines("calls the working tree does not make", result.only_there)
    return lines


def _unmatched_lines(title: str, calls: list[Call], most: int = 5) -> list[str]:
    if not calls:
        return []
    names = ", ".join(f"{c.name} (call {c.number})" for c in calls[:most])
    more = f" and {len(calls) - most} more" if len(calls) > most else ""
    return [f"{title}: {names}{more}"]


def _state_lines(result: Explanation) -> list[str]:
    if not result.all_states:
        return []
    modules = sorted({name.split(".", 1)[0] for name in result.all_states})
    whose = f"of the outermost module{'s' if len(modules) > 1 else ''} ({', '.join(modules)})"
    if not result.states:
        return [f"parameters and buffers {whose}: all {len(result.all_states)} bit-identical, as "
                "first called"]
    lines = [f"parameters and buffers {whose}: {len(result.states)} of {len(result.all_states)} "
             "differ, as first called: weights initialised or loaded differently"]
    lines += [f"  {difference}" for _, changed in result.states for difference in changed]
    return lines


def _found_lines(result: Explanation) -> list[str]:
    found = result.found
    assert found is not None
    lines = [f"first module whose inputs are bit-identical and outputs differ: {found.name} "
             f"({found.kind}), call {found.number}"]
    if any(name.startswith(f"{found.name}.") for name, _ in result.states):
        lines.append("  its own parameters or buffers differ (above): the weights changed, "
                     "not necessarily its code")
    elif result.hidden_inner:
        names = ", ".join(call.name for call in result.hidden_inner)
        lines.append(f"  it called {names} with values the trace cannot compare (?): the "
                     "change may be there, or in its own forward code")
    elif result.found_calls_inner:
        lines.append("  every submodule it called with the same inputs gave the same outputs: "
                     "the change is in its own forward code, its settings (attributes that are "
                     "not parameters) or a function it calls")
    else:
        lines.append("  it calls no submodule: the change is in its forward code, its settings "
                     "(attributes that are not parameters) or a function it calls")
    lines += [f"  {line}" for difference in result.found_differences
              for line in difference.report()]
    lines.append("calls around it, in the order they start:")
    lines.append(f"  {'inputs':<6}  {'outputs':<7}  module")
    top = min(call.depth for call, _, _ in result.window)
    for call, inputs, outputs in result.window:
        mark = "  <- here" if call is found else ""
        indent = "  " * (call.depth - top)
        lines.append(f"  {inputs:<6}  {outputs:<7}  {indent}{call.name} ({call.kind}), call "
                     f"{call.number}{mark}")
    if any(UNKNOWN in (inputs, outputs) for _, inputs, outputs in result.window):
        lines.append(f"  {UNKNOWN}: holds values that are neither tensors nor plain data nor "
                     "containers of them (a cache object): the trace cannot compare them")
    return lines
