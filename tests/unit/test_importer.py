"""Tests of regression.plugin.importer: the subject is imported from the reference worktree only."""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from regression.errors import ImportRedirectError, StrayImportError
from regression.plugin.importer import (
    SubjectRedirect,
    foreign_modules,
    install_redirect,
    module_locations,
    verify_origins,
)
from regression.environment.origins import stray_modules
from regression.plugin.strays import require_own_files
from regression.plugin.tree_watch import TreeWatch, stop_watching, watch_tree

SOURCE = "COPY = {copy!r}\nWHERE = __file__\n"


@dataclass
class Copies:
    """Two copies of one tiny package: `a` on sys.path (the candidate), `b` the reference."""

    name: str
    a: Path
    b: Path


def write_copy(root: Path, name: str, copy: str) -> None:
    package = root / name
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(SOURCE.format(copy=copy))
    (package / "models.py").write_text(SOURCE.format(copy=copy))
    (package / "sub" / "__init__.py").write_text(SOURCE.format(copy=copy))
    (package / "sub" / "deep.py").write_text(SOURCE.format(copy=copy))


def drop_modules(name: str) -> None:
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


@pytest.fixture
def copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Copies]:
    name = f"fakesubj_{uuid.uuid4().hex[:12]}"
    write_copy(tmp_path / "a", name, "a")
    write_copy(tmp_path / "b", name, "b")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    meta_path = list(sys.meta_path)
    yield Copies(name, (tmp_path / "a").resolve(), (tmp_path / "b").resolve())
    sys.meta_path[:] = meta_path
    drop_modules(name)
    importlib.invalidate_caches()


def test_without_redirect_the_candidate_on_sys_path_is_imported(copies: Copies) -> None:
    assert importlib.import_module(copies.name).COPY == "a"


def test_redirect_imports_package_and_submodules_from_the_reference(copies: Copies) -> None:
    install_redirect([copies.name], copies.b)
    package = importlib.import_module(copies.name)
    models = importlib.import_module(f"{copies.name}.models")
    deep = importlib.import_module(f"{copies.name}.sub.deep")
    assert (package.COPY, models.COPY, deep.COPY) == ("b", "b", "b")
    assert Path(deep.WHERE).resolve() == copies.b / copies.name / "sub" / "deep.py"


def test_redirect_is_first_on_meta_path(copies: Copies) -> None:
    finder = install_redirect([copies.name], copies.b)
    assert sys.meta_path[0] is finder
    assert isinstance(finder, SubjectRedirect)


def test_verify_origins_passes_after_redirected_imports(copies: Copies) -> None:
    install_redirect([copies.name], copies.b)
    importlib.import_module(f"{copies.name}.sub.deep")
    assert foreign_modules([copies.name], copies.b) == {}
    verify_origins([copies.name], copies.b)


def test_redirect_drops_a_subject_module_imported_before(copies: Copies) -> None:
    early = importlib.import_module(f"{copies.name}.models")
    assert early.COPY == "a"
    install_redirect([copies.name], copies.b)
    assert f"{copies.name}.models" not in sys.modules
    assert importlib.import_module(f"{copies.name}.models").COPY == "b"


def test_redirect_drops_a_module_inserted_by_hand(copies: Copies) -> None:
    sys.modules[copies.name] = ModuleType(copies.name)
    install_redirect([copies.name], copies.b)
    assert copies.name not in sys.modules


def test_redirect_leaves_other_packages_alone(copies: Copies) -> None:
    other = ModuleType(copies.name + "_other")
    sys.modules[other.__name__] = other
    try:
        finder = install_redirect([copies.name], copies.b)
        assert sys.modules[other.__name__] is other
        assert finder.find_spec("json", None) is None
    finally:
        del sys.modules[other.__name__]


def test_missing_subject_module_is_not_found_in_the_reference(copies: Copies) -> None:
    install_redirect([copies.name], copies.b)
    (copies.a / copies.name / "only_in_a.py").write_text("")
    with pytest.raises(ModuleNotFoundError, match="reference worktree"):
        importlib.import_module(f"{copies.name}.only_in_a")


