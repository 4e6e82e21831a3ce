"""A collection error that is the subject missing from this environment says how to fix it."""

from __future__ import annotations

from regression.modes.check import subject_not_importable

ERROR = "tests/test_m.py:1: in <module>\n    import {0}\nE   ModuleNotFoundError: No module named '{0}'"


def test_the_subject_or_one_of_its_modules_missing_gets_the_fix() -> None:
    for name in ("open_clip", "open_clip.model"):
        hint = subject_not_importable(ERROR.format(name), ("open_clip", "timm"))
        assert "the subject package 'open_clip' cannot be imported" in hint
        assert f"No module named '{name}'" in hint and "pip install -e ." in hint


def test_another_missing_module_is_left_to_pytest_s_own_message() -> None:
    assert subject_not_importable(ERROR.format("einops"), ("open_clip",)) == ""
    assert subject_not_importable(ERROR.format("open_clip_extra"), ("open_clip",)) == ""
    assert subject_not_importable("SyntaxError: invalid syntax", ("open_clip",)) == ""
