"""The README and docs/ stay true: links resolve, every command they show exists with the
flags it uses, the README stays short, and its configuration example is a valid config.
The checks are docs_checker.py's, applied here to the real pages; test_docs_checker.py shows
on crafted pages that each catches what it is for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_checker import (CODE_LANGUAGES, COMMAND_START, INLINE_CODE, PAGES, README, ROOT,
                          fenced_blocks, fenced_command_problems, flag_table_problems,
                          inline_command_problems, link_problems, link_targets,
                          pytest_option_problems, read, readme_shape_problems, relative,
                          split_commands, task_contexts, without_fences)

from regression.config.settings import load_settings


def page_ids() -> list[str]:
    """Test ids: the pages by name."""
    return [relative(page) for page in PAGES]


def test_the_docs_folder_holds_the_reference() -> None:
    """docs/ exists with several pages, each linked from the README."""
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in link_targets(read(README))}
    pages = [page for page in PAGES if page != README]
    assert len(pages) >= 5
    assert [relative(p) for p in pages if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=page_ids())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert link_problems(page, read(page), read) == []


@pytest.mark.parametrize("page", PAGES, ids=page_ids())
def test_every_command_in_a_code_block_exists_with_its_flags(page: Path) -> None:
    assert fenced_command_problems(relative(page), read(page)) == []


@pytest.mark.parametrize("page", PAGES, ids=page_ids())
def test_every_command_named_in_the_prose_exists_with_its_flags(page: Path) -> None:
    assert inline_command_problems(relative(page), read(page)) == []


@pytest.mark.parametrize("page", PAGES, ids=page_ids())
def test_every_pytest_option_named_exists(page: Path) -> None:
    assert pytest_option_problems(relative(page), read(page)) == []


def test_the_flags_table_lists_every_flag_of_every_task() -> None:
    assert flag_table_problems(read(ROOT / "docs" / "tasks.md")) == []


def test_every_task_has_its_line_in_the_tasks_page() -> None:
    spans = {" ".join(m.group(2).split()[:2])
             for m in INLINE_CODE.finditer(without_fences(read(ROOT / "docs" / "tasks.md")))}
    assert [name for name in task_contexts() if f"invoke {name}" not in spans] == []


def test_the_pages_show_commands_at_all() -> None:
    """The command checks above have something to check (a regex that matches nothing would
    pass them all)."""
    fenced = sum(len(list(split_commands(line))) for page in PAGES
                 for language, body in fenced_blocks(read(page))
                 if language not in CODE_LANGUAGES
                 for line in body.splitlines() if COMMAND_START.search(line))
    inline = sum(1 for page in PAGES for m in INLINE_CODE.finditer(without_fences(read(page)))
                 if m.group(2).startswith("invoke "))
    assert fenced >= 5 and inline >= 20


def test_the_readme_is_short_and_starts_with_the_quickstart() -> None:
    assert readme_shape_problems(read(README)) == []


def test_the_configuration_example_is_a_valid_config_and_the_same_in_both_places(
        tmp_path: Path) -> None:
    """The README's example config loads with the real loader; docs/configuration.md shows
    the same one."""
    examples = [body for page in (README, ROOT / "docs" / "configuration.md")
                for language, body in fenced_blocks(read(page)) if language == "yaml"]
    assert len(examples) == 2 and examples[0] == examples[1]
    (tmp_path / "config.yaml").write_text(examples[0])
    settings = load_settings(tmp_path / "config.yaml")
    assert settings.subject_packages == ("zoo",) and settings.reference == "v1.2"
