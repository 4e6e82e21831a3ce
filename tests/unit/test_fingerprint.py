"""Tests of regression.environment.fingerprint: the environment parts, the key and file digests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from regression.config.settings import Determinism, Settings
from regression.environment.fingerprint import (
    KERNEL_VARIABLES,
    _math_libraries,
    code_part,
    differing_parts,
    environment_parts,
    installed_code,
    files_digest,
    key_of,
)
from regression.repository.gitcmd import Repository
from regression.repository.revision import subject_objects
from regression.run.types import subject_code

PART_NAMES = ["format", "subject code", "python", "torch", "packages", "platform", "subject", "cpu",
              "math libraries", "kernel variables", "threads", "device", "determinism"]

ONEAPI_CONFIG = """\
PyTorch built with:
  - GCC 13.3
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - OpenMP 201511 (a.k.a. OpenMP 4.5)
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, USE_MKL=ON,
"""

OPENBLAS_CONFIG = """\
PyTorch built with:
  - GCC 11.2
  - OpenBLAS 0.3.27
  - oneDNN v3.5.3 (Git Hash 66f0cb9eb66affd2da3bf5f8d897376f04aae6af)
  - Build settings: BLAS_INFO=open, LAPACK_INFO=open, USE_MKL=OFF,
"""


def settings(tmp_path: Path, **changes: object) -> Settings:
    values: dict[str, object] = {"path": tmp_path / "config.yaml", "reference": "HEAD",
                                 "subject_packages": ("zoo",)}
    values.update(changes)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def clean_kernel_variables(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in KERNEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_environment_parts_has_every_expected_part(tmp_path: Path) -> None:
    parts = environment_parts(settings(tmp_path), "a" * 40)
    assert list(parts) == PART_NAMES
    assert all(isinstance(value, str) and value for value in parts.values())


def test_environment_parts_reflect_the_settings(tmp_path: Path) -> None:
    chosen = settings(tmp_path, determinism=Determinism(seed=5, threads=3,
                                                        deterministic_algorithms=False))
    parts = environment_parts(chosen, "zoo tree " + "f" * 40)
    assert parts["subject code"] == "zoo tree " + "f" * 40
    assert parts["threads"] == "3"
    assert parts["device"] == "cpu"
    assert parts["determinism"] == "seed=5 deterministic_algorithms=False tf32=off"


def _pytest_part() -> str:
    """pytest as the packages part names it: its version and installed files' digest."""
    from importlib.metadata import distribution

    found = distribution("pytest")
    assert installed_code(found).startswith("files ")
    return f"pytest {found.version} ({installed_code(found)})"


PYTEST_PART = _pytest_part()


def test_packages_part_lists_versions_and_missing_packages(tmp_path: Path) -> None:
    parts = environment_parts(settings(tmp_path, fingerprint_packages=(
        "pytest", "no_such_package_xyz")), "a")
    assert parts["packages"] == f"no-such-package-xyz <not installed>; {PYTEST_PART}"
    assert environment_parts(settings(tmp_path), "a")["packages"] == "none"


def test_environment_parts_are_stable(tmp_path: Path) -> None:
    assert environment_parts(settings(tmp_path), "a") == environment_parts(settings(tmp_path), "a")


@pytest.mark.parametrize("variable", ["ATEN_CPU_CAPABILITY", "MKL_CBWR"])
def test_kernel_variable_changes_the_kernel_variables_part(
        tmp_path: Path, clean_kernel_variables: pytest.MonkeyPatch, variable: str) -> None:
    before = environment_parts(settings(tmp_path), "a")
    clean_kernel_variables.setenv(variable, "AVX2")
    after = environment_parts(settings(tmp_path), "a")
    assert before["kernel variables"] == "none"
    assert after["kernel variables"] == f"{variable}=AVX2"
    assert differing_parts(before, after) == [
        f"kernel variables: recorded 'none', now '{variable}=AVX2'"]


def test_unrelated_variable_does_not_change_the_parts(
        tmp_path: Path, clean_kernel_variables: pytest.MonkeyPatch) -> None:
    before = environment_parts(settings(tmp_path), "a")
    clean_kernel_variables.setenv("SOME_UNRELATED_VARIABLE", "1")
    assert environment_parts(settings(tmp_path), "a") == before


def test_kernel_variables_are_listed_in_a_fixed_order(
        tmp_path: Path, clean_kernel_variables: pytest.MonkeyPatch) -> None:
    clean_kernel_variables.setenv("MKL_CBWR", "COMPATIBLE")
    clean_kernel_variables.setenv("ATEN_CPU_CAPABILITY", "default")
    parts = environment_parts(settings(tmp_path), "a")
    assert parts["kernel variables"] == "ATEN_CPU_CAPABILITY=default; MKL_CBWR=COMPATIBLE"


