"""Tests of regression.report: the end-of-run summary as text and as Markdown."""

from __future__ import annotations

from dataclasses import replace

from regression.compare.outputs import Difference
from regression.declarations import Declaration
from regression.outcomes import CHANGED, DECLARED, ERROR, IDENTICAL, NEW, NONDETERMINISTIC, \
    REMOVED, CaseOutcome
from regression.report import (
    github_annotations,
    markdown_summary,
    mismatch_message,
    not_run_lines,
    summary_lines,
)

ALL_SAME = "every case is bit-identical to the reference"


def outcomes() -> list[CaseOutcome]:
    return [
        CaseOutcome("t.py::a", IDENTICAL),
        CaseOutcome("t.py::b", CHANGED, "'y': float32[2]: 1 of 2 elements differ"),
        CaseOutcome("t.py::c", IDENTICAL),
        CaseOutcome("t.py::d", NEW, "does not exist at the reference"),
        CaseOutcome("t.py::e", ERROR, "boom\nsecond line"),
        CaseOutcome("t.py::f", ERROR),
    ]


def test_summary_counts_every_outcome() -> None:
    assert summary_lines("abc1234", outcomes())[0] == (
        "reference abc1234: 6 cases: 2 identical, 1 changed, 1 not in reference, 2 errors")


def test_summary_lists_each_case_that_is_not_identical_in_order() -> None:
    assert summary_lines("abc1234", outcomes())[1:] == [
        "CHANGED t.py::b: 'y': float32[2]: 1 of 2 elements differ",
        "NOT IN REFERENCE t.py::d: does not exist at the reference",
        "ERROR t.py::e: boom\n    second line",
        "ERROR t.py::f",
    ]


def test_summary_says_all_identical_only_when_they_are() -> None:
    same = [CaseOutcome("t.py::a", IDENTICAL), CaseOutcome("t.py::b", IDENTICAL)]
    assert summary_lines("r", same) == [
        "reference r: 2 cases: 2 identical, 0 changed, 0 not in reference, 0 errors",
        f"{ALL_SAME} (2 of 2)",
    ]
    assert not any(ALL_SAME in line for line in summary_lines("r", outcomes()))


def test_summary_of_no_cases_does_not_claim_all_identical() -> None:
    assert summary_lines("r", []) == [
        "reference r: 0 cases: 0 identical, 0 changed, 0 not in reference, 0 errors"]


def test_single_error_is_not_pluralised() -> None:
    assert summary_lines("r", [CaseOutcome("t.py::a", ERROR)])[0].endswith(", 1 error")


def test_summary_accepts_a_generator() -> None:
    assert summary_lines("r", (o for o in outcomes())) == summary_lines("r", outcomes())


def test_markdown_summary_has_a_table_of_counts() -> None:
    text = markdown_summary("abc1234 (main)", outcomes())
    assert text.startswith("### Regression against abc1234 (main)\n\n"
                           "| outcome | cases |\n| --- | --- |\n"
                           "| identical | 2 |\n| changed | 1 |\n| not in reference | 1 |\n"
                           "| error | 2 |\n")


def test_markdown_summary_lists_problems_with_their_first_line() -> None:
    problems = markdown_summary("r", outcomes()).split("| error | 2 |\n", 1)[1]
    assert problems == (
        "\n- **changed** `t.py::b`: 'y': float32[2]: 1 of 2 elements differ\n"
        "- **not in reference** `t.py::d`: does not exist at the reference\n"
        "- **error** `t.py::e`: boom\n"
        "- **error** `t.py::f`\n")


def test_markdown_summary_without_problems_ends_after_the_table() -> None:
    text = markdown_summary("r", [CaseOutcome("t.py::a", IDENTICAL)])
    assert text.endswith("| error | 0 |\n")
    assert "- **" not in text


def test_mismatch_message_names_output_reference_and_each_difference() -> None:
    differences = [Difference("'y'[0]", "2, reference 1", lines=("more",)),
                   Difference("'y'[1]", "length 3")]
    assert mismatch_message("abc1234", [("y", differences)], 1) == (
        "output 'y' is not bit-identical to the reference abc1234:\n"
        "  'y'[0]: 2, reference 1\n"
        "      more\n"
        "  'y'[1]: length 3")
    two = mismatch_message("abc1234", [("y", differences), ("z", [Difference("'z'", "1")])], 3)
    assert two.startswith("2 of 3 outputs are not bit-identical to the reference abc1234: "
                          "'y', 'z'\n")
    assert two.endswith("\n  'z': 1")


