"""Cases picked on the command line: -k and node ids, checked before any run."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.errors import RegressionError
from regression.selection import Selection, selection, unknown_cases


def test_nothing_chosen_selects_every_case(tmp_path: Path) -> None:
    chosen = selection(None, None, tmp_path, "2/4")
    assert not chosen and chosen.pytest_args() == [] and chosen.cases == ()


def test_expression_and_node_ids_are_passed_and_described(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text("")
    chosen = selection(" vit and not large ", ["tests/test_m.py::test_f[a]", "tests/test_m.py"],
                       tmp_path, None)
    assert chosen.pytest_args() == ["-k", "vit and not large"]
    assert chosen.cases == ("tests/test_m.py::test_f[a]", "tests/test_m.py")
    assert chosen.describe() == "-k 'vit and not large' and 2 node ids"
    assert Selection(cases=("a.py",)).describe() == "1 node id"


def test_node_id_of_a_missing_file_names_it_and_the_form_wanted(tmp_path: Path) -> None:
    with pytest.raises(RegressionError, match=r"--case tests/gone.py::t: there is no "
                                              r"tests/gone.py in .*Give a node id as pytest"):
        selection(None, ["tests/gone.py::t"], tmp_path, None)


def test_a_shard_and_a_selection_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RegressionError, match="--shard 1/2 and -k 'x' both choose cases"):
        selection("x", None, tmp_path, "1/2")


CASES = ["t/test_m.py::test_forward[vit-tiny]", "t/test_m.py::test_forward[mlp-tiny]",
         "t/test_m.py::test_init"]


def test_a_mistyped_parametrization_is_named_with_the_nearest_case() -> None:
    error = unknown_cases(Selection(cases=("t/test_m.py::test_forward[vitt]",)), CASES)
    assert error is not None
    assert str(error).startswith("--case t/test_m.py::test_forward[vitt] is not a regression "
                                 "case of this suite; did you mean "
                                 "t/test_m.py::test_forward[vit-tiny]?")


def test_files_functions_and_exact_cases_are_known() -> None:
    for case in ("t/test_m.py", "t/test_m.py::test_forward", "t/test_m.py::test_init",
                 "t/test_m.py::test_forward[mlp-tiny]"):
        assert unknown_cases(Selection(cases=(case,)), CASES) is None, case


def test_a_case_far_from_every_case_gets_no_guess() -> None:
    error = unknown_cases(Selection(cases=("other/test_q.py::zzz",)), CASES)
    assert error is not None and "did you mean" not in str(error)


@pytest.mark.parametrize(("case", "words"), [
    ("/etc/passwd", "/etc/passwd is not a path relative to the project root"),
    ("../outside.py::test_x", "../outside.py is not a path relative to the project root"),
    ("tests/../../outside.py", "is not a path relative to the project root"),
    ("config.yaml", "config.yaml is outside the project's tests (tests, config.yaml's"),
    ("tests\0.py", "it holds a NUL byte"),
])
def test_a_case_outside_the_projects_tests_is_refused(tmp_path: Path, case: str,
                                                      words: str) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "config.yaml").write_text("")
    (tmp_path.parent / "outside.py").write_text("")
    with pytest.raises(RegressionError) as info:
        selection(None, [case], tmp_path, None, ("tests",))
    assert words in str(info.value) and "Give a node id as pytest prints it" in str(info.value)


def test_a_case_under_the_tests_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "tests" / "inner").mkdir(parents=True)
    (tmp_path / "tests" / "inner" / "test_m.py").write_text("")
    chosen = selection(None, ["tests/inner/test_m.py::test_f", "tests"], tmp_path, None,
                       ("tests",))
    assert chosen.cases == ("tests/inner/test_m.py::test_f", "tests")


def test_a_case_collected_no_more_is_named_by_its_node_id_or_file_never_by_k() -> None:
    case = "tests/test_m.py::test_forward[conv]"
    assert Selection(cases=(case,)).names(case)
    assert Selection(cases=("tests/test_m.py",)).names(case)
    assert not Selection(cases=("tests/test_m.py::test_forward[mlp]",)).names(case)
    assert not Selection(cases=("tests/test_m",)).names(case)  # no file of that name
    assert not Selection("conv").names(case)  # -k matches what pytest collects
    assert not Selection("conv", (case,)).names(case)