BASE = {name: f"value of {name}" for name in PART_NAMES}


@pytest.mark.parametrize("name", PART_NAMES)
def test_key_changes_when_any_single_part_changes(name: str) -> None:
    assert key_of({**BASE, name: BASE[name] + "!"}) != key_of(BASE)


@pytest.mark.parametrize("name", PART_NAMES)
def test_differing_parts_names_exactly_the_changed_part(name: str) -> None:
    changed = {**BASE, name: "new"}
    assert differing_parts(BASE, changed) == [
        f"{name}: recorded {BASE[name]!r}, now 'new'"]


def test_key_ignores_the_order_of_parts() -> None:
    assert key_of(dict(reversed(BASE.items()))) == key_of(BASE)


def test_key_is_a_hex_digest() -> None:
    key = key_of(BASE)
    assert len(key) == 32
    int(key, 16)


def test_differing_parts_reports_absent_parts_on_both_sides() -> None:
    lines = differing_parts({"old": "1", "same": "x"}, {"same": "x", "new": "2"})
    assert lines == ["new: recorded '<absent>', now '2'", "old: recorded '1', now '<absent>'"]


def test_differing_parts_of_equal_mappings_is_empty() -> None:
    assert differing_parts(BASE, dict(BASE)) == []


def make_files(root: Path) -> list[Path]:
    (root / "sub").mkdir(parents=True, exist_ok=True)
    files = [root / "test_a.py", root / "sub" / "conftest.py"]
    files[0].write_text("def test(): pass\n")
    files[1].write_text("import pytest\n")
    return files


def test_files_digest_is_stable_and_ignores_order_and_duplicates(tmp_path: Path) -> None:
    files = make_files(tmp_path)
    assert files_digest(tmp_path, files) == files_digest(tmp_path, [*reversed(files), files[0]])


def test_files_digest_changes_with_content(tmp_path: Path) -> None:
    files = make_files(tmp_path)
    before = files_digest(tmp_path, files)
    files[1].write_text("import pytest  \n")
    assert files_digest(tmp_path, files) != before


def test_files_digest_changes_with_file_name(tmp_path: Path) -> None:
    files = make_files(tmp_path)
    before = files_digest(tmp_path, files)
    renamed = files[0].rename(tmp_path / "test_b.py")
    assert files_digest(tmp_path, [renamed, files[1]]) != before


def test_files_digest_does_not_depend_on_where_the_root_is(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    assert files_digest(one, make_files(one)) == files_digest(two, make_files(two))


def test_files_digest_separates_name_from_content(tmp_path: Path) -> None:
    (tmp_path / "ab").write_text("c")
    (tmp_path / "a").write_text("bc")
    assert files_digest(tmp_path, [tmp_path / "ab"]) != files_digest(tmp_path, [tmp_path / "a"])


def test_files_digest_marks_missing_files(tmp_path: Path) -> None:
    files = make_files(tmp_path)
    with_missing = files_digest(tmp_path, [*files, tmp_path / "gone.py"])
    assert with_missing != files_digest(tmp_path, files)
    (tmp_path / "gone.py").write_text("")
    assert files_digest(tmp_path, [*files, tmp_path / "gone.py"]) != with_missing


def test_math_libraries_of_an_mkl_build() -> None:
    text = _math_libraries(ONEAPI_CONFIG)
    assert text.startswith("BLAS mkl; LAPACK mkl; MKL 2024.2")
    assert text.endswith("; oneDNN v3.12.0")


def test_math_libraries_of_an_openblas_build() -> None:
    assert _math_libraries(OPENBLAS_CONFIG) == \
        "BLAS open; LAPACK open; oneDNN v3.5.3; OpenBLAS 0.3.27"


def test_math_libraries_change_with_the_onednn_version() -> None:
    assert _math_libraries(ONEAPI_CONFIG) != \
        _math_libraries(ONEAPI_CONFIG.replace("v3.12.0", "v3.12.1"))


def test_math_libraries_of_an_unknown_build_is_none() -> None:
    assert _math_libraries("PyTorch built with:\n  - GCC 9\n") == "none"


def test_the_driver_version_is_read_from_either_kind_of_kernel_module() -> None:
    from regression.environment.fingerprint import driver_version_in
    proprietary = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 22 "
                   "2025\nGCC version:  gcc version 12.2.0")
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release"
    assert driver_version_in(proprietary) == "570.86.15"
    assert driver_version_in(open_module) == "580.65.06"
    assert driver_version_in("") == "unknown"