def test_foreign_modules_reports_a_module_imported_from_elsewhere(copies: Copies) -> None:
    importlib.import_module(f"{copies.name}.models")
    foreign = foreign_modules([copies.name], copies.b)
    assert set(foreign) == {copies.name, f"{copies.name}.models"}
    assert [Path(p).resolve() for p in foreign[f"{copies.name}.models"]] == [
        copies.a / copies.name / "models.py"]


def test_foreign_modules_reports_a_module_without_a_file(copies: Copies) -> None:
    sys.modules[copies.name] = ModuleType(copies.name)
    assert foreign_modules([copies.name], copies.b) == {copies.name: ["<no file>"]}


def test_foreign_modules_reports_a_module_with_a_file_outside_the_root(
        copies: Copies, tmp_path: Path) -> None:
    module = ModuleType(f"{copies.name}.planted")
    module.__file__ = str(tmp_path / "elsewhere" / "planted.py")
    sys.modules[module.__name__] = module
    assert foreign_modules([copies.name], copies.b) == {
        module.__name__: [str(tmp_path / "elsewhere" / "planted.py")]}


def test_verify_origins_lists_every_foreign_module(copies: Copies) -> None:
    importlib.import_module(f"{copies.name}.models")
    with pytest.raises(ImportRedirectError) as info:
        verify_origins([copies.name], copies.b)
    message = str(info.value)
    assert f"outside the reference worktree {copies.b}" in message
    assert f"  {copies.name}: " in message
    assert f"  {copies.name}.models: " in message
    assert "models.py" in message


def test_module_locations_uses_file_then_path() -> None:
    with_file = ModuleType("m")
    with_file.__file__ = "/x/m.py"
    namespace = ModuleType("n")
    namespace.__path__ = ["/x/n", "/y/n"]
    assert module_locations(with_file) == ["/x/m.py"]
    assert module_locations(namespace) == ["/x/n", "/y/n"]
    assert module_locations(ModuleType("bare")) == []


def test_strict_redirect_refuses_a_subject_already_imported(copies: Copies) -> None:
    importlib.import_module(copies.name)
    with pytest.raises(ImportRedirectError, match="imported before the import redirect") as e:
        install_redirect([copies.name], copies.b, strict=True)
    assert "a pytest plugin, a .pth file or the project's tasks.py" in str(e.value)
    assert copies.name in sys.modules  # nothing was changed


def _import_file(path: Path) -> ModuleType:
    name = f"stray_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project folder whose modules are imported for the test and forgotten after."""
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("VALUE = 1\n")
    return path


def test_module_of_the_project_outside_everything_allowed_is_a_stray(project: Path) -> None:
    helper = _import_file(_touch(project / "zoohelp" / "__init__.py"))
    _import_file(_touch(project / "tests" / "regression" / "helpers.py"))
    _import_file(_touch(project / "tests" / "conftest.py"))
    _import_file(_touch(project / "tests" / "__init__.py"))
    stray = stray_modules(project, [project / "tests" / "regression"])
    assert stray == {helper.__name__: "zoohelp/__init__.py"}
    with pytest.raises(StrayImportError, match="zoohelp/__init__.py"):
        require_own_files(stray, {})


def test_harness_files_and_allowed_folders_are_no_strays(project: Path) -> None:
    inputs = _touch(project / "inputs.py")
    _import_file(inputs)
    _import_file(_touch(project / "worktree" / "subj.py"))
    assert stray_modules(project, [project / "worktree"], [inputs]) == {}
    assert list(stray_modules(project, [project / "worktree"]).values()) == ["inputs.py"]


