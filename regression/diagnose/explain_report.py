"""The terminal lines that say what explain found."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from regression.diagnose.explain import DIFF, LAYOUT, UNKNOWN
from regression.diagnose.explain import Explanation
from regression.report import count

if TYPE_CHECKING:
    from regression.diagnose.trace import Call

SHOWN_GROUPS = 8
"""Modules named in the summary of the other parameters and buffers that differ."""


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
    lines += _noted_lines(result)
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
        return [f"{head}; {count(result.generators_drawn, 'call')} drew random numbers from "
                "generators in another state than at the reference: code before them drew "
                "other random numbers, or the change is in code between module calls"]
    return [f"{head}: each module given the reference's inputs computes as at the reference, "
            "so the change is in code between module calls (the test, or functions called "
            "outside any module)"]


def _generator_lines(result: Explanation) -> list[str]:
    if not result.generators_aside:
        return []
    aside = result.generators_aside
    return [f"the random generators' state differs from the reference's as "
            f"{count(aside, 'call')} started, but {_pronoun(aside)} drew no random numbers, so "
            "the state is set aside in comparing them"]


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
    elif not result.revalued:
        moved = (f", {result.moved} of them holding the reference's values under another "
                 "name") if result.moved else ""
        lines = [f"parameters and buffers {whose}: {count} of {total} differ by name, none in "
                 f"value: they are in one trace only{moved}: a submodule was added, removed "
                 "or renamed"]
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
    if found.key in result.noted:
        lines.append(f"  noted, not taken as other inputs: {'; '.join(result.noted[found.key])}")
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
    structure = _structure_reason(result, found)
    if structure:
        return structure
    if any(name.startswith(f"{found.name}.") for name in result.revalued):
        return "its own parameters or buffers differ (above): the weights changed, not " \
            "necessarily its code"
    if result.hidden_inner:
        names = ", ".join(call.name for call in result.hidden_inner)
        return (f"it called {names} with values the trace cannot compare (?): the change may "
                "be there, or in its own forward code")
    if result.fed_other_inputs:
        fed = result.fed_other_inputs
        names = ", ".join(call.name for call in fed)
        which = _which_inputs(result, fed[0]) if len(fed) == 1 else \
            "; ".join(f"{call.name}: {_which_inputs(result, call)}" for call in fed)
        given = ("the submodules it gave the reference's inputs gave the reference's outputs"
                 if result.fed_same_inputs else "it gave no submodule the reference's inputs")
        return (f"it gave {names} other inputs than at the reference ({which}), and {given}: "
                f"the change is before those calls, in {code}")
    if result.found_calls_inner:
        return (f"every submodule it called was given the reference's inputs and gave the "
                f"reference's outputs: the change is in {code}")
    return ("it calls no submodule: the change is in its forward code, its settings "
            "(attributes that are not parameters) or a function it calls")


def _structure_reason(result: Explanation, found: Call) -> str:
    """Calls inside the module found that one side makes and the other does not: the
    change, ahead of weights that only followed it to new names."""
    inside = f"{found.name}."
    gone = [c for c in result.only_there if c.name.startswith(inside)]
    added = [c for c in result.only_here if c.name.startswith(inside)]
    if not gone and not added:
        return ""
    parts = []
    if gone:
        parts.append(f"the working tree no longer calls {_kinds(gone)} inside it, as the "
                     "reference did")
    if added:
        parts.append(f"it now calls {_kinds(added)}, which the reference did not")
    weights = "; its parameters and buffers that differ (above) follow that change" \
        if any(name.startswith(inside) for name, _ in result.states) else ""
    return f"{' and '.join(parts)}: the module's structure changed{weights}"


def _kinds(calls: list[Call], most: int = 3) -> str:
    named = ", ".join(f"{c.name} ({c.kind})" for c in calls[:most])
    return named + (f" and {len(calls) - most} more" if len(calls) > most else "")


def _which_inputs(result: Explanation, call: Call) -> str:
    """The inputs of a call given other inputs, by path, in a few words."""
    found = result.other_inputs.get(call.key, [])
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "") \
        if found else "other inputs"


def _noted_lines(result: Explanation, most: int = 3) -> list[str]:
    """Non-tensor arguments passed on one side only, outside the call found."""
    found = result.found.key if result.found is not None else None
    noted = [(key, notes) for key, notes in result.noted.items() if key != found]
    if not noted:
        return []
    lines = ["arguments that are not tensors, passed on one side only (noted, not taken as "
             "other inputs):"]
    lines += [f"  {name} (call {number}): {'; '.join(notes)}"
              for (name, number), notes in noted[:most]]
    if len(noted) > most:
        lines.append(f"  and {len(noted) - most} more calls")
    return lines


def _window_lines(result: Explanation, found: Call) -> list[str]:
    lines = ["calls around it and those it was made inside, in the order they start:",
             f"  {'inputs':<6}  {'outputs':<7}  module"]
    top = min(call.depth for call, _, _ in result.window)
    previous: Call | None = None
    for call, inputs, outputs in result.window:
        if previous is not None and call.entered > previous.entered + 1:
            lines.append(f"  {'':<6}  {'':<7}  ...")
        previous = call
        mark = "  <- here" if call is found else ""
        indent = "  " * (call.depth - top)
        other = f"  ({_which_inputs(result, call)})" \
            if inputs == DIFF and result.other_inputs.get(call.key) else ""
        lines.append(f"  {inputs:<6}  {outputs:<7}  {indent}{_named(call)}{mark}{other}")
    marks = {mark for _, inputs, outputs in result.window for mark in (inputs, outputs)}
    if LAYOUT in marks:
        lines.append(f"  {LAYOUT}: the reference's values in another layout (dims permuted or "
                     "reshaped)")
    if UNKNOWN in marks:
        lines.append(f"  {UNKNOWN}: holds values that are neither tensors nor plain data nor "
                     "containers of them (a cache object): the trace cannot compare them")
    return lines
