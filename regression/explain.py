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

from .compare import compare, compare_outputs

if TYPE_CHECKING:
    from .compare import Difference
    from .trace import Call, Trace

AROUND = 4
"""Calls shown before and after the module found, in the order calls start."""
SHOWN_STATES = 5
"""Parameters and buffers that differ reported in full; the rest by name only."""


@dataclass
class Explanation:
    """What two traces of one case say about a change."""

    outputs: list[tuple[str, list[Difference]]]
    """The case's checked outputs that differ."""
    states: list[tuple[str, list[Difference]]] = field(default_factory=list)
    """Parameters and buffers of the outermost modules that differ (or are in one only)."""
    state_count: int = 0
    found: Call | None = None
    """The first call whose inputs are identical and outputs differ."""
    found_differences: list[Difference] = field(default_factory=list)
    found_calls_inner: bool = False
    """Whether the module found called submodules of its own."""
    calls: tuple[int, int] = (0, 0)
    """How many module calls each trace holds: reference, working tree."""
    unmatched: list[Call] = field(default_factory=list)
    """Working-tree calls the reference does not make (same name, same call number)."""
    window: list[tuple[Call, str, str]] = field(default_factory=list)
    """The calls around the one found, in the order they started, each with whether its
    inputs and its outputs match the reference's."""


def explain(reference: Trace, candidate: Trace) -> Explanation:
    """Compare the traces of one case at the reference and in the working tree."""
    result = Explanation(compare_outputs(reference.outputs, candidate.outputs),
                         calls=(len(reference.calls), len(candidate.calls)))
    result.states, result.state_count = _state_differences(reference, candidate)
    at_reference = {call.key: call for call in reference.calls}
    verdicts: dict[tuple[str, int], tuple[str, str]] = {}
    for call in candidate.calls:  # in the order calls finish: innermost first
        before = at_reference.get(call.key)
        if before is None:
            result.unmatched.append(call)
            verdicts[call.key] = ("new", "new")
            continue
        verdicts[call.key] = (_same(before.inputs, call.inputs),
                              _same(before.outputs, call.outputs))
        if result.found is None and verdicts[call.key] == ("same", "DIFF"):
            result.found = call
            result.found_differences = compare(reference.call_outputs(before),
                                               candidate.call_outputs(call), name="output")
    if result.found is not None:
        result.window = _window(candidate.calls, result.found, verdicts)
        inner = f"{result.found.name}."
        result.found_calls_inner = any(c.name.startswith(inner) for c in candidate.calls)
    return result


def _same(before: str, after: str) -> str:
    return "same" if before == after else "DIFF"


def _state_differences(reference: Trace, candidate: Trace
                       ) -> tuple[list[tuple[str, list[Difference]]], int]:
    """Each parameter or buffer that differs, with its differences (the first few in full);
    and how many there are in all."""
    from .compare import Difference

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
    return changed, len(set(reference.states) | set(candidate.states))


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
    if result.found is None and result.unmatched:
        lines.append("no module call that both traces make has identical inputs and differing "
                     "outputs, and the working tree makes module calls the reference does not "
                     "(below): the model's structure changed")
    elif result.found is None:
        lines.append("no module call has identical inputs and differing outputs: every module "
                     "computes as at the reference, so the change is in code between module "
                     "calls (the test, or functions called outside any module)")
    else:
        lines += _found_lines(result)
    if result.unmatched:
        names = ", ".join(f"{c.name} (call {c.number})" for c in result.unmatched[:5])
        more = f" and {len(result.unmatched) - 5} more" if len(result.unmatched) > 5 else ""
        lines.append(f"calls the reference does not make: {names}{more}")
    return lines


def _state_lines(result: Explanation) -> list[str]:
    if not result.state_count:
        return []
    if not result.states:
        return [f"parameters and buffers: all {result.state_count} of the outermost modules "
                "are bit-identical, as first called"]
    lines = [f"parameters and buffers: {len(result.states)} of {result.state_count} differ, "
             "as first called: a change of initialisation or loading, not of forward code"]
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
    return lines
