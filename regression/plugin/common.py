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
    For a SyntaxError the place is the file that does not parse; otherwise the frame that
    raised it, and the deepest frame of the user's code (under `roots`) when that is another.
    """
    error = _unwrapped(error)
    if isinstance(error, (pytest.skip.Exception, pytest.fail.Exception)):
        return str(error.msg)[:500]
    from regression.environment.determinism import nondeterministic_operation_hint  # not in runs without cases

    message = f"{type(error).__name__}: {error}".strip().rstrip(":")
    hint = nondeterministic_operation_hint(str(error))
    return (message + _places(error, tb_frames, roots))[:500] + (f"\n{hint}" if hint else "")


def _places(error: BaseException, tb_frames: list[tuple[str, int]],
            roots: tuple[Path, ...]) -> str:
    """` (in FILE:LINE)`: where it happened (this package's own frames left out, as pytest
    hides them); when that is in a library (site-packages), also the deepest frame of the
    user's code, the subject or the test, that called it."""
    syntax = _syntax_place(error)
    if syntax:
        return f" (in {_shown_place(syntax, roots)})"
    outside_ours = [f for f in tb_frames if not _relative(f[0], (_OURS,))] or tb_frames
    raised = f"{outside_ours[-1][0]}:{outside_ours[-1][1]}" if outside_ours else ""
    ours = _deepest_place(tb_frames, roots)
    if not raised:
        return ""
    if ours and ours != raised:
        return (f" (raised in {_shown_place(raised, roots)}, called from "
                f"{_shown_place(ours, roots)})")
    return f" (in {_shown_place(raised, roots)})"


def _shown_place(place: str, roots: tuple[Path, ...]) -> str:
    file, _, line = place.rpartition(":")
    return f"{shown_path(file, roots)}:{line}"


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
    """The deepest frame in the user's code: under `roots`, but not in this package nor in
    an installed library (a venv inside the project holds site-packages); "" if none."""
    from regression.environment.origins import library_folders

    libraries = (_OURS, *library_folders())
    chosen = [f for f in frames if _relative(f[0], roots) and not _relative(f[0], libraries)]
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


def crash_reason(report: pytest.TestReport) -> str:
    """Why a case ended without a report: its pytest-xdist worker process died in it."""
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", "?")
    return (f"its pytest-xdist worker {worker} crashed while running it: the process ended "
            "(os._exit, a signal, or out of memory)")
