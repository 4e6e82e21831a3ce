"""Tests of regression.importer: the subject is imported from the reference worktree only."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from regression.errors import ImportRedirectError, StrayImportError
from regression.importer import (
    SubjectRedirect,
    foreign_modules,
    install_redirect,
    module_locations,
    require_no_strays,
    stray_modules,
    verify_origins,
)

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
    with pytest.raises(ImportRedirectError, match="imported before the import redirect"):
        install_redirect([copies.name], copies.b, strict=True)
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
        require_no_strays(project, [project / "tests" / "regression"])


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
