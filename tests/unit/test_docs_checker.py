"""The docs checker (docs_checker.py) catches what each of its checks is for: a broken link
or anchor, a command or flag that does not exist, a flags table that disagrees with the tasks,
a pytest option the plugin lacks, a README that breaks its shape. Crafted pages, and the real
ones with a task's flags changed under them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import docs_checker
import pytest
from docs_checker import (PAGES, ROOT, fenced_command_problems, flag_table_problems,
                          inline_command_problems, link_problems, plugin_options,
                          pytest_option_problems, read, readme_shape_problems, relative,
                          task_contexts)
from invoke import Argument, ParserContext

@pytest.fixture
def pages(tmp_path: Path) -> Path:
    """A small repository of pages: README.md and docs/cache.md with one heading each."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Title\n\n## Quickstart\n")
    (tmp_path / "docs" / "cache.md").write_text("# The cache\n\n## The cache key\n")
    return tmp_path


def crafted_link_problems(pages: Path, text: str) -> list[str]:
    """The link problems of `text` as docs/page.md of the small repository."""
    page = pages / "docs" / "page.md"
    page.write_text(text)
    return link_problems(page, text, read)


@pytest.mark.parametrize(("text", "expected"), [
    ("See [tasks](nosuch.md).", "nosuch.md does not exist"),
    ("See [the cache](cache.md#no-such-heading).", "no heading #no-such-heading in "),
    ("See [above](#nowhere).\n\n## Somewhere\n", "no heading #nowhere in "),
    ("See [README](../README.md#quickstart-now).", "no heading #quickstart-now in "),
    ("See [the key](cache.md#the-cache-key-1).", "no heading #the-cache-key-1 in "),
    ("![a picture](img/missing.png)", "img/missing.png does not exist"),
])
def test_a_broken_link_is_named(pages: Path, text: str, expected: str) -> None:
    problems = crafted_link_problems(pages, text)
    assert len(problems) == 1 and expected in problems[0]


@pytest.mark.parametrize("text", [
    "See [the cache](cache.md), [its key](cache.md#the-cache-key), [up](../README.md#quickstart)"
    " and [here](#here-and-there).\n\n## Here, and `there`\n",
    "`[not a link](nosuch.md)` and\n```\n[also not](nosuch.md)\n```\n",
    "[a site](https://example.com/x#y)",
    "## Twice\n\n## Twice\n\n[first](#twice), [second](#twice-1)",
])
def test_a_good_link_passes(pages: Path, text: str) -> None:
    assert crafted_link_problems(pages, text) == []


