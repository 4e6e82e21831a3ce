"""Differences and outcomes -> lines of text. Produces text only; callers print it."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from regression.outcomes import CHANGED, DECLARED, ERROR, IDENTICAL, NONDETERMINISTIC, \
    OUTCOMES, REMOVED, CaseOutcome

if TYPE_CHECKING:
    from regression.compare.outputs import Difference
    from regression.declarations import Declaration
    from regression.run.types import Generation


def mismatch_message(reference: str, changed: Sequence[tuple[str, Sequence[Difference]]],
                     checked: int) -> str:
    """The one failure of a case whose outputs are not all bit-identical: every differing
    output, each difference in full."""
    if len(changed) == 1:
        lines = [f"output {changed[0][0]!r} is not bit-identical to the reference {reference}:"]
    else:
        names = ", ".join(repr(name) for name, _ in changed)
        lines = [f"{len(changed)} of {checked} outputs are not bit-identical to the reference "
                 f"{reference}: {names}"]
    for _, differences in changed:
        lines += [f"  {line}" for difference in differences for line in difference.report()]
    return "\n".join(lines)


def changed_detail(changed: Sequence[tuple[str, Sequence[Difference]]]) -> str:
    """A changed case in one line: its most telling difference (values, then shapes, keys,
    dtypes, then key order), what else differs in that output, and the other outputs that
    differ: each difference counted once, keys as keys."""
    from regression.compare.outputs import KEY_KINDS, KINDS

    found = [(KINDS.index(d.kind) if d.kind in KINDS else 0, index, name, d)
             for index, (name, differences) in enumerate(changed) for d in differences]
    _, _, name, first = min(found, key=lambda item: item[:2])
    rest: Counter[str] = Counter()
    for _, _, where, d in found:
        if d is not first and where == name:
            rest[d.kind] += max(d.differing, 1) if d.kind in KEY_KINDS else 1
    differ = [_counted(kind, rest[kind]) for kind in KINDS if rest[kind] and
              kind not in KEY_KINDS]
    verb = "differs" if sum(rest[k] for k in rest if k not in KEY_KINDS) == 1 else "differ"
    also = ([f"{listed(differ)} {verb}"] if differ else []) + \
        [_counted(kind, rest[kind]) for kind in KEY_KINDS if rest[kind]]
    line = str(first) + (f"; also {'; '.join(also)}" if also else "")
    others = [other for other, _ in changed if other != name]
    if not others:
        return line
    more = "1 more output differs" if len(others) == 1 else \
        f"{len(others)} more outputs differ"
    return f"{line} (and {more}: {', '.join(repr(other) for other in others)})"


def _counted(kind: str, number: int) -> str:
    """`number` differences of one kind, in words: 2 more values, 1 shape, the key order,
    3 keys missing."""
    if kind == "order":
        return "the key order" if number == 1 else f"the key order of {number} mappings"
    if kind in ("keys missing", "keys added"):
        where = "missing" if kind == "keys missing" else "not in reference"
        return f"{count(number, 'key')} {where}"
    return count(number, {"values": "more value", "shapes": "shape", "dtypes": "dtype"}
                 .get(kind, kind))


def listed(items: list[str]) -> str:
    """torch, torchvision and torchaudio."""
    return " and ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} and {items[-1]}"


def count(number: int, noun: str) -> str:
    """1 case, 2 cases."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def largest_relative(differences: Iterable[Difference]) -> float | None:
    """The largest relative difference of those measured; None when none was."""
    return max((d.max_relative for d in differences if d.max_relative is not None),
               default=None)


def summary_lines(reference: str, outcomes: Iterable[CaseOutcome],
                  stale: Sequence[Declaration] = ()) -> list[str]:
    """The end-of-run report: counts, then each case that is not identical, the declared
    changes apart, with their reasons; then the declarations that no longer differ."""
    outcomes = list(outcomes)
    counts = Counter(o.outcome for o in outcomes)
    total = len(outcomes)
    head = ", ".join(f"{counts[name]} {_plural(name, counts[name])}"
                     for name in _shown(counts))
    lines = [f"reference {reference}: {count(total, 'case')}: {head}"]
    if total and counts[IDENTICAL] == total:
        lines.append(f"every case is bit-identical to the reference ({total} of {total})")
    for outcome in outcomes:
        if outcome.outcome not in (IDENTICAL, DECLARED):
            detail = f": {outcome.detail}" if outcome.detail else ""
            lines.append(hanging(f"{outcome.outcome.upper()} {outcome.nodeid}{detail}"))
    return [*lines, *declared_lines(outcomes, stale)]


def declared_lines(outcomes: Iterable[CaseOutcome], stale: Sequence[Declaration]) -> list[str]:
    """The changes made on purpose, each with its reason, and the declarations of cases that
    are identical now."""
    from regression.declarations import FILE, PRUNE

    declared = [o for o in outcomes if o.outcome == DECLARED]
    lines = []
    if declared:
        lines.append(f"changed as declared in {FILE} ({len(declared)}), each passes:")
        for outcome in declared:
            lines.append(hanging(f"DECLARED {outcome.nodeid}: {outcome.reason}"))
            lines.append(hanging(f"    {outcome.size}: {outcome.detail}"))
    if stale:
        lines.append(f"declarations that no longer differ ({len(stale)}): the reference has "
                     f"caught up, or the change was taken back; `{PRUNE}` drops them:")
        lines += [f"STALE {d.case} ({FILE} line {d.line})" for d in stale]
    return lines


