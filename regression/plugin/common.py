"""What the mode plugins share: which tests are regression cases, and why one did not pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


FIXTURE = "regression"


def uses_fixture(item: pytest.Item) -> bool:
    """Whether `item` is a regression case: a test that uses the `regression` fixture, and
    not the stand-in pytest makes for an empty parameter set (`test_x[NOTSET]`)."""
    return FIXTURE in getattr(item, "fixturenames", ()) and \
        not ("NOTSET" in item.name and _empty(item))


def _empty(item: pytest.Item) -> bool:
    """Whether `item` stands for a parameter set that is empty (skipped or xfailed as
    pytest's empty_parameter_set_mark says): no case to check, record or remove."""
    return any(str(mark.kwargs.get("reason", "")).startswith("got empty parameter set")
               for mark in item.iter_markers() if mark.name in ("skip", "xfail"))


_OUTPUT_ONLY = frozenset({
    "-k", "-m", "-n", "-r", "-W", "--tb", "--deselect", "--junitxml", "--junit-xml",
    "--maxfail", "--durations", "--dist", "--basetemp", "--color", "--capture",
    "--numprocesses", "--log-level", "--log-cli-level", "--log-file", "--timeout",
    "--junit-prefix", "--tx", "--maxprocesses", "--max-worker-restart", "--rootdir",
    "--verbosity", "--durations-min", "--code-highlight", "--show-capture", "--log-format",
    "--log-date-format", "--log-cli-format", "--log-cli-date-format", "--log-file-level",
    "--log-file-format", "--log-file-date-format", "--log-file-mode", "--cov", "--cov-report",
    "--cov-config", "--cov-fail-under", "--cov-context", "--html", "--css", "--reruns",
    "--reruns-delay", "--only-rerun", "--timeout-method", "--report-log", "--pdbcls"})
"""pytest options (with a value) that leave which tests a file collects alone (the runs of
ours name the rootdir: both the recording and the check run, each its own)."""
_OUTPUT_FLAGS = frozenset({
    "-q", "-v", "-vv", "-vvv", "-qq", "-x", "-s", "-l", "--quiet", "--verbose",
    "--exitfirst", "--showlocals", "--no-header", "--no-summary", "--strict-markers",
    "--strict", "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first",
    "--sw", "--stepwise", "--continue-on-collection-errors", "--disable-warnings",
    "--runxfail", "--co", "--collect-only", "--setup-show", "--full-trace", "--no-cov",
    "--no-cov-on-fail", "--cov-append", "--cov-branch", "--self-contained-html",
    "--strict-config", "--force-short-summary", "--pdb", "--trace", "--cache-clear"})
"""pytest's flags that leave which tests a file collects alone (--lf and --sw narrow a run,
which is judged apart)."""


def collecting_options(args: list[str]) -> list[str]:
    """The options among a pytest invocation's `args` that may decide which tests a file
    collects (a conftest's `--quick`, `-c other.ini`): those neither pytest's output nor
    selection, nor this tool's, nor a plugin disabled (`-p no:NAME`; `-p NAME` loads one,
    which may). Paths and node ids are no options."""
    found, skip, plugin = [], False, False
    for arg in args:
        if skip or plugin:
            if plugin and not arg.startswith("no:"):
                found.append(f"-p {arg}")
            skip = plugin = False
            continue
        if arg == "-p":
            plugin = True
            continue
        if arg.startswith("-p"):
            if not arg[2:].startswith("no:"):
                found.append(arg)
            continue
        if not arg.startswith("-") or arg == "-":
            continue
        if not arg.startswith("--") and all(f"-{c}" in _OUTPUT_FLAGS for c in arg[1:]):
            continue  # flags given together: -sv, -qx
        name = arg.split("=", 1)[0]
        short = name[:2] if not name.startswith("--") else name
        if name.startswith("--regression") or name in _OUTPUT_FLAGS:
            continue
        if name in _OUTPUT_ONLY or short in _OUTPUT_ONLY:
            skip = "=" not in arg and (name == short == arg or name.startswith("--"))
            continue
        found.append(arg)
    return found


def collection_conditions(config: pytest.Config) -> str:
    """What besides the test code decides which cases a file collects, as a digest: pytest's
    settings (its section of the settings file) and the options of PYTEST_ADDOPTS that may
    (collecting_options; a recording sees both as the check run does); "" when the run's own
    command line may decide it too, which a recording does not see."""
    from regression.environment.fingerprint import digest

    words = _addopts()
    if collecting_options(list(config.invocation_params.args)) or words is None:
        return ""
    addopts = collecting_options(words)
    settings = pytest_section(config.inipath) if config.inipath is not None else ""
    return digest("\0".join([settings, *addopts]).encode())


def pytest_settings(config: pytest.Config) -> str:
    """pytest's settings as stable text, part of every case's harness: its section of the
    settings file and the `-o` overrides of PYTEST_ADDOPTS, which the recording sees too
    (not those of plain pytest's command line, which it does not); "" where none."""
    section = pytest_section(config.inipath) if config.inipath is not None else ""
    overrides = sorted(_overrides(_addopts() or []))
    return "\0".join([section, *overrides]) if section or overrides else ""


def _addopts() -> list[str] | None:
    """PYTEST_ADDOPTS's words; None where they cannot be split (pytest refuses it too)."""
    import shlex

    try:
        return shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        return None


def _overrides(words: list[str]) -> list[str]:
    """The values of `-o NAME=VALUE` (`-oNAME=VALUE`, `--override-ini[=]NAME=VALUE`)."""
    found = []
    for index, word in enumerate(words):
        if word in ("-o", "--override-ini") and index + 1 < len(words):
            found.append(words[index + 1])
        elif word.startswith("--override-ini="):
            found.append(word.split("=", 1)[1])
        elif word.startswith("-o") and len(word) > 2 and not word.startswith("--"):
            found.append(word[2:])
    return found


def pytest_section(path: Path) -> str:
    """pytest's section of its settings file, as stable text: the rest of the file (a
    pyproject.toml's version and dependencies) decides nothing of what is collected."""
    import configparser
    import json

    from regression.environment.dependencies import toml_table

    if path.suffix == ".toml":  # pyproject.toml's [tool.pytest...]; pytest.toml's [pytest]
        table = toml_table(path)
        if path.name == "pyproject.toml":
            table = table.get("tool", {}) if isinstance(table.get("tool"), dict) else {}
        return json.dumps(table.get("pytest", {}), sort_keys=True, default=str)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return ""
    found = {name: dict(parser[name]) for name in ("pytest", "tool:pytest")
             if parser.has_section(name)}
    return json.dumps(found, sort_keys=True)


def report_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The last line of a report's text: the fallback when no exception is at hand; a
    skip's own message (its report holds it as (path, line, message))."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")[:500]
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
    # not imported in runs without cases
    from regression.environment.determinism import nondeterministic_operation_hint

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