def test_a_flag_removed_from_a_task_is_caught_in_the_real_pages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Were `invoke test --store-durations` and `invoke gen --force` gone, the pages that show
    them would fail, each naming the flag."""
    real = task_contexts()
    gone = {"test": "store_durations", "gen": "force"}

    def without(context: ParserContext) -> ParserContext:
        kept = {id(a): a for a in context.args.values() if a.name != gone.get(str(context.name))}
        return ParserContext(name=context.name, aliases=context.aliases, args=kept.values())

    monkeypatch.setattr(docs_checker, "task_contexts",
                        lambda: {name: without(context) for name, context in real.items()})
    problems = [p for page in PAGES for p in inline_command_problems(relative(page), read(page))]
    assert any("docs/tasks.md" in p and "test has no flag --store-durations" in p
               for p in problems)
    assert any("gen has no flag --force" in p for p in problems)
    fenced = fenced_command_problems("page.md", "```sh\ninvoke gen --force\n```\n")
    assert len(fenced) == 1 and "No idea what '--force' is" in fenced[0]


@pytest.mark.parametrize(("line", "expected"), [
    ("invoke gen --bogus", "No idea what '--bogus' is"),
    ("$ invoke gen --store-durations", "No idea what '--store-durations' is"),  # test's flag
    ("invoke nosuchtask", "No idea what 'nosuchtask' is"),
    ("invoke test -z", "No idea what '-z' is"),
    ("invoke explain", "'explain' did not receive required positional arguments: 'case'"),
    ("invoke --help nosuch", "--help names no task 'nosuch'"),
    ("python -m venv .venv && .venv/bin/invoke test --no-gne", "No idea what '--no-gne' is"),
    ("torch-regression init --shard 2", "init has no option --shard"),
    ("torch-regression setup", "no such command"),
])
def test_a_command_that_does_not_exist_is_named(line: str, expected: str) -> None:
    problems = fenced_command_problems("page.md", f"```sh\n{line}\n```\n")
    assert len(problems) == 1 and expected in problems[0]


@pytest.mark.parametrize("line", [
    "invoke gen --force --repeat 2 -k 'vit and not large'",
    "$ invoke explain 'test_forward and vit-tiny' --reference v0.4",
    "invoke bisect --good v1 --case a --case b --scan",
    "invoke test --junitxml=out.xml --workers 1  # a comment --bogus",
    "invoke --help test",
    "torch-regression init --device cuda --runner self-hosted,gpu",
])
def test_a_command_that_exists_passes(line: str) -> None:
    assert fenced_command_problems("page.md", f"```sh\n{line}\n```\n") == []


@pytest.mark.parametrize(("span", "expected"), [
    ("invoke gen [--reference REV] [--strict]", "gen has no flag --strict"),
    ("invoke cache.prune --max-age 30d", "cache.prune has no flag --max-age"),
    ("invoke cache.purge", "no task 'cache.purge'"),
    ("invoke --lsit", "invoke has no option --lsit"),
    ("torch-regression init --shard N", "init has no option --shard"),
])
def test_a_command_named_in_prose_that_does_not_exist_is_named(span: str, expected: str) -> None:
    problems = inline_command_problems("page.md", f"Run `{span}` to see.")
    assert len(problems) == 1 and expected in problems[0]


@pytest.mark.parametrize(("change", "expected"), [
    (lambda row: row.replace("| test |", "| test, key |"),
     "the table lists --store-durations for key, which has no such flag"),
    (lambda row: row.replace("`-o`, ", ""), "test -o is missing from the table"),
    (lambda row: "", "test --store-durations is missing from the table"),
    (lambda row: row.replace("| test |", "| tset |"), "task 'tset', which does not exist"),
])
def test_a_flags_table_that_disagrees_with_the_tasks_is_named(
        change: Callable[[str], str], expected: str) -> None:
    text = read(ROOT / "docs" / "tasks.md")
    row = next(line for line in text.splitlines() if line.startswith("| `-o`, `--store-"))
    assert flag_table_problems(text) == []
    problems = flag_table_problems(text.replace(row, change(row)))
    assert any(expected in problem for problem in problems), problems


def test_a_flag_added_to_a_task_must_join_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new flag of `invoke test` that the docs do not mention fails the docs."""
    real = task_contexts()

    def with_flag(context: ParserContext) -> ParserContext:
        args = list({id(a): a for a in context.args.values()}.values())
        if context.name == "test":
            args.append(Argument(names=("fresh-flag",), kind=bool))
        return ParserContext(name=context.name, aliases=context.aliases, args=args)

    monkeypatch.setattr(docs_checker, "task_contexts",
                        lambda: {name: with_flag(context) for name, context in real.items()})
    assert flag_table_problems(read(ROOT / "docs" / "tasks.md")) == [
        "test --fresh-flag is missing from the table"]


def test_a_pytest_option_the_plugin_lacks_is_named() -> None:
    text = "`pytest --regression-strict --regression-no-gen`, then `--regression-bogus FILE`."
    problems = pytest_option_problems("page.md", text)
    assert len(problems) == 1 and "pytest has no option --regression-bogus" in problems[0]
    assert "--regression-reference" in plugin_options()


def test_a_command_in_prose_may_wrap_and_use_placeholders() -> None:
    text = ("`invoke test [--reference REV] [--case NODEID ...]\n[--no-gen]`, `invoke --help "
            "TASK`, `invoke cache.prune --max-size ...`, `torch-regression init --shards N`")
    assert inline_command_problems("page.md", text) == []


SMALL_README = """# tool

Short.

## Quickstart

```sh
make
make test
```

## More
"""


@pytest.mark.parametrize(("text", "expected"), [
    (SMALL_README + "line\n" * 250, "keep it under 250"),
    (SMALL_README.replace("make test\n", "make test\nmake docs\n"),
     "exactly two commands, it holds 3"),
    (SMALL_README.replace("make test\n", ""), "exactly two commands, it holds 1"),
    (SMALL_README.replace("```sh", "```text"), "exactly two commands, it holds 0"),
    (SMALL_README.replace("## Quickstart", "## Start here"), "must be '## Quickstart'"),
    (SMALL_README.replace("## Quickstart", "## Intro\n\n## Quickstart"),
     "must be '## Quickstart'"),
])
def test_a_readme_that_breaks_its_shape_is_named(text: str, expected: str) -> None:
    assert readme_shape_problems(SMALL_README) == []
    problems = readme_shape_problems(text)
    assert problems and expected in problems[0]
