"""explain's HTML page: every call's row and difference from two real traces, the page's
marks and log-scale plot, and nothing user-derived left unescaped."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from regression.compare.outputs import Difference
from regression.diagnose.explain import DIFF, LAYOUT, NEW, SAME, UNKNOWN
from regression.diagnose.explain import CallRow, Explanation, call_rows, explain
from regression.diagnose.explain_report import explanation_lines
from regression.diagnose.html import FLOOR, page
from regression.diagnose.trace import Tracer
from regression.diagnose.trace import Call, Trace, read_trace, write_outputs
from regression.diagnose.tracing import write_page
from regression.errors import RegressionError
from regression.compare.tensordiff import scan


class Mix(nn.Module):
    def __init__(self, bump: float) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.bump = bump

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x)) * (1 + self.bump)


class Model(nn.Module):
    def __init__(self, bump: float = 0.0, extra: bool = False) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.mix = Mix(bump)
        self.last = nn.Linear(4, 2)
        self.extra = nn.Identity() if extra else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.last(self.mix(self.first(x)))
        return self.extra(out) if self.extra is not None else out


def _traced(folder: Path, bump: float = 0.0, extra: bool = False) -> Trace:
    torch.manual_seed(0)
    model = Model(bump, extra)
    with Tracer(folder):
        out = model(torch.linspace(-1, 1, 8).reshape(2, 4))
    write_outputs(folder, {"out": out})
    return read_trace(folder)


def _call(entered: int, name: str, depth: int = 0, kind: str = "Linear") -> Call:
    return Call(entered, name, kind, 1, depth, "in", "out")


def test_rows_hold_every_call_in_start_order_with_its_mark_and_relative_difference(
        tmp_path: Path) -> None:
    reference = _traced(tmp_path / "r")
    candidate = _traced(tmp_path / "c", bump=1e-3, extra=True)
    rows = call_rows(reference, candidate)
    assert [(r.call.name, r.inputs, r.outputs) for r in rows] == [
        ("Model", SAME, DIFF), ("Model.first", SAME, SAME), ("Model.mix", SAME, DIFF),
        ("Model.mix.inner", SAME, SAME), ("Model.last", DIFF, DIFF), ("Model.extra", NEW, NEW)]
    by_name = {r.call.name: r.relative for r in rows}
    assert by_name["Model.first"] == 0.0 and by_name["Model.extra"] is None
    mix = next(c for c in candidate.calls if c.name == "Model.mix")
    before = next(c for c in reference.calls if c.name == "Model.mix")
    expected = scan(reference.call_outputs(before), candidate.call_outputs(mix)).relative_size  # type: ignore[arg-type]
    assert by_name["Model.mix"] == expected and 1e-4 < expected < 1e-2


def test_the_page_of_a_real_explanation_marks_the_module_found(tmp_path: Path) -> None:
    reference, candidate = _traced(tmp_path / "r"), _traced(tmp_path / "c", bump=1e-3)
    found = explain(reference, candidate)
    lines = explanation_lines(found, "t.py::test_case", "v1")
    text = page("t.py::test_case", "v1", found, call_rows(reference, candidate), lines)
    here = re.findall(r'<div class="row (\w+) here" id="call-(\d+)">', text)
    assert here == [("diff", "2")]  # Model.mix, the third call to start
    row = text.split('id="call-2">')[1].split("</div>")[0]
    assert '<span class="mark same" title="inputs">same</span>' in row
    assert '<span class="mark diff" title="outputs">DIFF</span>' in row
    assert "Model.mix</span>" in row and "&larr; here" in row
    assert 'First module whose inputs hold the reference\'s values and whose outputs differ: ' \
           '<a href="#call-2"><code>Model.mix (Mix), call 1</code></a>' in text
    assert "All 6 bit-identical to the reference's, as first called." in text
    assert ("<p>The case's outputs that differ:</p><ul><li><code>&#x27;out&#x27;: "
            "float32[2, 2]: ") in text
    assert f"<pre>{lines[0]}" in text  # the report, as the terminal prints it


def test_the_page_loads_nothing_from_outside() -> None:
    found = Explanation([], calls=(1, 1))
    text = page("t::c", "v1", found, [CallRow(_call(0, "m"), SAME, SAME, 0.0)], ["line"])
    assert "default-src 'none'" in text  # a policy that refuses any load
    for outside in ("http:", "https:", "//", "<script", "<link", "@import", "url(", "src="):
        assert outside not in text.replace("http-equiv", ""), outside


def test_everything_from_the_users_code_is_escaped() -> None:
    evil = '<script>alert("x")</script>&'
    call = Call(0, f"model.{evil}", f"Kind{evil}", 1, 0, "in", "out")
    found = Explanation([("out", [Difference(f"'out{evil}'", "differs")])], calls=(1, 1),
                        states=[(f"model.{evil}.weight", [Difference("w", f"detail {evil}")])],
                        all_states=[f"model.{evil}.weight"], found=call)
    text = page(f"t.py::test[{evil}]", f"v1 {evil}", found,
                [CallRow(call, SAME, DIFF, 1e-3)], [f"report {evil}"])
    assert "<script" not in text and "alert(\"x\")" not in text
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;"
    for where in (f"<h1>t.py::test[{escaped}]</h1>", f"<code>v1 {escaped}</code>",
                  f"model.{escaped}</span>", f"(Kind{escaped}), call 1", f"report {escaped}",
                  f"<code>model.{escaped}.weight</code>", f"<code>detail {escaped}</code>",
                  f"<title>explain t.py::test[{escaped}]</title>",
                  f"<li><code>&#x27;out{escaped}&#x27;: differs</code></li>"):
        assert where in text, where


def _dots(text: str) -> dict[str, float]:
    """The plot's dots: each call's name (from its title) and its height (cy)."""
    found = re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"[^>]*><title>(\S+) ', text)
    return {name: float(y) for y, name in found}


def test_the_plot_is_log_scale_with_zero_at_the_bottom_and_inf_at_the_top() -> None:
    rows = [CallRow(_call(0, "same"), SAME, SAME, 0.0),
            CallRow(_call(1, "small"), SAME, DIFF, 1e-6),
            CallRow(_call(2, "middle"), SAME, DIFF, 1e-4),
            CallRow(_call(3, "large"), DIFF, DIFF, 1e-2),
            CallRow(_call(4, "infinite"), DIFF, DIFF, math.inf),
            CallRow(_call(5, "new"), NEW, NEW, None),
            CallRow(_call(6, "hidden"), UNKNOWN, UNKNOWN, None),
            CallRow(_call(7, "moved"), LAYOUT, LAYOUT, 0.0)]
    text = page("t::c", "v1", Explanation([], calls=(7, 8)), rows, [])
    dots = _dots(text)
    assert set(dots) == {"same", "small", "middle", "large", "infinite", "moved"}  # None: none
    assert dots["same"] == dots["moved"] > dots["small"]  # 0 on a line of its own
    step = dots["small"] - dots["middle"]
    assert step > 0 and dots["middle"] - dots["large"] == pytest.approx(step, abs=0.11)
    assert dots["infinite"] < dots["large"]
    lines = re.findall(r'y1="([\d.]+)".*?text-anchor="end">([^<]+)<', text)
    assert [label for _, label in lines] == ["0", "1e-6", "1e-5", "1e-4", "1e-3", "1e-2", "inf"]
    heights = {label: float(y) for y, label in lines}
    assert heights["0"] == dots["same"] and heights["1e-6"] == dots["small"]
    assert heights["1e-2"] == dots["large"] and heights["inf"] == dots["infinite"]
    assert 'class="dot diff"' in text and 'class="dot same"' in text


def test_the_plot_floor_keeps_tiny_differences_on_the_bottom_line() -> None:
    rows = [CallRow(_call(0, "tiny"), SAME, DIFF, 1e-30), CallRow(_call(1, "big"), SAME, DIFF, 1.0)]
    text = page("t::c", "v1", Explanation([], calls=(2, 2)), rows, [])
    assert f">1e{FLOOR}<" in text and f">1e{FLOOR - 1}<" not in text
    assert _dots(text)["tiny"] > _dots(text)["big"]


def test_the_tree_indents_each_call_under_the_one_that_made_it() -> None:
    rows = [CallRow(_call(0, "model", 0, "Net"), SAME, DIFF, 1e-3),
            CallRow(_call(1, "model.a", 1), SAME, SAME, 0.0),
            CallRow(_call(2, "model.b", 1), SAME, DIFF, 1e-3),
            CallRow(_call(3, "model.b.c", 2), NEW, NEW, None)]
    text = page("t::c", "v1", Explanation([], calls=(3, 4)), rows, [])
    indents = re.findall(r'padding-left: ([\d.]+)em">([\w.]+)<', text)
    assert indents == [("0.0", "model"), ("1.4", "model.a"), ("1.4", "model.b"),
                       ("2.8", "model.b.c")]
    assert '<span class="mark new" title="outputs">new</span>' in text
    assert " here\"" not in text and "&larr; here" not in text  # nothing found, none marked


def test_a_case_without_module_calls_says_so() -> None:
    text = page("t::c", "v1", Explanation([("out", [Difference("'out'", "1, reference 2")])],
                                          calls=(0, 0)), [], ["outputs differ"])
    assert "No torch.nn.Module was called in the test's body: nothing to plot." in text
    assert "No parameters or buffers were traced." in text
    assert '<div class="tree"></div>' in text


def test_the_page_is_written_where_asked_and_a_place_it_cannot_be_is_an_error(
        tmp_path: Path) -> None:
    reference, candidate = _traced(tmp_path / "r"), _traced(tmp_path / "c", bump=1e-3)
    found = explain(reference, candidate)
    target = tmp_path / "new" / "folder" / "page.html"
    write_page(target, "t::c", "v1", (reference, candidate), found, ["the report"])
    assert "<pre>the report</pre>" in target.read_text(encoding="utf-8")
    (tmp_path / "a-file").write_text("")
    for blocked in (tmp_path / "a-file" / "page.html", tmp_path / "a-file" / "sub" / "page.html"):
        with pytest.raises(RegressionError) as raised:
            write_page(blocked, "t::c", "v1", (reference, candidate), found, [])
        assert str(raised.value) == (f"--html {blocked}: cannot be written (a part of its "
                                     "folder is a file); name a file in a folder you can write")
