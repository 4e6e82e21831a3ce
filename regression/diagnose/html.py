"""invoke explain --html: one self-contained page of what explain found, to look at.

Pure: the explanation, every call's row and the report's lines in, a string out. The page
loads nothing (a Content-Security-Policy forbids it): its style is inline, its plots are
inline SVG, and it has no script. Every text that comes from the user's code (module names,
the case, differences) is escaped.
"""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

from regression.diagnose.explain import DIFF, LAYOUT, NEW, SAME, UNKNOWN
from regression.diagnose.explain import CallRow, Explanation

if TYPE_CHECKING:
    from regression.diagnose.trace import Call

POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""Nothing from outside: no network, no script, no font but the reader's own."""
FLOOR = -16
"""The smallest power of ten the plots show; smaller differences sit on its line."""
BAND = 0.1
"""The part of a plot's height below its lowest power of ten, where 0 (bit-identical
outputs, or bits only) sits, and above its highest, where inf (a 0 that moved) sits."""
PLOT_WIDTH, PLOT_HEIGHT = 900, 260
LEFT, RIGHT, TOP, BOTTOM = 84, 16, 16, 36
"""The plot's margins: labels of the powers of ten on the left, of the calls below."""
BAR_WIDTH = 120
MARK_CLASS = {SAME: "same", LAYOUT: "layout", DIFF: "diff", NEW: "new", UNKNOWN: "unknown"}
LEGEND = {
    SAME: "bit-identical to the reference's",
    LAYOUT: "the reference's values in another layout (dims permuted or reshaped)",
    DIFF: "differs from the reference's",
    NEW: "a call the reference does not make",
    UNKNOWN: "holds values the trace cannot see into (a cache object)",
}
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px;
       padding: 0 1em; color: #1f2328; background: #fff; }
h1 { font-size: 1.3em; word-break: break-all; } h2 { font-size: 1.1em; margin-top: 1.6em; }
code, pre, .name, .kind, .rel { font-family: ui-monospace, monospace; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; white-space: pre-wrap; }
.mark { display: inline-block; min-width: 3.6em; text-align: center; border-radius: 3px;
        font: 11px/1.6 ui-monospace, monospace; margin-right: .3em; }
