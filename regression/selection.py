"""Cases the user picks for one run: a pytest `-k` expression and node ids."""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from regression.errors import RegressionError


@dataclass(frozen=True)
class Selection:
    """A `-k` expression and node ids (or test files); empty: every case."""

    expression: str = ""
    cases: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.expression or self.cases)

    def pytest_args(self) -> list[str]:
        """The options pytest selects by; the node ids are the run's paths."""
        return ["-k", self.expression] if self.expression else []

    def names(self, nodeid: str) -> bool:
        """Whether a case that is not collected (a removed one) is chosen by its node id
        alone: named with --case, or its file; never by a -k expression, which pytest
        matches against what it collects."""
        return not self.expression and any(nodeid == c or nodeid.startswith(f"{c}::")
                                           for c in self.cases)

    def describe(self) -> str:
        """'-k attention and 2 node ids', for messages."""
        parts = [f"-k {self.expression!r}"] if self.expression else []
        if self.cases:
            parts.append(f"{len(self.cases)} node id{'s' if len(self.cases) > 1 else ''}")
        return " and ".join(parts)


_NODE_ID_FORM = ("Give a node id as pytest prints it, relative to the project root (e.g. "
                 "tests/regression/test_models.py::test_forward[vit]), or a test file.")


def selection(expression: str | None, cases: list[str] | None, root: Path,
              shard: str | None, tests: tuple[str, ...] = ()) -> Selection:
    """The selection given on the command line, checked: each node id's file exists under
    `root`, within one of the `tests` folders (config.yaml's) when given, and a shard is not
    chosen as well."""
    chosen = Selection((expression or "").strip(), tuple(cases or ()))
    if chosen and shard:
        raise RegressionError(f"--shard {shard} and {chosen.describe()} both choose cases; "
                              "use one: a shard in CI, -k or --case to run a few")
    for case in chosen.cases:
        problem = _case_problem(case.split("::", 1)[0], root, tests)
        if problem:
            raise RegressionError(f"--case {case}: {problem}. {_NODE_ID_FORM}")
    return chosen


def _case_problem(path: str, root: Path, tests: tuple[str, ...]) -> str:
    """Why `path` (a node id's file) names no test file of the project at `root`, or ""."""
    if "\0" in path:
        return "it holds a NUL byte, which no file name can hold"
    if Path(path).is_absolute() or ".." in Path(path).parts:
        return f"{path} is not a path relative to the project root {root}"
    if not (root / path).exists():
        return f"there is no {path} in {root}"
    target = (root / path).resolve()
    folders = [(root / folder).resolve() for folder in tests]
    if folders and not any(target == f or f in target.parents for f in folders):
        return (f"{path} is outside the project's tests ({', '.join(tests)}, config.yaml's "
                "`tests`), so it holds no case of this suite")
    return ""


def unknown_case(case: str, cases: Collection[str], option: str = "") -> RegressionError:
    """The error for a node id that names no regression case, with the nearest one."""
    close = difflib.get_close_matches(case, list(cases), n=1)
    hint = f"did you mean {close[0]}? Or give" if close else "give"
    return RegressionError(f"{option}{case} is not a regression case of this suite; {hint} a "
                           "node id as `invoke shards --list` prints it, or a -k expression")


def unknown_cases(chosen: Selection, cases: Collection[str]) -> RegressionError | None:
    """The error for the first node id of `chosen` that names no collected case, if any
    (a test file, or a test function of parametrized cases, names some)."""
    for case in chosen.cases:
        if "::" in case and not any(c == case or c.startswith(f"{case}[") for c in cases):
            return unknown_case(case, cases, "--case ")
    return None