def test_not_run_lines_list_each_case_and_why_then_cut_off() -> None:
    missing = [f"t.py::test_{i}" for i in range(25)]
    lines = not_run_lines(missing, 30, lambda nodeid: f"why {nodeid[-2:]}", most=20)
    assert lines[0] == ("25 of 30 regression cases this run was meant to check did not run, "
                        "so it does not pass:")
    assert lines[1] == "  t.py::test_0: why _0"
    assert len(lines) == 22 and lines[-1] == "  ... and 5 more"


CHANGED_TWICE = CaseOutcome("tests/test_m.py::test_f[a,b]", CHANGED, "'x': first (and 1 more)",
                            ("'x': float32[2]: 1 of 2 elements differ; 100%: all",
                             "'y'[0]: 3, reference 4"), "tests/test_m.py", 12)


def test_markdown_summary_lists_each_differing_output_of_a_changed_case() -> None:
    text = markdown_summary("r", [CHANGED_TWICE])
    assert text.endswith("- **changed** `tests/test_m.py::test_f[a,b]`\n"
                         "  - `'x': float32[2]: 1 of 2 elements differ; 100%: all`\n"
                         "  - `'y'[0]: 3, reference 4`\n")


def test_each_changed_case_is_one_error_annotation_on_its_line_escaped() -> None:
    lines = github_annotations("abc (v1)", [*outcomes(), CHANGED_TWICE])
    assert lines == [
        "::error file=tests/test_m.py,line=12,"
        "title=tests/test_m.py%3A%3Atest_f[a%2Cb] changed against abc (v1)::"
        "'x': float32[2]: 1 of 2 elements differ; 100%25: all%0A'y'[0]: 3, reference 4"]


def test_a_removed_case_is_counted_listed_and_an_error_annotation_on_its_file() -> None:
    removed = CaseOutcome("t.py::test_m[c]", REMOVED, "collected at the reference, not here",
                          path="t.py", line=1)
    declared = replace(removed, outcome=DECLARED, size=REMOVED, reason="c retired")
    lines = summary_lines("r", [CaseOutcome("t.py::a", IDENTICAL), removed])
    assert lines[0] == ("reference r: 2 cases: 1 identical, 0 changed, 0 not in reference, "
                        "0 errors, 1 removed")
    assert lines[1:] == ["REMOVED t.py::test_m[c]: collected at the reference, not here"]
    assert "| removed | 1 |" in markdown_summary("r", [removed])
    assert github_annotations("v1", [removed, declared]) == [
        "::error file=t.py,line=1,title=t.py%3A%3Atest_m[c] removed against v1::"
        "collected at the reference, not here",
        "::notice file=t.py,line=1,title=t.py%3A%3Atest_m[c] removed as declared against "
        "v1::c retired%0Aremoved: collected at the reference, not here"]
    assert removed.fails(strict=False) and not declared.fails(strict=True)


def test_nondeterministic_cases_are_counted_and_listed_only_when_there_are_some() -> None:
    mixed = [CaseOutcome("t.py::a", IDENTICAL),
             CaseOutcome("t.py::n", NONDETERMINISTIC, "outputs 'noise' differed")]
    lines = summary_lines("r", mixed)
    assert lines[0] == ("reference r: 2 cases: 1 identical, 0 changed, 0 not in reference, "
                        "0 errors, 1 nondeterministic")
    assert lines[1:] == ["NONDETERMINISTIC t.py::n: outputs 'noise' differed"]
    assert "| nondeterministic | 1 |" in markdown_summary("r", mixed)
    assert "nondeterministic" not in summary_lines("r", mixed[:1])[0]
    assert "nondeterministic" not in markdown_summary("r", mixed[:1])


def test_a_multi_line_message_keeps_its_indentation_under_its_case() -> None:
    message = "ValueError: shape mismatch:\n    expected (2, 3)\n      got (3, 2)"
    lines = summary_lines("v1", [CaseOutcome("t.py::a", ERROR, message)])
    assert lines[-1].split("\n") == ["ERROR t.py::a: ValueError: shape mismatch:",
                                     "        expected (2, 3)", "          got (3, 2)"]


