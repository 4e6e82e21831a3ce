"""The step summary's chart of the changed cases: Mermaid bars of log10 of each case's
largest relative difference, the numbers listed under it."""

from __future__ import annotations

import math
import re

import torch

from regression.plugin.chart import MOST, difference_chart
from regression.compare.outputs import compare_tensors
from regression.outcomes import CHANGED, ERROR, IDENTICAL, CaseOutcome
from regression.report import largest_relative


def _changed(nodeid: str, relative: float | None) -> CaseOutcome:
    return CaseOutcome(nodeid, CHANGED, "differs", relative=relative)


def _mermaid(text: str) -> str:
    blocks = re.findall(r"```mermaid\n(.*?)```", text, re.S)
    assert len(blocks) == 1, text
    return str(blocks[0])


def test_no_changed_case_adds_nothing() -> None:
    assert difference_chart([]) == ""
    assert difference_chart([CaseOutcome("t::a", IDENTICAL), CaseOutcome("t::b", ERROR, "x")]) == ""


def test_bars_are_log10_largest_first_with_the_numbers_listed() -> None:
    text = difference_chart([_changed("tests/t.py::test_a[small]", 2.5e-7),
                             CaseOutcome("tests/t.py::test_same", IDENTICAL),
                             _changed("tests/t.py::test_a[large]", 3.2e-3)])
    chart = _mermaid(text)
    assert chart.startswith("xychart-beta horizontal\n")
    assert 'x-axis ["test_a[large]", "test_a[small]"]' in chart
    assert "bar [-2.49, -6.6]" in chart
    assert 'y-axis "log10 max relative difference" -8 --> -2' in chart  # below the smallest
    listed = text.split("```")[-1].strip().splitlines()
    assert listed == ["<details><summary>The numbers</summary>", "",
                      "- `tests/t.py::test_a[large]`: max relative difference 0.0032",
                      "- `tests/t.py::test_a[small]`: max relative difference 2.5e-07",
                      "", "</details>"]


def test_an_infinite_difference_reaches_the_top_and_cases_without_one_are_listed() -> None:
    text = difference_chart([_changed("t::finite", 1e-4), _changed("t::zero_moved", math.inf),
                             _changed("t::dtype", None), _changed("t::nan_payload", 0.0)])
    chart = _mermaid(text)
    assert 'x-axis ["zero_moved", "finite"]' in chart
    assert "bar [-2, -4]" in chart and "-5 --> -2" in chart  # inf: a decade above
    assert "- `t::zero_moved`: max relative difference inf (an element that was 0 moved)" in text
    assert "- `t::dtype`: no relative difference (not a float tensor, or another dtype or " \
           "shape)" in text
    assert "- `t::nan_payload`: bits only (NaN payloads or signs of zero)" in text


def test_changed_cases_with_no_number_are_a_list_without_a_chart() -> None:
    text = difference_chart([_changed("t::shape", None)])
    assert "```" not in text and "<details>" not in text
    assert text.endswith("\n\n- `t::shape`: no relative difference (not a float tensor, or "
                         "another dtype or shape)\n")


def test_labels_cannot_break_out_of_mermaid_or_markdown() -> None:
    nodeid = 'tests/t.py::test_x["a"#quot;`b`;<i>\n```]'
    text = difference_chart([_changed(nodeid, 1e-3)])
    chart = _mermaid(text)
    label = re.search(r'x-axis \["([^"]*)"\]', chart)
    assert label is not None and label.group(1) == "test_x[_a__quot__b___i_____]"
    assert text.count("```") == 2  # the chart's fence only
    # in the list, backticks cannot close the code span nor a newline end the item
    assert "- `tests/t.py::test_x[\"a\"#quot;'b';<i> ''']`: max relative difference" in text


def test_many_changed_cases_chart_the_largest_and_count_the_rest() -> None:
    cases = [_changed(f"t::case{i}", 10.0 ** -(i % 9 + 1)) for i in range(MOST + 7)]
    text = difference_chart(cases)
    assert _mermaid(text).count('", "') == MOST - 1
    assert text.count("\n- `") == MOST
    assert "... and 7 more changed cases" in text


def test_the_relative_difference_comes_from_the_comparison() -> None:
    reference = torch.tensor([1.0, 2.0, 0.5])
    moved = compare_tensors(reference, torch.tensor([1.0, 2.002, 0.5]), "'out'")
    now = float(torch.tensor(2.002))  # float32's nearest
    assert moved is not None and moved.max_relative == (now - 2.0) / 2.0
    ints = compare_tensors(torch.tensor([1, 2]), torch.tensor([1, 3]), "'n'")
    assert ints is not None and ints.max_relative is None
    assert largest_relative([ints, moved]) == moved.max_relative
    assert largest_relative([ints]) is None
