"""The import graph keeps its layers: nothing below the launcher and the API imports them,
the data types import only what is below them, the store and the cores stand on no plugin,
diagnosis or command line, and only gitcmd.py talks to git."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "regression"
TOP = ("regression.run.launch", "regression.run.api")
"""The launcher and the API: only the CLI, diagnosis and recording stand on them."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, lazily or not."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


MODULES = _modules()
LOWER = [name for name in MODULES if name.startswith(("regression.plugin", "regression.store"))
         or (name.count(".") == 1 and name not in ("regression.tasks", "regression.__main__"))]


@pytest.mark.parametrize("name", LOWER)
def test_no_lower_module_imports_the_launcher_or_the_api(name: str) -> None:
    assert not {i for i in _imports(MODULES[name]) if i.startswith(TOP)}


@pytest.mark.parametrize("name", ["regression.run.types", "regression.run.job",
                                  "regression.run.completion"])
def test_the_run_data_imports_nothing_above_it(name: str) -> None:
    above = ("regression.run.launch", "regression.run.api", "regression.run.generation",
             "regression.run.underway", "regression.plugin", "regression.cli",
             "regression.diagnose")
    assert not {i for i in _imports(MODULES[name]) if i.startswith(above)}


def test_the_outcomes_import_nothing_of_the_package() -> None:
    """The plugin, the run's data and the reports all stand on them."""
    assert not {i for i in _imports(MODULES["regression.outcomes"]) if i.startswith("regression")}


def test_the_report_imports_only_data_types_of_a_run() -> None:
    ours = {i for i in _imports(MODULES["regression.report"]) if i.startswith("regression.run")}
    assert ours <= {"regression.run.types", "regression.run.types.Generation"}


def test_gitpython_is_imported_nowhere_git_runs_through_revision() -> None:
    for name, path in MODULES.items():
        imports = _imports(path)
        assert "git" not in imports and not any(i.startswith("git.") for i in imports), name


@pytest.mark.parametrize("name", [n for n in LOWER if not n.startswith("regression.plugin")])
def test_store_and_the_cores_stand_on_no_pytest_plugin_diagnosis_or_command_line(name: str) -> None:
    """The plugin may use the store and the cores, never the other way round."""
    above = ("regression.plugin", "regression.diagnose", "regression.cli",
             "regression.run.generation", "regression.run.underway")
    assert not {i for i in _imports(MODULES[name]) if i.startswith(above)}


@pytest.mark.parametrize("name", [n for n in MODULES if not n.startswith("regression.cli")
                                  and n not in ("regression.tasks", "regression.__main__")])
def test_only_the_entry_points_import_the_command_line(name: str) -> None:
    assert not {i for i in _imports(MODULES[name]) if i.startswith("regression.cli")}


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, lazily or under TYPE_CHECKING too."""
    return {name: {i for i in _imports(path) if i in MODULES and i != name}
            for name, path in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of two or more (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


KNOWN_CIRCLES = ("regression.plugin", "regression.cli")
"""Where circles are left to the House II redesign (one state object per run, one plugin
per concern handed in from above): the plugins of a mode, and the task modules."""


def test_no_import_circle_outside_the_plugins_and_the_tasks() -> None:
    """Lazy imports count: a circle is a circle whenever its modules load."""
    circles = [c for c in _circles(_graph())
               if not all(m.startswith(KNOWN_CIRCLES) for m in c)]
    assert circles == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