def markdown_summary(reference: str, outcomes: Iterable[CaseOutcome],
                     stale: Sequence[Declaration] = ()) -> str:
    """The same report as Markdown, for a GitHub step summary."""
    from regression.declarations import FILE, PRUNE

    outcomes = list(outcomes)
    counts = Counter(o.outcome for o in outcomes)
    rows = "\n".join(f"| {name} | {counts[name]} |" for name in _shown(counts))
    text = f"### Regression against {reference}\n\n| outcome | cases |\n| --- | --- |\n{rows}\n"
    problems = [o for o in outcomes if o.outcome not in (IDENTICAL, DECLARED)]
    if problems:
        text += "\n" + "\n".join(_markdown_problem(o) for o in problems) + "\n"
    declared = [o for o in outcomes if o.outcome == DECLARED]
    if declared:
        text += (f"\n#### Changed as declared in `{FILE}`\n\n| case | size | reason |\n"
                 "| --- | --- | --- |\n")
        text += "".join(f"| `{o.nodeid}` | {o.size} | {_cell(o.reason)} |\n" for o in declared)
    if stale:
        text += (f"\n#### Declarations that no longer differ\n\nThe reference has caught up, "
                 f"or the change was taken back; `{PRUNE}` drops them:\n\n")
        text += "".join(f"- `{d.case}` (line {d.line})\n" for d in stale)
    return text


def _cell(text: str) -> str:
    """`text` in one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _markdown_problem(outcome: CaseOutcome) -> str:
    """A case that is not identical; a changed one with each differing output under it."""
    if outcome.outputs:
        return "\n".join([f"- **{outcome.outcome}** `{outcome.nodeid}`",
                          *(f"  - `{line}`" for line in outcome.outputs)])
    detail = f": {_first_line(outcome.detail)}" if outcome.detail else ""
    return f"- **{outcome.outcome}** `{outcome.nodeid}`{detail}"


def github_annotations(reference: str, outcomes: Iterable[CaseOutcome],
                       stale: Sequence[Declaration] = ()) -> list[str]:
    """GitHub Actions workflow commands: an error on the test's line for each changed case,
    a notice with its reason for each declared one, a warning on each stale declaration."""
    from regression.declarations import FILE, PRUNE

    lines = []
    for outcome in outcomes:
        if outcome.outcome not in (CHANGED, REMOVED, DECLARED) or not outcome.path:
            continue
        declared = outcome.outcome == DECLARED
        how = "removed" if outcome.outcome == REMOVED or outcome.size == REMOVED else "changed"
        title = f"{outcome.nodeid} {how}{' as declared' if declared else ''} against {reference}"
        message = "\n".join(outcome.outputs) or outcome.detail
        if declared:
            message = f"{outcome.reason}\n{outcome.size}: {message}"
        lines.append(f"::{'notice' if declared else 'error'} file={_property(outcome.path)},"
                     f"line={outcome.line},title={_property(title)}::{_data(message)}")
    for d in stale:
        lines.append(f"::warning file={FILE},line={d.line},title="
                     f"{_property('declaration no longer differs')}::"
                     f"{_data(f'{d.case} is identical to {reference} now; `{PRUNE}` drops it')}")
    return lines


def _data(text: str) -> str:
    """`text` as the message of a workflow command (GitHub's escaping)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """`text` as a property value of a workflow command."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _shown(counts: Counter[str]) -> tuple[str, ...]:
    """The outcomes a summary counts: the four always; removed, declared and
    nondeterministic when they occur."""
    return OUTCOMES + tuple(name for name in (REMOVED, DECLARED, NONDETERMINISTIC)
                            if counts[name])


def hanging(text: str, indent: str = "    ") -> str:
    """`text` with its second and later lines indented under the first, each keeping its
    own indentation: a multi-line error message stays readable inside a report line."""
    first, *rest = text.split("\n")
    return "\n".join([first, *(f"{indent}{line}" if line.strip() else line for line in rest)])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _plural(name: str, count: int) -> str:
    return f"{name}s" if name == ERROR and count != 1 else name


def not_run_lines(missing: Sequence[str], total: int, why: Callable[[str], str],
                  most: int = 20) -> list[str]:
    """Why a run that was handed `total` cases cannot pass: the ones that did not run."""
    lines = [f"{len(missing)} of {total} regression cases this run was meant to check did "
             "not run, so it does not pass:"]
    lines += [hanging(f"  {nodeid}: {why(nodeid)}") for nodeid in missing[:most]]
    if len(missing) > most:
        lines.append(f"  ... and {len(missing) - most} more")
    return lines


def generation_lines(generation: Generation) -> list[str]:
    """What a generation did, for the terminal."""
    if not generation.recorded and not generation.absent:
        return [f"reference up to date: {count(generation.reused, 'case')} reused from the "
                "cache, nothing generated"]
    lines = [f"recorded {len(generation.recorded)} cases, reused {generation.reused}"]
    lines += [hanging(f"not in reference: {nodeid}: {reason}")
              for nodeid, reason in generation.absent.items()]
    lines += [hanging(f"nondeterministic: {nodeid}: {reason}")
              for nodeid, reason in generation.nondeterministic.items()]
    return lines
