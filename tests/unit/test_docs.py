"""The README and docs/ stay true: links resolve, every command they show exists with the
flags it uses, the README stays short, and its configuration example is a valid config.

Commands are checked in-process against the invoke Collection users import
(`from regression.tasks import ns`), the `torch-regression` parser and the pytest plugin's
options: no subprocess, no torch.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from invoke import Argument, ParseError, Parser, ParserContext, Program

from regression.config import load_settings
from regression.cli.tasks import ns

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
COMMAND_START = re.compile(r"(?:^|&&|\|\||;|\|)\s*(?:\$\s+)?(?:[\w.~/-]*/)?"
                           r"(?:invoke|inv|torch-regression)(?=\s|$)")
SEPARATORS = {"&&", "||", ";", "|"}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$|^\.\.\.$")
CODE_LANGUAGES = {"python", "yaml", "toml", "json"}


def relative(path: Path) -> str:
    """A page's name as a reader finds it in the repository."""
    return Path(os.path.relpath(path, ROOT)).as_posix()


# Markdown: fences, headings, links.

def without_fences(text: str) -> str:
    """The prose of a page: fenced blocks blanked out, line numbers kept."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor the headings of a page define, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", without_fences(text), re.M):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_targets(text: str) -> list[str]:
    """Every link and image target in the prose, inline code left out."""
    prose = INLINE_CODE.sub("", without_fences(text))
    return [m.group(1) for m in LINK.finditer(prose)]


def link_problems(page: Path, text: str, read: Callable[[Path], str]) -> list[str]:
    """Each relative link of `text` (at `page`) whose file or heading does not exist."""
    problems = []
    for target in link_targets(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # http:, https:, mailto: are not this repository's
        path_part, _, anchor = target.partition("#")
        goal = (page.parent / path_part).resolve() if path_part else page
        if path_part and not goal.exists():
            problems.append(f"{relative(page)}: link {target!r}: {path_part} does not exist")
        elif anchor and goal.suffix == ".md" and anchor not in anchors(read(goal)):
            problems.append(f"{relative(page)}: link {target!r}: no heading "
                            f"#{anchor} in {relative(goal)}")
    return problems


# Commands: the invoke tasks and the torch-regression parser, read in-process.

@cache
def core_context() -> ParserContext:
    """invoke's own options (--list, --help TASK ...), as its Program parses them."""
    program = Program(namespace=ns)
    return ParserContext(args=program.core_args() + program.task_args())


def task_contexts() -> dict[str, ParserContext]:
    """Each task's parser context by name, flags and positional arguments included."""
    return {str(context.name): context for context in ns.to_contexts()}


def invoke_problems(argv: list[str]) -> list[str]:
    """What is wrong with `invoke ARGV` (a task or flag that does not exist, a missing
    argument), parsed as invoke's Program parses it: core options first, then the tasks."""
    shown = shlex.join(["invoke", *argv])
    try:
        core = Parser(initial=core_context(), ignore_unknown=True).parse_argv(argv)
        Parser(contexts=tuple(task_contexts().values())).parse_argv(core.unparsed)
    except ParseError as exc:
        return [f"`{shown}`: {exc}"]
    named = core[0].args["help"].value
    if isinstance(named, str) and named not in task_contexts():
        return [f"`{shown}`: --help names no task {named!r}"]
    return []


@cache
def cli_main() -> Callable[[list[str]], Any]:
    """The `torch-regression` entry point, found where pyproject.toml declares it."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = spec["torch-regression"].partition(":")
    main: Callable[[list[str]], Any] = getattr(importlib.import_module(module), function)
    return main


@cache
def cli_help(*argv: str) -> str:
    """The `--help` text of the torch-regression command (or one of its subcommands)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli_main()([*argv, "--help"])
    return out.getvalue()


