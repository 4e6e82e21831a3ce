"""Cases the user picks for one run: a pytest `-k` expression and node ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import RegressionError


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

    def describe(self) -> str:
        """'-k attention and 2 node ids', for messages."""
        parts = [f"-k {self.expression!r}"] if self.expression else []
        if self.cases:
            parts.append(f"{len(self.cases)} node id{'s' if len(self.cases) > 1 else ''}")
        return " and ".join(parts)


def selection(expression: str | None, cases: list[str] | None, root: Path,
              shard: str | None) -> Selection:
    """The selection given on the command line, checked: each node id's file exists under
    `root`, and a shard is not chosen as well."""
    chosen = Selection((expression or "").strip(), tuple(cases or ()))
    if chosen and shard:
        raise RegressionError(f"--shard {shard} and {chosen.describe()} both choose cases; "
                              "use one: a shard in CI, -k or --case to run a few")
    for case in chosen.cases:
        path = case.split("::", 1)[0]
        if not (root / path).exists():
            raise RegressionError(
                f"--case {case}: there is no {path} in {root}. Give a node id as pytest "
                "prints it, relative to the project root (e.g. "
                "tests/regression/test_models.py::test_forward[vit]), or a test file.")
    return chosen