def test_not_run_and_generation_lines_indent_a_multi_line_reason_too() -> None:
    from regression.report import generation_lines
    from regression.run.types import Generation
    lines = not_run_lines(["t.py::a"], 1, lambda _: "failed:\n  at x")
    assert lines[-1] == "  t.py::a: failed:\n      at x"
    generation = Generation(recorded=["t.py::b"], reused=0, absent={"t.py::a": "E:\n  x"})
    assert "not in reference: t.py::a: E:\n      x" in generation_lines(generation)


# changed_detail: the one-line summary of a changed case names the most telling difference


def _state(**changes: object) -> dict[str, object]:
    """A small state_dict, with some entries replaced."""
    import torch

    state: dict[str, object] = {"fc.weight": torch.zeros(2, 3), "fc.bias": torch.zeros(2),
                                "norm.weight": torch.ones(3)}
    state.update(changes)
    return state


def _detail(reference: dict[str, object], actual: dict[str, object]) -> str:
    from regression.compare.outputs import compare
    from regression.report import changed_detail

    return changed_detail([("state", compare(reference, actual, name="'state'"))])


def _reordered(state: dict[str, object]) -> dict[str, object]:
    return dict(reversed(list(state.items())))


def test_a_changed_value_is_named_first_though_the_key_order_changed_too() -> None:
    import torch

    detail = _detail(_state(), _reordered(_state(**{"fc.bias": torch.tensor([0.0, 1.0])})))
    assert detail.startswith("'state'['fc.bias']: float32[2]: 1 of 2 elements differ")
    assert detail.endswith("; also the key order differs")


def test_values_come_before_shapes_before_dtypes_before_order() -> None:
    import torch

    actual = _reordered(_state(**{"fc.weight": torch.zeros(3, 3),
                                  "norm.weight": torch.ones(3, dtype=torch.float64),
                                  "fc.bias": torch.ones(2)}))
    detail = _detail(_state(), actual)
    assert detail.startswith("'state'['fc.bias']: float32[2]: 2 of 2 elements differ")
    assert detail.endswith("; also 1 shape, 1 dtype and the key order differ")


def test_a_shape_is_named_before_a_dtype_and_the_order() -> None:
    import torch

    actual = _reordered(_state(**{"norm.weight": torch.ones(3, dtype=torch.float64),
                                  "fc.weight": torch.zeros(3, 2)}))
    assert _detail(_state(), actual) == (
        "'state'['fc.weight']: shape float32[3, 2], reference float32[2, 3]; also 1 dtype "
        "and the key order differ")


def test_a_dtype_is_named_before_the_order() -> None:
    import torch

    actual = _reordered(_state(**{"fc.bias": torch.zeros(2, dtype=torch.float16)}))
    assert _detail(_state(), actual) == (
        "'state'['fc.bias']: dtype float16[2], reference float32[2]; also the key order "
        "differs")


def test_key_order_alone_is_reported_as_such() -> None:
    assert _detail(_state(), _reordered(_state())) == (
        "'state': same keys and values, in another order: only the key order differs")


def test_missing_keys_are_counted_as_keys_not_as_shapes() -> None:
    import torch

    actual = _state(**{"fc.bias": torch.ones(2)})
    del actual["norm.weight"]
    detail = _detail(_state(), actual)
    assert detail.startswith("'state'['fc.bias']: float32[2]: 2 of 2")
    assert detail.endswith("; also 1 key missing")
    assert "shape" not in detail


def test_a_head_that_lost_its_norm_reads_as_keys_missing_and_added() -> None:
    """vit-pytorch's t2t: `mlp_head.0` (a LayerNorm) gone, `mlp_head.1` renamed `mlp_head`;
    no tensor changed its shape, and string keys carry no type."""
    import torch

    reference = {"mlp_head.0.weight": torch.ones(4), "mlp_head.0.bias": torch.zeros(4),
                 "mlp_head.1.weight": torch.ones(2, 4), "mlp_head.1.bias": torch.zeros(2)}
    actual = {"mlp_head.weight": torch.ones(2, 4), "mlp_head.bias": torch.zeros(2)}
    assert _detail(reference, actual) == (
        "'state': keys missing: 'mlp_head.0.weight', 'mlp_head.0.bias', 'mlp_head.1.weight', "
        "'mlp_head.1.bias'; also 2 keys not in reference")


