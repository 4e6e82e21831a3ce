"""What the mode plugins share: which tests are regression cases, and why one did not pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURE = "regression"


def uses_fixture(item: pytest.Item) -> bool:
    """Whether `item` is a regression case: a test that uses the `regression` fixture."""
    return FIXTURE in getattr(item, "fixturenames", ())


def report_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The last line of a report's text: the fallback when no exception is at hand."""
    text = report.longreprtext.strip().splitlines()
    return (text[-1] if text else report.outcome)[:500]


def exception_reason(error: BaseException, tb_frames: list[tuple[str, int]],
                     roots: tuple[Path, ...]) -> str:
    """`Type: message (file:line)` for an exception, with the file where it really happened.

    A pytest.CollectError wraps the import error that caused it: that one is described.
    For a SyntaxError the place is the file that does not parse; otherwise the deepest frame
    inside one of `roots` (the user's code), else the deepest frame.
    """
    error = _unwrapped(error)
    if isinstance(error, (pytest.skip.Exception, pytest.fail.Exception)):
        return str(error.msg)[:500]
    message = f"{type(error).__name__}: {error}".strip().rstrip(":")
    place = _syntax_place(error) or _deepest_place(tb_frames, roots)
    if place:
        file, _, line = place.rpartition(":")
        message += f" (in {shown_path(file, roots)}:{line})"
    return message[:500]


def _unwrapped(error: BaseException) -> BaseException:
    if type(error).__name__ == "CollectError" and error.__cause__ is not None:
        return error.__cause__
    return error


def _syntax_place(error: BaseException) -> str:
    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno}"
    return ""


_OURS = Path(__file__).resolve().parents[1]  # this package: never "the user's code"


def _deepest_place(frames: list[tuple[str, int]], roots: tuple[Path, ...]) -> str:
    chosen = [f for f in frames
              if _relative(f[0], roots) and not _relative(f[0], (_OURS,))] or frames
    return f"{chosen[-1][0]}:{chosen[-1][1]}" if chosen else ""


def _relative(path: str, roots: tuple[Path, ...]) -> str:
    """`path` relative to the first of `roots` that holds it; "" when none does."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return ""
    for root in roots:
        if real.is_relative_to(root):
            return real.relative_to(root).as_posix()
    return ""


def shown_path(path: str, roots: tuple[Path, ...]) -> str:
    """A path as messages show it: relative to the project or worktree when inside one."""
    return _relative(path, roots) or path


def traceback_frames(error: BaseException) -> list[tuple[str, int]]:
    """(file, line) of each frame of an exception's traceback, outermost first."""
    error = _unwrapped(error)
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return frames
