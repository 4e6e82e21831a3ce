"""Tests of regression.environment.dependencies: what a project declares it needs, from its
own files."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest

from regression.environment.dependencies import Requirement, declared, file_requirements, \
    is_runtime, parse, project_name
from regression.environment.fingerprint import installed_code

PYPROJECT = """\
[project]
name = "Vit_Lib"
dependencies = ["einops>=0.7", "torch >= 2.0, <3", "torchvision; platform_system != 'Darwin'"]

[project.optional-dependencies]
audio = ["torchaudio==2.13.0"]
"""

SETUP_CFG = """\
[metadata]
name = cfg-lib

[options]
install_requires =
    numpy>=1.26
    torchvision>=0.15

[options.extras_require]
dev = pytest
"""

SETUP_PY = """\
from setuptools import setup

setup(name="vit-pytorch", install_requires=["einops>=0.7.0", "torch>=1.10", 'torchvision'])
"""


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("einops", ("einops", "")),
        ("Pillow>=9,<11", ("pillow", ">=9,<11")),
        ("huggingface_hub[cli] >= 0.20 ; python_version >= '3.9'", ("huggingface-hub", ">=0.20")),
        ("torch==2.3.0+cpu  # the CPU build", ("torch", "==2.3.0+cpu")),
        ("zope.interface~=6.0", ("zope-interface", "~=6.0")),
        ('torch>=2"; echo ${{ github.token }}', ("torch", "")),  # no quote, $ or { passes
        ("torch>=$(whoami)", ("torch", "")),
    ],
)
def test_a_requirement_line_gives_its_normalised_name_and_a_plain_specifier(
        line: str, expected: tuple[str, str]) -> None:
    found = parse(line, "x")
    assert found is not None and (found.name, found.spec) == expected


@pytest.mark.parametrize("line", ["", "# a comment", "-r other.txt", "-e .", "--index-url x",
                                  "https://example.com/pkg.whl", "./local/folder"])
def test_a_line_that_names_no_package_is_skipped(line: str) -> None:
    assert parse(line, "x") is None


def test_an_extra_marker_makes_a_requirement_optional() -> None:
    found = parse('torchaudio ; extra == "audio"', "x")
    assert found == Requirement("torchaudio", "", "x", optional=True)


def test_pyproject_dependencies_and_optional_groups_are_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    found = declared(tmp_path)
    assert [(r.name, r.spec, r.optional) for r in found] == [
        ("einops", ">=0.7", False), ("torch", ">=2.0,<3", False), ("torchvision", "", False),
        ("torchaudio", "==2.13.0", True)]
    assert {r.source for r in found} == {"pyproject.toml"}
    assert project_name(tmp_path) == "vit-lib"


def test_setup_cfg_install_requires_and_extras_are_read(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text(SETUP_CFG)
    found = declared(tmp_path)
    assert [(r.name, r.spec, r.optional) for r in found] == [
        ("numpy", ">=1.26", False), ("torchvision", ">=0.15", False), ("pytest", "", True)]
    assert project_name(tmp_path) == "cfg-lib"


def test_setup_py_gives_the_torch_packages_it_names(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SETUP_PY)
    assert [(r.name, r.spec) for r in declared(tmp_path)] == [("torch", ">=1.10"),
                                                              ("torchvision", "")]


def test_requirement_files_at_the_top_and_in_a_requirements_folder_are_read(
        tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("-r requirements/base.txt\ntorchvision==0.18\n")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "base.txt").write_text("# base\ntorch==2.3.0\n")
    found = declared(tmp_path)
    assert [(r.name, r.spec, r.source) for r in found] == [
        ("torchvision", "==0.18", "requirements.txt"),
        ("torch", "==2.3.0", "requirements/base.txt")]


@pytest.mark.parametrize("name", ["pyproject.toml", "setup.cfg"])
def test_a_broken_project_file_declares_nothing_and_raises_nothing(tmp_path: Path,
                                                                   name: str) -> None:
    (tmp_path / name).write_text("[project\nname = = 'x'\n")
    assert declared(tmp_path) == [] and project_name(tmp_path) == ""


@pytest.mark.parametrize(("name", "runtime"), [
    ("requirements.txt", True), ("requirements-cuda.txt", True), ("requirements/base.txt", True),
    ("requirements/optional.txt", True), ("requirements-dev.txt", False),
    ("requirements_test.txt", False), ("requirements.docs.txt", False),
    ("requirements/ci.txt", False), ("requirements/lint.txt", False),
    ("requirements/requirements-testing.txt", False), ("requirements-Dev.txt", False),
    ("requirements-typing.txt", False), ("requirements-benchmark.txt", False),
])
def test_a_requirement_file_is_the_runtime_s_unless_its_name_says_otherwise(
        name: str, runtime: bool) -> None:
    assert is_runtime(Path(name)) is runtime


def test_runtime_requirements_leave_out_development_files(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("numpy>=1.24\nhuggingface_hub\n")
    (tmp_path / "requirements-dev.txt").write_text("pytest\n")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "docs.txt").write_text("sphinx\n")
    (tmp_path / "requirements" / "base.txt").write_text("einops\n")
    assert [(r.name, r.source) for r in file_requirements(tmp_path, runtime_only=True)] == [
        ("numpy", "requirements.txt"), ("huggingface-hub", "requirements.txt"),
        ("einops", "requirements/base.txt")]


def installed(tmp_path: Path, record: str, direct_url: str | None = None
              ) -> metadata.PathDistribution:
    """A distribution as pip leaves it in site-packages: its dist-info folder."""
    info = tmp_path / "site" / "lib-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lib\nVersion: 1.0\n")
    (info / "RECORD").write_text(record)
    if direct_url is not None:
        (info / "direct_url.json").write_text(direct_url)
    return metadata.PathDistribution(info)


RECORD = """\
lib/__init__.py,sha256=AAAA,10
lib/__pycache__/__init__.cpython-311.pyc,,
lib-1.0.dist-info/INSTALLER,sha256=pip0,4
lib-1.0.dist-info/RECORD,,
"""


def test_installed_code_is_the_digest_of_the_files_pip_hashed_not_of_the_installer(
        tmp_path: Path) -> None:
    found = installed_code(installed(tmp_path / "a", RECORD))
    assert found.startswith("files ")
    by_uv = RECORD.replace("sha256=pip0,4", "sha256=uv00,3")  # another installer: same code
    assert installed_code(installed(tmp_path / "b", by_uv)) == found
    rebuilt = RECORD.replace("sha256=AAAA", "sha256=BBBB")  # same version, other bytes
    assert installed_code(installed(tmp_path / "c", rebuilt)) != found
    assert installed_code(installed(tmp_path / "d", "lib-1.0.dist-info/RECORD,,\n")) == ""


def test_an_editable_install_is_named_by_its_source_files(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "lib/build").mkdir(parents=True)
    (source / "lib/__init__.py").write_text("SCALE = 1\n")
    (source / "lib/config.json").write_text('{"width": 4}')
    (source / "lib/build/__init__.py").write_text("")  # a subpackage named build
    (source / ".venv").mkdir()
    (source / ".venv/pyvenv.cfg").write_text("")
    url = json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}})
    found = installed(tmp_path, "", url)
    before = installed_code(found)
    assert before.startswith("editable, 3 files ") and str(source) not in before
    (source / ".venv/ignored.py").write_text("x = 1\n")
    (source / "lib/__pycache__").mkdir()
    (source / "lib/__pycache__/x.cpython-311.pyc").write_bytes(b"cached")
    assert installed_code(found) == before
    previous = before
    for edit in ("lib/__init__.py", "lib/config.json", "lib/build/__init__.py"):
        (source / edit).write_text((source / edit).read_text() + " ")  # one version still
        now = installed_code(found)
        assert now != previous, edit
        previous = now


@pytest.mark.parametrize("direct_url", [
    "{not json", json.dumps({"url": "https://example.org/lib.whl", "archive_info": {}}),
    json.dumps({"url": "file:///no/such/folder", "dir_info": {"editable": True}})])
def test_a_direct_url_that_names_no_editable_folder_falls_back_to_the_record(
        tmp_path: Path, direct_url: str) -> None:
    found = installed(tmp_path, RECORD, direct_url)
    assert installed_code(found) == installed_code(installed(tmp_path / "plain", RECORD))


def test_an_editable_install_that_names_its_packages_is_keyed_by_them_alone(
        tmp_path: Path) -> None:
    """top_level.txt names its packages (here in a src/ layout): a data folder, documents
    or tests beside them are not its code, and are not read each run."""
    source = tmp_path / "src-checkout"
    (source / "src/lib").mkdir(parents=True)
    (source / "data").mkdir()
    (source / "src/lib/__init__.py").write_text("SCALE = 1\n")
    (source / "src/lib/config.json").write_text('{"width": 4}')
    (source / "data/big.bin").write_bytes(b"d" * 1000)
    url = json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}})
    found = installed(tmp_path, "", url)
    (tmp_path / "site/lib-1.0.dist-info/top_level.txt").write_text("lib\n")
    before = installed_code(found)
    assert before.startswith("editable, 2 files ")
    (source / "data/big.bin").write_bytes(b"e" * 1000)
    (source / "README.md").write_text("docs")
    assert installed_code(found) == before
    (source / "src/lib/config.json").write_text('{"width": 8}')
    assert installed_code(found) != before