def test_modules_outside_the_project_are_no_strays(project: Path, tmp_path_factory:
                                                   pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    _import_file(_touch(elsewhere / "other.py"))
    assert stray_modules(project, []) == {}


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[TreeWatch]:
    """A watch of a project with a subject, tests, a data folder and a cache, made active."""
    project = tmp_path / "project"
    for name in ("subj/__pycache__", "tests/data", "data", "cache", "x.egg-info"):
        (project / name).mkdir(parents=True)
    watch = TreeWatch(project, [project / "cache"], [project / "config.yaml"],
                      [project / "subj"], [project / "tests"])
    watch_tree(watch)
    try:
        yield watch
    finally:
        stop_watching()


def _seen(watch: TreeWatch, *names: str) -> None:
    for name in names:
        path = watch.project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("X = 1\n")
        watch.saw(str(path), "read")


def test_the_watch_refuses_the_subject_and_other_files_and_hashes_test_code(
        watched: TreeWatch) -> None:
    _seen(watched, "subj/scale.json", "subj/__pycache__/alt.cpython-311.pyc", "data/a.txt",
          "tests/models.py", "tests/data/in.json", "tests/test_a.py", "tests/conftest.py",
          "config.yaml", "cache/entry.json", "x.egg-info/PKG-INFO", "conftest.py")
    refused, helpers = watched.sorted_out([watched.project / "tests" / "test_a.py"])
    assert refused == {"subj/scale.json": "read; the subject's",
                       "subj/alt.py": "run; the subject's", "data/a.txt": "read"}
    assert helpers == [watched.project / "tests" / "data" / "in.json",
                       watched.project / "tests" / "models.py"]


def test_the_audit_hook_sees_every_way_to_read_or_run_a_file(watched: TreeWatch) -> None:
    project = watched.project
    for name in ("subj/a.py", "subj/b.py", "subj/c.py", "subj/d.json", "subj/e.bin"):
        (project / name).write_text("FACTOR = 1\n")
    spec = importlib.util.spec_from_file_location("other_name", project / "subj" / "a.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    runpy.run_path(str(project / "subj" / "b.py"))
    exec(open(project / "subj" / "c.py").read(), {})  # noqa: S102, SIM115
    (project / "subj" / "d.json").read_text()
    os.close(os.open(bytes(project / "subj" / "e.bin"), os.O_RDONLY))
    (project / "subj" / "written.txt").write_text("a write is no read")
    with open(project / "subj" / "written.txt", "w+") as stream:  # emptied: nothing read
        stream.write("x")
    refused, _ = watched.sorted_out([])
    assert refused == {"subj/a.py": "run; the subject's", "subj/b.py": "run; the subject's",
                       "subj/c.py": "run; the subject's", "subj/d.json": "read; the subject's",
                       "subj/e.bin": "read; the subject's"}


def test_a_relative_path_is_read_from_the_working_folder(
        watched: TreeWatch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (watched.project / "subj" / "d.json").write_text("{}")
    elsewhere = tmp_path / "worktree"
    (elsewhere / "subj").mkdir(parents=True)
    (elsewhere / "subj" / "d.json").write_text("{}")
    monkeypatch.chdir(elsewhere)
    Path("subj/d.json").read_text()
    assert watched.sorted_out([]) == ({}, [])
    monkeypatch.chdir(watched.project)
    Path("subj/d.json").read_text()
    assert watched.sorted_out([])[0] == {"subj/d.json": "read; the subject's"}


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[TreeWatch]:
    """A watch of a project and of its reference's worktree, whose subject `subj` (a
    package) and `one` (a module) are the code the key holds, made active."""
    project, worktree = tmp_path / "project", tmp_path / "worktree"
    for name in ("subj/__pycache__", "tests"):
        (project / name).mkdir(parents=True)
    for name, text in {"subj/__init__.py": "A = 1\n", "subj/__pycache__/m.cpython-311.pyc": "",
                       "subj/m.py": "", "subj/data/w.json": "{}", "one.py": "B = 1\n",
                       "data/scale.json": "{}", "helper.py": "C = 1\n", "setup.cfg": ""}.items():
        (worktree / name).parent.mkdir(parents=True, exist_ok=True)
        (worktree / name).write_text(text)
    watch = TreeWatch(project, [worktree], [], [project / "subj"], [project / "tests"],
                      worktree, [worktree / "subj", worktree / "one.py"])
    watch_tree(watch)
    try:
        yield watch
    finally:
        stop_watching()


def test_the_reference_s_files_outside_the_subject_s_code_are_named(
        reference: TreeWatch, monkeypatch: pytest.MonkeyPatch) -> None:
    assert reference.reference is not None
    monkeypatch.chdir(reference.reference)
    for name in ("subj/__init__.py", "subj/__pycache__/m.cpython-311.pyc", "subj/data/w.json",
                 "one.py", "data/scale.json", "setup.cfg"):
        Path(name).read_bytes()
    runpy.run_path("helper.py")
    assert reference.reference_reads() == {"data/scale.json": "read", "helper.py": "run",
                                           "setup.cfg": "read"}
    assert reference.sorted_out([]) == ({}, [])  # none is the working tree's


def test_a_file_of_the_reference_that_the_recording_wrote_is_its_own(
        reference: TreeWatch, monkeypatch: pytest.MonkeyPatch) -> None:
    assert reference.reference is not None
    monkeypatch.chdir(reference.reference)
    Path("data/made.json").write_text("{}")  # written after the watch began
    Path("data/made.json").read_text()
    Path("data/scale.json").read_text()
    assert reference.reference_reads() == {"data/scale.json": "read"}


def test_a_watch_without_a_reference_names_none_of_its_files(watched: TreeWatch,
                                                             tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text("{}")
    (tmp_path / "elsewhere.json").read_text()
    assert watched.reference_reads() == {}


def test_the_reference_s_files_are_refused_with_the_fix_for_each_kind() -> None:
    with pytest.raises(StrayImportError) as info:
        require_own_files({}, {"data/a.txt": "read"}, {"data/scale.json": "read",
                                                       "helper.py": "run"}, ("subj",))
    message = str(info.value)
    assert "  data/a.txt (read)\n" in message  # the working tree's, said first
    assert "these files of the reference were run, read or asked about while recording, " \
        "outside the subject's code" in message
    assert "  data/scale.json (read)\n  helper.py (run)\n" in message
    assert "Fix: code run from the reference outside the subject: add its package" in message
    assert "Fix: a data file: move it into a subject package (subj)" in message
    assert message.endswith("Nothing was stored.")
    with pytest.raises(StrayImportError, match="helper.py") as only_code:
        require_own_files({}, {}, {"helper.py": "run"}, ("subj",))
    assert "a data file" not in str(only_code.value)


def test_safetensors_files_and_mapped_files_are_seen(watched: TreeWatch,
                                                     tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    weights = watched.project / "subj" / "w.safetensors"
    save_file({"w": torch.ones(2)}, str(weights))
    load_file(str(weights))  # opened in Rust: no audit event
    maps = tmp_path / "maps"
    mapped = watched.project / "subj" / "m.bin"
    mapped.write_bytes(b"0")
    maps.write_text(f"7f00-7f01 r--s 00000000 08:01 42   {mapped}\n"
                    "7f01-7f02 r-xp 00000000 08:01 43   /usr/lib/libc.so.6\n")
    watched.saw_mappings(maps)
    assert watched.sorted_out([])[0] == {"subj/m.bin": "read; the subject's",
                                         "subj/w.safetensors": "read; the subject's"}


def test_an_idle_watch_sees_nothing(watched: TreeWatch) -> None:
    stop_watching()
    (watched.project / "subj" / "d.json").write_text("{}")
    (watched.project / "subj" / "d.json").read_text()
    assert watched.seen == {}


def test_one_message_names_stray_modules_and_then_the_other_files() -> None:
    with pytest.raises(StrayImportError) as info:
        require_own_files({"inner": "subj/inner.py"},
                          {"subj/inner.py": "run; the subject's", "subj/d.json": "read"})
    message = str(info.value)
    assert "  inner (subj/inner.py)\n" in message
    assert "  subj/d.json (read)\n" in message
    assert "subj/inner.py (run" not in message  # named once, as a module
    assert message.count("Nothing was stored.") == 1 and message.endswith("Nothing was stored.")
    require_own_files({}, {})  # nothing to say: no error


def _refusal(stray: dict[str, str], refused: dict[str, str]) -> list[str]:
    """The lines that say what to do, of the refusal of these modules and files."""
    with pytest.raises(StrayImportError) as info:
        require_own_files(stray, refused)
    return [line for line in str(info.value).splitlines() if line.startswith("Fix: ")]


@pytest.mark.parametrize(("refused", "fix"), [
    ({"assets/inputs.json": "read"},
     "Fix: a data file the tests read, outside the test folders: list it in config.yaml's "
     "`harness`"),
    ({"requirements.txt": "read"}, "Fix: the project's metadata: to know the subject's own "
                                   "(its version, its requirements), install the subject "
                                   "(`pip install -e .`)"),
    ({"requirements/base.txt": "read"}, "Fix: the project's metadata"),
    ({"setup.py": "run"}, "Fix: the project's metadata"),
    ({"subj/scale.json": "read; the subject's"},
     "Fix: the subject's files, reached by a path into your working tree: import the subject "
     "by its package name, and read its files relative to its module's __file__"),
    ({"tools/make.py": "run"}, "Fix: code run by its path, outside the subject: import it by "
                               "its package name, and add that package to config.yaml's "
                               "`subject.packages`"),
])
def test_a_refused_file_is_told_the_fix_for_its_kind_alone(refused: dict[str, str],
                                                           fix: str) -> None:
    (line,) = _refusal({}, refused)
    assert line.startswith(fix), line


def test_a_module_beside_the_subject_is_told_to_join_the_subject_packages() -> None:
    (line,) = _refusal({"helpers": "helpers.py", "tools.gen": "tools/gen.py"},
                       {"helpers.py": "run", "tools/gen.py": "run"})
    assert line.startswith("Fix: a module beside the subject is code under test: add helpers, "
                           "tools to config.yaml's `subject.packages`"), line


def test_a_subject_module_on_sys_path_is_told_to_be_imported_by_its_package_name() -> None:
    (line,) = _refusal({"inner": "subj/inner.py"}, {"subj/inner.py": "run; the subject's"})
    assert line == ("Fix: the subject's own modules (subj/inner.py), imported from a folder "
                    "put on sys.path: import them by their package name.")


def test_each_kind_of_file_is_told_its_fix_once() -> None:
    lines = _refusal({"helpers": "helpers.py"},
                     {"a.json": "read", "b.json": "read", "requirements.txt": "read"})
    assert [line.split(":")[1] for line in lines] == [
        " a module beside the subject is code under test", " the project's metadata",
        " a data file the tests read, outside the test folders"]


def test_a_test_module_imported_by_a_statement_is_a_helper(watched: TreeWatch,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    tests = watched.project / "tests"
    name = f"test_shared_{uuid.uuid4().hex[:8]}"
    (tests / f"{name}.py").write_text("def make():\n    return 1\n")
    (tests / "test_user.py").write_text("")
    monkeypatch.syspath_prepend(str(tests))
    try:
        importlib.import_module(name)  # as pytest imports a test module: no statement
        modules = [tests / f"{name}.py", tests / "test_user.py"]
        assert watched.sorted_out(modules) == ({}, [])
        exec(f"from {name} import make", {})  # noqa: S102 - another module's statement
        assert watched.sorted_out(modules) == ({}, [tests / f"{name}.py"])
    finally:
        drop_modules(name)


def test_the_deepest_folder_decides_between_subject_and_tests(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "subj" / "tests").mkdir(parents=True)
    inside = TreeWatch(project, [], [], [project / "subj"], [project / "subj" / "tests"])
    everywhere = TreeWatch(project, [], [], [project / "subj"], [project])
    for watch in (inside, everywhere):
        for name in ("subj/tests/helper.py", "subj/data.json"):
            (project / name).write_text("")
            watch.saw(str(project / name), "read")
    assert inside.sorted_out([]) == ({"subj/data.json": "read; the subject's"},
                                     [project / "subj" / "tests" / "helper.py"])
    assert everywhere.sorted_out([]) == ({"subj/data.json": "read; the subject's",
                                          "subj/tests/helper.py": "run; the subject's"}, [])


def test_the_package_excused_from_the_stray_checks_is_all_of_regression() -> None:
    """Not only the folder of the module that names it: every layer of the package is ours."""
    import regression
    from regression.environment.origins import THIS_PACKAGE

    assert THIS_PACKAGE == Path(regression.__file__).resolve().parent
