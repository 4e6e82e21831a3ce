"""A collection error that is the subject missing from this environment says how to fix it."""

from __future__ import annotations

import sys
from pathlib import Path

from regression.plugin.hints import subject_not_importable

ERROR = ("tests/test_m.py:1: in <module>\n    import {0}\n"
         "E   ModuleNotFoundError: No module named '{0}'")


def test_the_subject_or_one_of_its_modules_missing_gets_the_fix() -> None:
    for name in ("open_clip", "open_clip.model"):
        hint = subject_not_importable(ERROR.format(name), ("open_clip", "timm"))
        assert "the subject package 'open_clip' cannot be imported" in hint
        assert f"No module named '{name}'" in hint and "pip install -e ." in hint


def test_other_errors_are_left_to_pytest_s_own_message() -> None:
    assert subject_not_importable("SyntaxError: invalid syntax", ("open_clip",)) == ""


def test_a_missing_third_party_module_says_this_environment_cannot_import_it(
        tmp_path: Path) -> None:
    hint = subject_not_importable(ERROR.format("einops.layers"), ("open_clip",), tmp_path)
    assert hint.startswith(f"the tests import 'einops', which this environment "
                           f"({sys.executable}) cannot import (No module named "
                           "'einops.layers'): install it there")
    assert f"{sys.executable} -m pip install einops" in hint


def test_a_missing_module_that_is_a_file_of_the_project_gets_no_install_hint(
        tmp_path: Path) -> None:
    (tmp_path / "tests" / "helpers").mkdir(parents=True)
    (tmp_path / "tests" / "models.py").write_text("")
    for name in ("helpers", "models"):
        assert subject_not_importable(ERROR.format(name), ("open_clip",), tmp_path) == ""
