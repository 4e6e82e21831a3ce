"""Cases picked on the command line: -k and node ids, checked before any run."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.errors import RegressionError
from regression.selection import Selection, selection


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