def test_several_values_are_counted_and_other_outputs_named() -> None:
    from regression.compare.outputs import compare
    from regression.report import changed_detail

    changed = [("meta", compare({"n": 3}, {"n": 4}, name="'meta'")),
               ("state", compare({"a": 1, "b": 2}, {"b": 2, "a": 5}, name="'state'"))]
    assert changed_detail(changed) == ("'meta'['n']: 4, reference 3 (and 1 more output "
                                       "differs: 'state')")


def test_a_difference_in_another_output_is_counted_once() -> None:
    """Not `also 1 more value differs (and 1 more outputs differ: 'forward_features')`."""
    import torch

    from regression.compare.outputs import compare
    from regression.report import changed_detail

    changed = [("logits", compare(torch.zeros(2), torch.ones(2), name="'logits'")),
               ("forward_features", compare(torch.zeros(3), torch.ones(3),
                                            name="'forward_features'"))]
    detail = changed_detail(changed)
    assert detail.endswith("(and 1 more output differs: 'forward_features')")
    assert "also" not in detail
    two = [*changed, ("x", compare({"a": 1, "b": 2}, {"a": 2, "b": 3}, name="'x'"))]
    assert changed_detail(two).endswith(
        "(and 2 more outputs differ: 'forward_features', 'x')")
    one = [("x", compare({"a": 1, "b": 2, "c": 3}, {"a": 2, "b": 3, "c": 4}, name="'x'"))]
    assert changed_detail(one) == "'x'['a']: 2, reference 1; also 2 more values differ"


# Changes declared in regression-changes.yaml.

DECLARED_CASE = CaseOutcome("t.py::test_d", DECLARED, "'out': 2 of 6 differ", ("'out': 2 of 6",),
                            "t.py", 9, names=("out",), size="rounding-level",
                            reason="softmax | in float32")
STALE = Declaration("t.py::test_s", ("out",), "behaviour", "old", "f" * 40, 12)


def test_summary_counts_declared_cases_and_lists_them_apart_with_their_reasons() -> None:
    outcomes = [CaseOutcome("t.py::test_c", CHANGED, "c"), DECLARED_CASE,
                CaseOutcome("t.py::test_s", IDENTICAL)]
    lines = summary_lines("v1", outcomes)
    assert lines[0] == ("reference v1: 3 cases: 1 identical, 1 changed, 0 not in reference, "
                        "0 errors, 1 declared")
    assert lines[1:] == [
        "CHANGED t.py::test_c: c",
        "changed as declared in regression-changes.yaml (1), each passes:",
        "DECLARED t.py::test_d: softmax | in float32",
        "    rounding-level: 'out': 2 of 6 differ"]


def test_summary_names_the_stale_declarations_and_the_command_that_drops_them() -> None:
    lines = summary_lines("v1", [CaseOutcome("t.py::test_s", IDENTICAL)], [STALE])
    assert lines[-2:] == [
        "declarations that no longer differ (1): the reference has caught up, or the change "
        "was taken back; `invoke accept --prune` drops them:",
        "STALE t.py::test_s (regression-changes.yaml line 12)"]


def test_markdown_summary_lists_declared_changes_and_stale_declarations() -> None:
    text = markdown_summary("v1", [DECLARED_CASE], [STALE])
    assert "| declared | 1 |" in text
    assert "- **declared**" not in text  # not among the problems
    assert "| `t.py::test_d` | rounding-level | softmax \\| in float32 |" in text
    assert "- `t.py::test_s` (line 12)" in text and "`invoke accept --prune`" in text


def test_a_declared_case_is_a_notice_with_its_reason_and_a_stale_one_a_warning() -> None:
    notice, warning = github_annotations("v1", [DECLARED_CASE], [STALE])
    assert notice.startswith("::notice file=t.py,line=9,title=t.py%3A%3Atest_d changed as "
                             "declared against v1::softmax | in float32%0Arounding-level: ")
    assert warning == ("::warning file=regression-changes.yaml,line=12,title=declaration no "
                       "longer differs::t.py::test_s is identical to v1 now; `invoke accept "
                       "--prune` drops it")