def test_aloaded_library_is_found_by_its_name_in_this_process() -> None:
    from regression.environment.fingerprint import loaded_library
    assert "libpython" in loaded_library("libpython") or "libc.so" in loaded_library("libc.so")
    assert loaded_library("libno-such-library.so") == ""


SUBJECT_PYPROJECT = """\
[project]
name = "zoo"
dependencies = ["pytest>=7", "Not_Installed_xyz", "torch>=2"]

[project.optional-dependencies]
extra = ["tabulate"]
"""


def test_the_key_holds_the_subject_s_declared_dependencies(tmp_path: Path) -> None:
    from regression.environment.fingerprint import key_packages, package_lines

    (tmp_path / "pyproject.toml").write_text(SUBJECT_PYPROJECT)
    chosen = settings(tmp_path)
    assert [(p.name, p.why) for p in key_packages(chosen)] == [
        ("not-installed-xyz", "declared by pyproject.toml"),
        ("pytest", "declared by pyproject.toml")]  # not torch (its own part), not extras
    parts = environment_parts(chosen, "a")
    assert parts["packages"] == f"not-installed-xyz <not installed>; {PYTEST_PART}"
    assert "  the subject's dependencies: read from zoo's pyproject.toml/setup.cfg (it is not " \
           "installed)" in package_lines(chosen)


def test_fingerprint_packages_add_to_the_dependencies_and_exclusions_remove_them(
        tmp_path: Path) -> None:
    from regression.environment.fingerprint import key_packages, package_lines

    (tmp_path / "pyproject.toml").write_text(SUBJECT_PYPROJECT)
    chosen = settings(tmp_path, fingerprint_packages=("numpy",),
                      fingerprint_exclude=("not_installed.XYZ",))
    assert [(p.name, p.why) for p in key_packages(chosen)] == [
        ("numpy", "config.yaml's fingerprint.packages"),
        ("pytest", "declared by pyproject.toml")]
    assert package_lines(chosen)[-1] == ("  left out: torch (a part of its own); by "
                                         "fingerprint.exclude_packages: not_installed.XYZ")


def test_a_project_file_of_another_project_is_not_the_subject_s(tmp_path: Path) -> None:
    from regression.environment.fingerprint import key_packages, package_lines

    (tmp_path / "pyproject.toml").write_text(SUBJECT_PYPROJECT.replace('"zoo"', '"tooling"'))
    assert key_packages(settings(tmp_path)) == []
    assert environment_parts(settings(tmp_path), "a")["packages"] == "none"
    assert package_lines(settings(tmp_path))[1:3] == [
        "  none", f"  the subject's dependencies: none read: zoo is not installed, and "
                  f"{tmp_path.name}'s pyproject.toml/setup.cfg names the project 'tooling'"]


def test_a_runtime_requirement_file_adds_to_the_key_and_a_development_one_does_not(
        tmp_path: Path) -> None:
    """timm's layout: pyproject.toml names the subject, numpy is only in requirements.txt."""
    from regression.environment.fingerprint import key_packages, package_lines

    (tmp_path / "pyproject.toml").write_text(SUBJECT_PYPROJECT)
    (tmp_path / "requirements.txt").write_text("Pytest\nnumpy>=1.20\n")
    (tmp_path / "requirements-dev.txt").write_text("tabulate\n")
    chosen = settings(tmp_path)
    assert [(p.name, p.why) for p in key_packages(chosen)] == [
        ("not-installed-xyz", "declared by pyproject.toml"),
        ("numpy", "declared by requirements.txt"),
        ("pytest", "declared by pyproject.toml")]  # declared twice: named once, first place
    assert "  the subject's dependencies: read from zoo's pyproject.toml/setup.cfg (it is not " \
           "installed), requirements.txt" in package_lines(chosen)


def test_requirement_files_count_when_the_project_files_are_another_project_s(
        tmp_path: Path) -> None:
    from regression.environment.fingerprint import key_packages, package_lines

    (tmp_path / "pyproject.toml").write_text(SUBJECT_PYPROJECT.replace('"zoo"', '"tooling"'))
    (tmp_path / "requirements.txt").write_text("numpy\n")
    assert [(p.name, p.why) for p in key_packages(settings(tmp_path))] == [
        ("numpy", "declared by requirements.txt")]
    assert package_lines(settings(tmp_path))[2] == (
        "  the subject's dependencies: read from requirements.txt (not from the project's "
        f"files: zoo is not installed, and {tmp_path.name}'s pyproject.toml/setup.cfg names the "
        "project 'tooling')")


