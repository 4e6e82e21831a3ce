"""How each traced call compares with the reference's: same, in another layout, or other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from regression.compare.outputs import Difference, compare_tensors
from regression.compare.layout import Layout, aligned, layout

if TYPE_CHECKING:
    import torch

    from regression.diagnose.trace_file import Call, Trace

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
        found = tensor_layouts(self.reference.call_inputs(before), self.candidate.call_inputs(after))
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