def cli_problems(argv: list[str]) -> list[str]:
    """A subcommand or option of `torch-regression ARGV` that its parser does not have."""
    shown = shlex.join(["torch-regression", *argv])
    listed = re.search(r"\{([\w,-]+)\}", cli_help())
    commands = listed.group(1).split(",") if listed else []
    if not argv or argv[0] not in commands:
        return [f"`{shown}`: no such command; the commands are {', '.join(commands)}"]
    options = set(re.findall(r"(?<![\w-])(--?[\w][\w-]*)", cli_help(argv[0])))
    return [f"`{shown}`: {argv[0]} has no option {flag}" for flag in flags_of(argv[1:])
            if flag not in options]


class _OptionRecorder:
    """Stands in for pytest's parser: records the option names a plugin registers."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def getgroup(self, *args: Any, **kwargs: Any) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.names.update(names)

    def addini(self, *args: Any, **kwargs: Any) -> None:
        """ini settings are not command-line options."""


@cache
def plugin_options() -> frozenset[str]:
    """The command-line options of the pytest plugin pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plugin = importlib.import_module(project["entry-points"]["pytest11"]["regression"])
    recorder = _OptionRecorder()
    plugin.pytest_addoption(recorder)
    return frozenset(recorder.names)


def pytest_option_problems(page: str, text: str) -> list[str]:
    """Each `--regression-...` option a page names that the plugin does not register."""
    named = sorted(set(re.findall(r"--regression-[\w-]*\w", text)))
    return [f"{page}: pytest has no option {option}; the plugin's are "
            f"{', '.join(sorted(plugin_options()))}" for option in named
            if option not in plugin_options()]


def flags_of(tokens: list[str]) -> list[str]:
    """The option names among command-line tokens, `--name=value` cut at the `=`."""
    return [token.split("=", 1)[0] for token in tokens if re.match(r"^--?[A-Za-z]", token)]


def split_commands(line: str) -> Iterator[list[str]]:
    """Each `invoke`/`torch-regression` command of a shell line, as argv from the program on."""
    words = shlex.split(line, comments=True)
    command: list[str] = []
    for word in [*words, ";"]:
        if word not in SEPARATORS:
            command.append(word)
            continue
        if command and command[0] == "$":
            command = command[1:]
        if command and Path(command[0]).name in {"invoke", "inv", "torch-regression"}:
            yield command
        command = []


def command_problems(argv: list[str]) -> list[str]:
    """The problems of one full command line, by program."""
    if Path(argv[0]).name == "torch-regression":
        return cli_problems(argv[1:])
    return invoke_problems(argv[1:])


def fenced_command_problems(page: str, text: str) -> list[str]:
    """Every command line in the fenced shell blocks and transcripts of a page, checked."""
    problems = []
    for language, body in fenced_blocks(text):
        if language in CODE_LANGUAGES:
            continue
        for line in body.splitlines():
            if not COMMAND_START.search(line):
                continue
            try:
                commands = list(split_commands(line))
            except ValueError as exc:
                problems.append(f"{page}: cannot split {line!r}: {exc}")
                continue
            problems += [f"{page}: {p}" for argv in commands for p in command_problems(argv)]
    return problems


def sketch_problems(span: str) -> list[str]:
    """A command named in prose (`invoke gen [--shard i/n]`): its task and each flag it
    names must exist; placeholders and values are not judged."""
    words = [w.strip("[]") for w in shlex.split(span.replace("...", " "))]
    program, words = words[0], [w for w in words[1:] if w and not PLACEHOLDER.match(w)]
    task = next((w for w in words if not w.startswith("-")), None)
    if Path(program).name == "torch-regression":
        return cli_problems([task or "", *flags_of(words)])
    contexts = task_contexts()
    if task is None:
        return [f"`{span}`: invoke has no option {flag}" for flag in flags_of(words)
                if flag not in core_context().flags]
    if task not in contexts:
        return [f"`{span}`: no task {task!r}"]
    split = words.index(task)
    known = set(contexts[task].flags) | set(contexts[task].inverse_flags)
    return ([f"`{span}`: invoke has no option {flag}" for flag in flags_of(words[:split])
             if flag not in core_context().flags]
            + [f"`{span}`: {task} has no flag {flag}" for flag in flags_of(words[split + 1:])
               if flag not in known])


