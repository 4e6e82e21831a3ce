"""Tests of regression.declarations: reading, checking, matching, writing and pruning the
declared changes of regression-changes.yaml, row by row."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from regression.declarations import BEHAVIOUR, FILE, REMOVAL, ROUNDING, Declaration, accepted, \
    parse, pruned, read, render, size_of, stale, uncovered, unknown, write
from regression.errors import ConfigError
from regression.outcomes import CHANGED, DECLARED, ERROR, IDENTICAL, REMOVED, CaseOutcome

CASE = "tests/test_m.py::test_a[x]"
OTHER = "tests/test_m.py::test_b"
SHA = "0123456789abcdef0123456789abcdef01234567"


def entry(case: str = CASE, size: str = ROUNDING, outputs: str = '["out"]',
          reason: str = '"why"', extra: str = "") -> str:
    return (f'  - case: "{case}"\n    outputs: {outputs}\n    size: {size}\n'
            f"    reason: {reason}\n    reference: {SHA}\n{extra}")


def declared(case: str = CASE, size: str = ROUNDING, outputs: tuple[str, ...] = ("out",),
             line: int = 2) -> Declaration:
    return Declaration(case, outputs, size, "why", SHA, line)


def test_an_entry_is_read_with_its_line() -> None:
    assert parse("changes:\n" + entry()) == (declared(),)


def test_a_removal_is_declared_with_no_outputs_and_survives_the_round_trip() -> None:
    removal = declared(OTHER, REMOVAL, ())
    assert parse("changes:\n" + entry(OTHER, REMOVAL, "[]")) == (removal,)
    assert parse(render([removal])) == (replace(removal, line=7),)  # after the header


def test_render_then_parse_gives_the_declarations_back_sorted_with_their_lines() -> None:
    text = render([declared(OTHER, BEHAVIOUR, ("a", "b")), declared()])
    found = parse(text)
    assert [d.case for d in found] == [CASE, OTHER]  # sorted by case
    assert found[1].outputs == ("a", "b") and found[1].size == BEHAVIOUR
    assert text.splitlines()[found[0].line - 1] == f'  - case: "{CASE}"'
    assert text.startswith("# Regression outputs changed on purpose")
    assert "`invoke accept --prune`" in text


def test_a_reason_with_quotes_colons_and_unicode_survives_the_round_trip() -> None:
    reason = 'softmax: "stable" now, x² — see #12'
    (found,) = parse(render([Declaration(CASE, ("out",), ROUNDING, reason, SHA)]))
    assert found.reason == reason


@pytest.mark.parametrize("text", ["", "changes:\n", "changes: []\n"])
def test_an_empty_file_declares_nothing(text: str) -> None:
    assert parse(text) == ()


def test_no_file_declares_nothing(tmp_path: Path) -> None:
    assert read(tmp_path / FILE) == ()


def test_write_then_read_and_the_last_entry_gone_removes_the_file(tmp_path: Path) -> None:
    path = tmp_path / FILE
    write(path, [declared()])
    assert [d.case for d in read(path)] == [CASE]
    write(path, [])
    assert not path.exists()


@pytest.mark.parametrize(("text", "line", "words"), [
    ("changes: [\n", 2, "is not valid YAML"),
    ("- a\n", None, "must be a mapping with one key, `changes:`"),
    ("changes:\n" + entry() + "other: 1\n", 1, "must be a mapping with one key"),
    ("changes: 3\n", 1, "must be a list of entries"),
    ("changes:\n  - just text\n", 1, "each entry is a mapping"),
    ("changes:\n" + entry(extra="    colour: red\n"), 7, "unknown key 'colour'"),
    ("changes:\n  - case: \"" + CASE + "\"\n    size: behaviour\n", 2,
     "the entry lacks outputs, reason, reference"),
    ("changes:\n" + entry(size="large"), 4, "'large' is no size; give rounding-level, "
                                            "behaviour or removed"),
    ("changes:\n" + entry(size="removed"), 3, "a removed case has no outputs that may "
                                              "differ: give outputs: []"),
    ("changes:\n" + entry(case="test_a"), 2, "'test_a' is no case"),
    ("changes:\n" + entry(outputs="[]"), 3, "outputs must be a list of the output names"),
    ("changes:\n" + entry(reason='""'), 5, "reason must be non-empty text"),
    ("changes:\n" + entry() + entry(), 7, f"{CASE} is declared twice, on line 2 and on "
                                          "line 7. Fix: keep one entry per case"),
    ("changes:\n  - case: a\n    case: b\n", 3, "set twice"),
])
def test_a_malformed_file_is_an_error_naming_the_line_and_the_fix(
        text: str, line: int | None, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(text, FILE)
    assert raised.value.line == line
    assert words in str(raised.value)
    assert str(raised.value).startswith(f"{FILE}:{line}: " if line else f"{FILE}: ")


@pytest.mark.parametrize(("rounding", "size"), [
    ([True, True], ROUNDING), ([True, False], BEHAVIOUR), ([], BEHAVIOUR)])
def test_a_change_is_rounding_level_only_where_every_difference_is(
        rounding: list[bool], size: str) -> None:
    assert size_of(rounding) == size


@pytest.mark.parametrize(("declared_size", "outputs", "size", "why"), [
    (ROUNDING, ["out"], ROUNDING, ""),
    (BEHAVIOUR, ["out"], ROUNDING, ""),  # smaller than declared
    (BEHAVIOUR, ["out"], BEHAVIOUR, ""),
    (ROUNDING, ["out"], BEHAVIOUR, f"declared rounding-level in {FILE} (line 2), but now "
                                   "behaviour"),
    (BEHAVIOUR, ["out", "logits"], BEHAVIOUR, f"the change touches outputs not declared in "
                                              f"{FILE} (line 2): 'logits'"),
])
def test_a_declaration_covers_its_outputs_up_to_its_size(
        declared_size: str, outputs: list[str], size: str, why: str) -> None:
    assert uncovered(declared(size=declared_size), outputs, size) == why


@pytest.mark.parametrize("size", [ROUNDING, BEHAVIOUR])
def test_a_declared_removal_covers_no_change_of_a_case_still_collected(size: str) -> None:
    assert uncovered(declared(size=REMOVAL, outputs=()), ["out"], size) == (
        f"declared removed in {FILE} (line 2), but it is collected and its outputs differ")


def test_only_a_case_judged_identical_here_makes_its_declaration_stale() -> None:
    declarations = [declared(), declared(OTHER), declared("tests/test_m.py::test_c")]
    outcomes = [CaseOutcome(CASE, IDENTICAL), CaseOutcome(OTHER, DECLARED)]
    assert stale(declarations, outcomes) == [declarations[0]]  # test_c: another shard


def test_a_declaration_is_unknown_when_its_file_is_gone_or_collected_without_it(
        tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_m.py").write_text("")
    gone = declared("tests/test_gone.py::test_a")
    renamed = declared("tests/test_m.py::test_renamed")
    elsewhere = declared(OTHER)  # its file was not collected here (--case another file)
    found = unknown([declared(), gone, renamed, elsewhere], {CASE}, set(), tmp_path)
    assert found == [gone]
    found = unknown([declared(), gone, renamed], {CASE}, {"tests/test_m.py"}, tmp_path)
    assert found == [gone, renamed]
    removal = declared("tests/test_m.py::test_removed", REMOVAL, ())  # the run judges it
    gone_removal = declared("tests/test_gone.py::test_a", REMOVAL, ())
    found = unknown([removal, gone_removal], {CASE}, {"tests/test_m.py"}, tmp_path)
    assert found == [gone_removal]


def test_accept_declares_each_changed_case_and_keeps_the_others() -> None:
    kept = Declaration(OTHER, ("out",), BEHAVIOUR, "older", SHA)
    outcomes = [CaseOutcome(CASE, CHANGED, names=("b", "a"), size=ROUNDING),
                CaseOutcome("tests/test_m.py::test_c", ERROR, "boom")]
    assert accepted([kept], outcomes, "new", "f" * 40) == (
        Declaration(CASE, ("a", "b"), ROUNDING, "new", "f" * 40), kept)


def test_accept_declares_a_removed_case_as_a_removal_with_no_outputs() -> None:
    outcomes = [CaseOutcome(CASE, REMOVED, "collected at the reference, not here")]
    assert accepted([], outcomes, "retired", SHA) == (
        Declaration(CASE, (), REMOVAL, "retired", SHA),)


def test_accept_declares_a_declared_case_again_with_what_it_shows_now() -> None:
    old = Declaration(CASE, ("out",), ROUNDING, "old", SHA)
    outcomes = [CaseOutcome(CASE, CHANGED, names=("out",), size=BEHAVIOUR)]
    assert accepted([old], outcomes, "grew", SHA) == (
        Declaration(CASE, ("out",), BEHAVIOUR, "grew", SHA),)


def test_prune_drops_the_named_cases_only() -> None:
    assert pruned([declared(), declared(OTHER)], [declared(OTHER)]) == (declared(),)
