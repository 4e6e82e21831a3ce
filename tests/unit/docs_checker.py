"""The docs checker: what keeps the README and docs/ true, as functions that take a page's
text and return its problems (an empty list: none). test_docs.py applies them to the real
pages; test_docs_checker.py shows that each catches what it is for.

Links and anchors resolve; every command shown exists with the flags it uses; the flags table
of docs/tasks.md lists every flag of every task; the README stays short and starts with a
two-command Quickstart. Commands are checked in-process against the invoke Collection users
import (`from regression.tasks import ns`), the `torch-regression` parser and the pytest
plugin's options: no subprocess, no torch.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from invoke import ParseError, Parser, ParserContext, Program

from regression.tasks import ns

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
    """The command-line options of the pytest plugin pyproject.toml declares: of its entry
    module and of the plugins that module loads (its `pytest_plugins`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    entry = importlib.import_module(project["entry-points"]["pytest11"]["regression"])
    recorder = _OptionRecorder()
    for plugin in [entry, *map(importlib.import_module, getattr(entry, "pytest_plugins", ()))]:
        if hasattr(plugin, "pytest_addoption"):
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


def read(path: Path) -> str:
    """A page's text."""
    return path.read_text(encoding="utf-8")