def inline_command_problems(page: str, text: str) -> list[str]:
    """Every `invoke ...` or `torch-regression ...` in inline code of a page, checked."""
    problems = []
    for match in INLINE_CODE.finditer(without_fences(text)):
        span = " ".join(match.group(2).split())
        if not re.match(r"^(\S*/)?(invoke|torch-regression)( |$)", span):
            continue
        try:
            problems += [f"{page}: {p}" for p in sketch_problems(span)]
        except ValueError as exc:
            problems.append(f"{page}: cannot split `{span}`: {exc}")
    return problems


# The flags table of docs/tasks.md: every flag of every task, and no other.

FLAG_ROW = re.compile(r"^\|\s*((?:`-[^`]*`(?:,\s*)?)+)\s*\|\s*([\w., ]+?)\s*\|", re.M)


def all_flags(context: ParserContext) -> set[str]:
    """A task's flags, long and short."""
    return set(context.flags) | set(context.flags.aliases)


def table_under(text: str, header: str) -> str:
    """The rows of the Markdown table whose header row starts with `header`."""
    lines = without_fences(text).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), len(lines))
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def flag_table(text: str) -> dict[str, set[str]]:
    """Task name -> the flags the table (| flag | tasks | meaning |) lists for it."""
    listed: dict[str, set[str]] = {}
    for match in FLAG_ROW.finditer(table_under(text, "| flag | tasks |")):
        flags = {span.split()[0] for span in re.findall(r"`([^`]+)`", match.group(1))}
        for task in (name.strip() for name in match.group(2).split(",")):
            listed.setdefault(task, set()).update(flags)
    return listed


def flag_table_problems(text: str) -> list[str]:
    """A flag the table lists that its task lacks, and a flag of a task it leaves out."""
    listed, contexts = flag_table(text), task_contexts()
    if not listed:
        return ["no table of flags (| `-r`, `--reference REV` | gen, test | ... |)"]
    problems = [f"the table lists task {task!r}, which does not exist"
                for task in listed if task not in contexts]
    for task, context in contexts.items():
        shown, real = listed.get(task, set()), all_flags(context)
        problems += [f"the table lists {flag} for {task}, which has no such flag"
                     for flag in sorted(shown - real)]
        problems += [f"{task} {flag} is missing from the table" for flag in sorted(real - shown)]
    return problems


# README shape.

def section(text: str, heading: str) -> str:
    """The body of one `## heading` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def readme_shape_problems(text: str) -> list[str]:
    """The README's promises to a newcomer: short, Quickstart first, two commands to start."""
    problems = []
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines >= README_MAX_LINES:
        problems.append(f"README.md has {lines} lines; keep it under {README_MAX_LINES} "
                        "and move reference text to docs/")
    headings = re.findall(r"^## (.+)$", without_fences(text), re.M)
    if not headings or headings[0] != "Quickstart":
        problems.append("the first section of README.md must be '## Quickstart', "
                        f"not {headings[:1]}")
    shell = [body for language, body in fenced_blocks(section(text, "Quickstart"))
             if language == "sh"]
    commands = [line for line in (shell[0] if shell else "").splitlines() if line.strip()]
    if len(commands) != 2:
        problems.append(f"the Quickstart's first sh block must hold exactly two commands, "
                        f"it holds {len(commands)}: {commands}")
    return problems


# The checks on the real pages.

def read(path: Path) -> str:
    """A page's text."""
    return path.read_text(encoding="utf-8")


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


# Each check catches what it is for.

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

    monkeypatch.setattr(sys.modules[__name__], "task_contexts",
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

    monkeypatch.setattr(sys.modules[__name__], "task_contexts",
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
