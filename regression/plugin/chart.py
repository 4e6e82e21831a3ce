"""A chart of how far the changed cases moved, for a GitHub step summary: GitHub draws
Mermaid in Markdown, so a bar chart of each case's largest relative difference (log10) needs
no image. Pure: outcomes in, Markdown out."""

from __future__ import annotations

import math
import re
from typing import Iterable

from regression.outcomes import CHANGED, CaseOutcome

MOST = 25
"""Cases charted and listed, largest difference first; the rest are counted."""
LABEL = 48
"""Characters of a case's name a bar's label keeps."""
_UNSAFE = re.compile(r"[^\w\-\[\]().,:/=+ ]")
"""What may not stand in a Mermaid label: quotes, Mermaid's `#` entities, Markdown code
fences, HTML."""


def difference_chart(outcomes: Iterable[CaseOutcome]) -> str:
    """The changed cases' largest relative differences as a Mermaid bar chart (log10), the
    numbers folded under it (a list alone when none has one); "" when no case changed."""
    changed = [o for o in outcomes if o.outcome == CHANGED]
    if not changed:
        return ""
    measured = sorted((o for o in changed if _measured(o)), key=lambda o: -(o.relative or 0))
    items = "\n".join(_item(o) for o in [*measured, *_unmeasured(changed)][:MOST]) + "\n"
    if len(changed) > MOST:
        items += f"\n... and {len(changed) - MOST} more changed cases\n"
    text = "\n#### How far the changed cases moved\n\n"
    if not measured:
        return text + items
    return (text + _mermaid(measured[:MOST])
            + f"\n<details><summary>The numbers</summary>\n\n{items}\n</details>\n")


def _measured(outcome: CaseOutcome) -> bool:
    """Whether a case has a relative difference to chart: not for another dtype or shape,
    values that are not float tensors, or bits only (NaN payloads, signs of zero)."""
    return outcome.relative is not None and outcome.relative > 0


def _unmeasured(changed: list[CaseOutcome]) -> list[CaseOutcome]:
    return [o for o in changed if not _measured(o)]


def _mermaid(cases: list[CaseOutcome]) -> str:
    """A horizontal bar per case, from below the smallest difference up to its own; an
    infinite one (a reference element of 0 moved) reaches the top."""
    relatives = [o.relative or 0.0 for o in cases]
    finite = [math.log10(r) for r in relatives if math.isfinite(r)]
    low = math.floor(min(finite, default=0.0)) - 1
    high = max(math.ceil(max(finite, default=0.0)), low + 2)
    top = high + 1 if math.inf in relatives else high
    values = [round(math.log10(r), 2) if math.isfinite(r) else top for r in relatives]
    labels = ", ".join(f'"{_label(o.nodeid)}"' for o in cases)
    return ("```mermaid\nxychart-beta horizontal\n"
            '    title "log10 of the largest relative difference"\n'
            f"    x-axis [{labels}]\n"
            f'    y-axis "log10 max relative difference" {low} --> {top}\n'
            f"    bar [{', '.join(f'{v:g}' for v in values)}]\n```\n")


def _label(nodeid: str) -> str:
    """A case's test name (its file left out), safe inside a Mermaid label and short."""
    name = _UNSAFE.sub("_", nodeid.rpartition("::")[2] or nodeid)
    return name if len(name) <= LABEL else name[:LABEL - 3] + "..."


def _item(outcome: CaseOutcome) -> str:
    """One line of the list: the case and its number, or why it has none."""
    name = " ".join(outcome.nodeid.replace("`", "'").split())
    if outcome.relative is None:
        return f"- `{name}`: no relative difference (not a float tensor, or another dtype or shape)"
    if outcome.relative == 0:
        return f"- `{name}`: bits only (NaN payloads or signs of zero)"
    if outcome.relative == math.inf:
        return f"- `{name}`: max relative difference inf (an element that was 0 moved)"
    return f"- `{name}`: max relative difference {outcome.relative:.3g}"