def test_a_package_has_one_spelling_wherever_it_was_named(tmp_path: Path) -> None:
    from regression.environment.fingerprint import key_packages

    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "zoo"\ndependencies = ["huggingface-hub", "Py_YAML"]\n')
    chosen = settings(tmp_path, fingerprint_packages=("huggingface_hub", "PY.yaml"))
    assert [p.name for p in key_packages(chosen)] == ["huggingface-hub", "py-yaml"]
    assert environment_parts(chosen, "a")["packages"].startswith("huggingface-hub ")


def test_given_packages_are_the_key_s_and_the_project_s_files_are_not_read(
        tmp_path: Path) -> None:
    """What a recording does: the names come from its job, whatever the files say now."""
    from regression.environment.fingerprint import packages_in

    (tmp_path / "requirements.txt").write_text("numpy\n")
    parts = environment_parts(settings(tmp_path), "a")
    assert packages_in(parts) == ["numpy"]
    (tmp_path / "requirements.txt").write_text("pytest\n")  # unread when the names are given
    assert environment_parts(settings(tmp_path), "a", packages_in(parts)) == parts
    assert environment_parts(settings(tmp_path), "a") != parts
    assert packages_in({"packages": "none"}) == [] and packages_in({}) == []
    assert packages_in({"packages": "a-b 1.0; c <not installed>"}) == ["a-b", "c"]


# the subject's code: its git objects at the reference


def git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """A real repository: a package `subj`, a module `one.py` and a README under `src`."""
    top = tmp_path / "repo"
    for name, text in {"src/subj/__init__.py": "A = 1\n", "src/one.py": "B = 2\n",
                       "src/README.md": "about\n", "docs/index.md": "docs\n"}.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)
    git(tmp_path, "init", "-q", "-b", "main", str(top))
    for key, value in (("user.email", "t@example.com"), ("user.name", "T"),
                       ("commit.gpgsign", "false")):
        git(top, "config", key, value)
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "first")
    return top


def objects(top: Path, folder: str, packages: tuple[str, ...]) -> list[tuple[str, str, str]]:
    repo = Repository(str(top), str(top / ".git"))
    return subject_objects(repo, git(top, "rev-parse", "HEAD"), folder, packages)


def test_a_package_is_its_folder_s_tree_and_a_module_its_file_s_blob(history: Path) -> None:
    assert objects(history, "src", ("subj", "one")) == [
        ("src/subj", "tree", git(history, "rev-parse", "HEAD:src/subj")),
        ("src/one.py", "blob", git(history, "rev-parse", "HEAD:src/one.py"))]


def test_what_git_holds_no_package_of_is_the_whole_subject_folder(history: Path) -> None:
    """An extension module, or a package the commit lacks: the key holds the folder the
    import searches, once, so nothing there is shared by commits that differ in it."""
    folder = ("src", "tree", git(history, "rev-parse", "HEAD:src"))
    assert objects(history, "src", ("native", "absent")) == [folder]
    assert objects(history, "", ("subj",)) == [(".", "tree", git(history, "rev-parse",
                                                                 "HEAD^{tree}"))]
    assert objects(history, "lost", ("subj",)) == [("lost", "missing", "")]


def test_a_commit_outside_the_subject_keeps_its_code_and_one_inside_changes_it(
        history: Path) -> None:
    first = code_part(objects(history, "src", ("subj",)))
    for name, text in (("docs/index.md", "more docs\n"), ("src/README.md", "more\n")):
        (history / name).write_text(text)
        git(history, "commit", "-q", "-am", f"edit {name}")
        assert code_part(objects(history, "src", ("subj",))) == first
    (history / "src/subj/__init__.py").write_text("A = 2\n")
    git(history, "commit", "-q", "-am", "the subject changes")
    assert code_part(objects(history, "src", ("subj",))) != first


def test_the_code_part_names_each_path_kind_and_object() -> None:
    assert code_part([("src/subj", "tree", "a" * 40), ("one.py", "blob", "b" * 40),
                      ("lost", "missing", "")]) == \
        f"src/subj tree {'a' * 40}; one.py blob {'b' * 40}; lost missing"


def test_a_project_in_a_subfolder_looks_up_its_subject_from_the_top(history: Path) -> None:
    project = history / "src"
    (project / "config.yaml").write_text("")
    chosen = settings(project, subject_packages=("subj",))
    repo = Repository(str(history), str(history / ".git"))
    sha = git(history, "rev-parse", "HEAD")
    assert subject_code(chosen, repo, sha) == \
        f"src/subj tree {git(history, 'rev-parse', 'HEAD:src/subj')}"