.mark.same { background: #dafbe1; color: #116329; }
.mark.diff { background: #ffd8d3; color: #a40e26; }
.mark.new { background: #ddf4ff; color: #0550ae; }
.mark.layout { background: #fff1c2; color: #7d4e00; }
.mark.unknown { background: #eaeef2; color: #57606a; }
.row { display: flex; align-items: center; gap: .4em; padding: 1px 4px; white-space: nowrap; }
.row.here { background: #fff8c5; outline: 2px solid #d4a72c; }
.kind { color: #57606a; } .rel { color: #57606a; font-size: 12px; min-width: 6em; }
.here-note { color: #9a6700; font-weight: 600; }
.tree .row:hover { background: #f6f8fa; }
svg text { font: 11px system-ui, sans-serif; fill: #57606a; }
table { border-collapse: collapse; } td, th { border: 1px solid #d0d7de; padding: 3px 8px;
text-align: left; vertical-align: top; }
.legend { list-style: none; padding: 0; margin: .3em 0 .8em; }
.legend li { display: inline-block; margin-right: 1.2em; }
.row.head { color: #57606a; font-size: 12px; } .row.head .mark { font: inherit; }
.dot.same, .dot.layout { fill: #2da44e; } .dot.diff { fill: #cf222e; }
.dot.here { stroke: #d4a72c; stroke-width: 3; }
svg text.here-label { fill: #9a6700; font-weight: 600; }
"""


def page(case: str, reference: str, result: Explanation, rows: list[CallRow],
         report: list[str]) -> str:
    """The whole page: what changed, the plot, the calls as a tree, the weights, the report."""
    found = result.found.key if result.found is not None else None
    scale = _scale(rows)
    parts = [
        f"<h1>{escape(case)}</h1>",
        f"<p>The working tree against the reference <code>{escape(reference)}</code>: "
        f"{result.calls[0]} module calls traced at the reference, {result.calls[1]} in the "
        f"working tree.</p>",
        _headline(result),
        *_outputs(result),
        "<h2>Relative difference of each call's output</h2>",
        _plot(rows, found, scale),
        "<h2>Module calls, in the order they start</h2>",
        _legend(),
        f'<div class="tree">{_tree(rows, found, scale)}</div>',
        *_missing(result),
        "<h2>Parameters and buffers</h2>",
        _parameters(result),
        "<h2>Report</h2>",
        f"<pre>{escape(chr(10).join(report))}</pre>",
    ]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>explain {escape(case)}</title>\n<style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def _headline(result: Explanation) -> str:
    """The module found, or that none was, in one paragraph."""
    if not result.outputs:
        return "<p>The outputs are bit-identical at the reference and in the working tree.</p>"
    if result.found is None:
        return ("<p>No module call whose inputs hold the reference's values has outputs "
                "that differ: see the report below for why.</p>")
    call = result.found
    return (f'<p>First module whose inputs hold the reference\'s values and whose outputs '
            f'differ: <a href="#call-{call.entered}"><code>{escape(_named(call))}'
            f"</code></a>, marked <span class=\"here-note\">here</span> below.</p>")


def _outputs(result: Explanation) -> list[str]:
    """The case's checked outputs that differ, each difference in one line."""
    if not result.outputs:
        return []
    items = "".join(f"<li><code>{escape(str(difference))}</code></li>"
                    for _, differences in result.outputs for difference in differences)
    return [f"<p>The case's outputs that differ:</p><ul>{items}</ul>"]


def _named(call: Call) -> str:
    """A call as the terminal report names it: `model.blocks.0.attn (Attention), call 1`."""
    return f"{call.name} ({call.kind}), call {call.number}"


def _scale(rows: list[CallRow]) -> tuple[int, int]:
    """The powers of ten the plots span: from the smallest difference measured (not below
    FLOOR) to the largest finite one, at least one decade."""
    powers = [math.log10(r.relative) for r in rows
              if r.relative is not None and 0 < r.relative < math.inf]
    if not powers:
        return -8, 0
    low = max(FLOOR, math.floor(min(powers)))
    high = max(low + 1, math.ceil(max(powers)))
    return low, high


def _fraction(relative: float, scale: tuple[int, int]) -> float:
    """Where `relative` sits between the bottom (0) and the top (inf) of a plot, its powers
    of ten evenly apart between them."""
    if relative <= 0:
        return 0.0
    if math.isinf(relative) or math.isnan(relative):
        return 1.0
    low, high = scale
    decades = min(1.0, max(0.0, (math.log10(relative) - low) / (high - low)))
    return BAND + (1 - 2 * BAND) * decades


def relative_text(relative: float | None) -> str:
    """A relative difference as the page writes it."""
    if relative is None:
        return ""
    if relative == 0:
        return "0"
    return "inf" if math.isinf(relative) else f"{relative:.3g}"


def _plot(rows: list[CallRow], found: tuple[str, int] | None, scale: tuple[int, int]) -> str:
    """Every call's largest relative output difference against its place in the order calls
    start, log scale; bit-identical calls on the bottom line, new ones not drawn."""
    if not rows:
        return "<p>No torch.nn.Module was called in the test's body: nothing to plot.</p>"
    inner_w, inner_h = PLOT_WIDTH - LEFT - RIGHT, PLOT_HEIGHT - TOP - BOTTOM
    step = inner_w / max(1, len(rows) - 1)
    parts = [f'<svg class="plot" viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" width="100%" '
             f'role="img" aria-label="relative difference of each call\'s output, log scale">']
    parts += _axes(scale, inner_w, inner_h)
    for index, row in enumerate(rows):
        if row.relative is None:
            continue
        x = LEFT + index * step
        y = TOP + inner_h * (1 - _fraction(row.relative, scale))
        here = row.call.key == found
        title = escape(f"{_named(row.call)}: outputs {row.outputs}, max relative "
                       f"difference {relative_text(row.relative)}")
        shape = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{6 if here else 3.5}" '
                 f'class="dot {MARK_CLASS[row.outputs]}{" here" if here else ""}">'
                 f"<title>{title}</title></circle>")
        parts.append(f'<a href="#call-{row.call.entered}">{shape}</a>')
        if here:
            parts.append(f'<text x="{x + 8:.1f}" y="{y - 8:.1f}" class="here-label">here</text>')
    parts.append(f'<text x="14" y="{TOP + inner_h / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {TOP + inner_h / 2:.0f})">max relative difference'
                 "</text>")
    parts.append(f'<text x="{LEFT + inner_w / 2:.0f}" y="{PLOT_HEIGHT - 8}" '
                 f'text-anchor="middle">module calls, in the order they start '
                 f"({len(rows)})</text>")
    parts.append("</svg>")
    return "\n".join(parts)


def _axes(scale: tuple[int, int], inner_w: float, inner_h: float) -> list[str]:
    """A line and a label at each power of ten, and for 0 and inf."""
    low, high = scale
    lines = []
    levels = [(0.0, "0"), *((10.0 ** p, f"1e{p}") for p in range(low, high + 1)),
              (math.inf, "inf")]
    for relative, label in levels:
        y = TOP + inner_h * (1 - _fraction(relative, scale))
        lines.append(f'<line x1="{LEFT}" x2="{LEFT + inner_w}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#d0d7de" stroke-width="1"/>'
                     f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    return lines


def _legend() -> str:
    """What the marks and the bars mean."""
    items = "".join(f'<li><span class="mark {MARK_CLASS[mark]}">{mark}</span>'
                    f"{escape(meaning)}</li>" for mark, meaning in LEGEND.items())
    return (f"<p>Each call: how its inputs, then its outputs, compare with the reference's, "
            f"and its output's largest relative difference (log scale, as above).</p>"
            f'<ul class="legend">{items}</ul>')


def _tree(rows: list[CallRow], found: tuple[str, int] | None, scale: tuple[int, int]
          ) -> str:
    """The calls as the terminal shows the ones around the module found: marks and bars in
    columns, each name indented under the call that made it."""
    if not rows:
        return ""
    top = min(row.call.depth for row in rows)
    head = (f'<div class="row head"><span class="mark">inputs</span><span class="mark">'
            f'outputs</span><span style="width: {BAR_WIDTH}px">relative difference</span>'
            f'<span class="rel"></span><span>module, call</span></div>')
    return "\n".join([head, *(_row(row, row.call.depth - top, found, scale) for row in rows)])


def _row(row: CallRow, depth: int, found: tuple[str, int] | None, scale: tuple[int, int]
         ) -> str:
    call = row.call
    here = call.key == found
    marks = "".join(f'<span class="mark {MARK_CLASS[mark]}" title="{which}">{mark}</span>'
                    for which, mark in (("inputs", row.inputs), ("outputs", row.outputs)))
    note = ' <span class="here-note">&larr; here</span>' if here else ""
    if row.note:
        what = "other inputs" if row.inputs == DIFF else "noted"
        note += f' <span class="kind">({what}: {escape(row.note)})</span>'
    return (f'<div class="row {MARK_CLASS[row.outputs]}{" here" if here else ""}" '
            f'id="call-{call.entered}">{marks}{_bar(row.relative, scale)}'
            f'<span class="rel">{relative_text(row.relative)}</span>'
            f'<span class="name" style="padding-left: {1.4 * depth:.1f}em">'
            f'{escape(call.name)}</span> '
            f'<span class="kind">({escape(call.kind)}), call {call.number}</span>{note}</div>')


def _bar(relative: float | None, scale: tuple[int, int]) -> str:
    """A row's own small plot: its relative difference as a bar on the page's log scale."""
    width = 0.0 if relative is None else BAR_WIDTH * _fraction(relative, scale)
    colour = "#cf222e" if relative else "#2da44e"
    return (f'<svg class="bar" width="{BAR_WIDTH}" height="10" aria-hidden="true">'
            f'<rect width="{BAR_WIDTH}" height="10" fill="#f6f8fa"/>'
            f'<rect width="{max(width, 2 if relative is not None else 0):.1f}" height="10" '
            f'fill="{colour}"/></svg>')


def _missing(result: Explanation) -> list[str]:
    """The reference's calls the working tree does not make."""
    if not result.only_there:
        return []
    items = "".join(f"<li><code>{escape(_named(call))}</code></li>" for call in result.only_there)
    return ["<h2>Calls the working tree does not make</h2>", f"<ul>{items}</ul>"]


def _parameters(result: Explanation) -> str:
    """The outermost modules' parameters and buffers that differ, each with its difference."""
    total = len(result.all_states)
    if not total:
        return "<p>No parameters or buffers were traced.</p>"
    if not result.states:
        return f"<p>All {total} bit-identical to the reference's, as first called.</p>"
    rows = "".join(
        f"<tr><td><code>{escape(name)}</code></td><td>"
        + ("<br>".join(f"<code>{escape(d.detail)}</code>" for d in differences)
           or "differs (not measured: only the first few are)")
        + "</td></tr>" for name, differences in result.states)
    return (f"<p>{len(result.states)} of {total} differ from the reference's, as first "
            f"called.</p><table><tr><th>name</th><th>difference</th></tr>{rows}</table>")
