"""The import graph keeps its layers: nothing below the launcher, the API and what records
references imports them, directly or through another module; the data types import only
what is below them, the store and the cores stand on no plugin, diagnosis or command line,
check mode's plugins import none of each other, nor record mode's, only gitcmd.py talks to
git, no import circle anywhere, and every name is imported from the module that defines it
(no re-export shims)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "regression"
TOP = ("regression.run.launch", "regression.run.api", "regression.run.entry",
       "regression.references")
"""What starts processes (the launcher, the API, what records references) and pytest's entry
point, which hands the recorder to the plugins: only the CLI, diagnosis and the entry stand
on them."""


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
CORES = ("regression.compare", "regression.config", "regression.environment",
         "regression.repository")
"""The packages of pure cores and leaves that every layer stands on."""
LOWER = [name for name in MODULES
         if name.startswith(("regression.plugin", "regression.store") + CORES)
         or (name.count(".") == 1 and name not in ("regression.tasks", "regression.__main__"))]


@pytest.mark.parametrize("name", LOWER)
def test_no_lower_module_imports_the_launcher_or_the_api(name: str) -> None:
    """Directly or through other modules: lazy imports count."""
    assert not {i for i in _reached(_graph(), name) if i.startswith(TOP)}


def _reached(graph: dict[str, set[str]], name: str) -> set[str]:
    """Every module `name` imports, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for other in graph[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    return seen


def test_the_reach_finder_follows_indirect_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"b"}, "d": set()}
    assert _reached(graph, "a") == {"b", "c"}
    assert _reached(graph, "d") == set()


CHECK_PLUGINS = ("regression.plugin.check", "regression.plugin.held_reports",
                 "regression.plugin.judge", "regression.plugin.end_of_run",
                 "regression.plugin.summary")
"""Check mode's plugins: each is handed the run's one state (plugin/state.py)."""


@pytest.mark.parametrize("name", CHECK_PLUGINS)
def test_check_modes_plugins_import_none_of_each_other(name: str) -> None:
    """Directly or through other modules: they share a state object, not each other."""
    others = set(CHECK_PLUGINS) - {name}
    assert not {i for i in _reached(_graph(), name) if i in others}


@pytest.mark.parametrize("name", ["regression.run.types", "regression.run.job",
                                  "regression.run.completion", "regression.run.handoff"])
def test_the_run_data_imports_nothing_above_it(name: str) -> None:
    above = ("regression.run.launch", "regression.run.api", "regression.run.entry",
             "regression.references", "regression.plugin", "regression.cli",
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
             "regression.references", "regression.run.entry")
    assert not {i for i in _imports(MODULES[name]) if i.startswith(above)}


@pytest.mark.parametrize("name", [n for n in MODULES if not n.startswith("regression.cli")
                                  and n not in ("regression.tasks", "regression.__main__")])
def test_only_the_entry_points_import_the_command_line(name: str) -> None:
    assert not {i for i in _imports(MODULES[name]) if i.startswith("regression.cli")}


@cache
def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, lazily or under TYPE_CHECKING too (read
    once: each test only looks)."""
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


RECORD_MODE = tuple(f"regression.plugin.{name}" for name in (
    "recording_mode", "recording_run", "kernel_settings", "subject_guard", "beside_check",
    "wanted_cases", "result_writer", "store_cases", "reproduce", "trace_case"))
"""Record mode's plugins: the module that registers them, their shared state, and one
module per concern."""


def test_no_import_circle_anywhere() -> None:
    """Lazy imports count: a circle is a circle whenever its modules load."""
    circles = _circles(_graph())
    assert circles == []


def test_record_mode_plugins_import_none_of_each_other_only_their_shared_state() -> None:
    graph = _graph()
    assert set(RECORD_MODE) <= set(MODULES)
    for name in RECORD_MODE[2:]:
        assert graph[name] & set(RECORD_MODE) <= {"regression.plugin.recording_run"}, name
    assert not graph["regression.plugin.recording_run"] & set(RECORD_MODE)
    assert not graph["regression.plugin.recording_mode"] & {"regression.plugin"}


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


ROOT = PACKAGE.parent
IMPORTERS = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                    *(ROOT / "bench").rglob("*.py"), ROOT / "tasks.py"])
"""Every file that imports the package: the package itself, its tests, the benchmarks and
this repository's tasks.py."""

REEXPORTED = {
    ("regression.tasks", "ns"): "the public import path: the line users write in their "
                                "tasks.py (README, docs/tasks.md; `torch-regression init` "
                                "writes it), which this repository's tasks.py uses too",
}
"""(module, name) that a module may import only to hand on, and why. Nothing else may."""

EXPORT_LISTS = {
    "regression": "the package's documented public API (RegressionError, Settings, "
                  "load_settings) for users; nothing in the project imports it from there",
    "regression.tasks": "the public import path of the tasks (see REEXPORTED)",
}
"""The modules that may keep an `__all__`, and why: a list of names to hand on is a shim."""


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """A module's statements, those under a top-level if/try (TYPE_CHECKING...) included."""
    found: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.If):
            todo[:0] = [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            todo[:0] = [*node.body, *node.orelse, *node.finalbody,
                        *(s for h in node.handlers for s in h.body)]
        else:
            found.append(node)
    return found


def _defined(path: Path) -> set[str]:
    """The names a module defines itself: def, class and assignment, not import."""
    names = set()
    for node in _top_level(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _borrowed(defined: dict[str, set[str]], path: Path, root: Path = ROOT) -> list[str]:
    """`module.name` for each `from regression.module import name` in `path` (lazy or not)
    where `name` is neither a submodule nor defined in that module, but imported there."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in MODULES):
            continue
        for alias in node.names:
            if (f"{node.module}.{alias.name}" not in MODULES
                    and alias.name not in defined[node.module]
                    and (node.module, alias.name) not in REEXPORTED):
                found.append(f"{path.relative_to(root)}:{node.lineno}: "
                             f"{node.module}.{alias.name}")
    return found


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    """No re-export shim: a name imported from a module of the package is defined there."""
    defined = {name: _defined(path) for name, path in MODULES.items()}
    assert [line for path in IMPORTERS for line in _borrowed(defined, path)] == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_lists_names_to_hand_on(name: str) -> None:
    """Neither `__all__` nor `import x as x` (the two ways to keep an unused import for
    others past the linter), but where EXPORT_LISTS says why."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    if name not in EXPORT_LISTS:
        assert "__all__" not in _defined(MODULES[name])
    assert [alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names if alias.asname == alias.name.rsplit(".", 1)[-1]] == []


def test_the_shim_finder_finds_a_shim(tmp_path: Path) -> None:
    shim = tmp_path / "user.py"
    shim.write_text("from regression.store.cache import CaseRecord, Entry\n"
                    "def f():\n    from regression.config.settings import find_config\n",
                    encoding="utf-8")
    defined = {name: _defined(path) for name, path in MODULES.items()}
    found = [line.rsplit(": ", 1)[1] for line in _borrowed(defined, shim, tmp_path)]
    assert found == ["regression.store.cache.CaseRecord", "regression.config.settings.find_config"]


def test_the_package_top_holds_at_most_twelve_modules() -> None:
    """Modules sized by concept live in packages named by concept; the top keeps the leaves."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
