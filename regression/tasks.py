"""The invoke tasks: thin over the runner; library errors become Exit here and only here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, TypeVar

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from .config import Settings, find_config, load_settings
from .errors import RegressionError
from . import inventory
from .runner import Generation, cache_key, collect, generate, require_valid, resolve, run_checks

T = TypeVar("T")
REFERENCE_HELP = "revision (tag, branch, SHA, HEAD~n) or a name from config.yaml's references"


def _settings() -> Settings:
    return load_settings(find_config(Path.cwd()))


def _translate(work: Callable[[], T]) -> T:
    try:
        return work()
    except RegressionError as exc:
        raise Exit(f"torch-regression: {exc}", code=2) from None


def _report(generation: Generation, total: int) -> None:
    if not generation.recorded and not generation.absent:
        print(f"reference up to date: all {total} cases reused from the cache, nothing generated")
        return
    print(f"recorded {len(generation.recorded)} cases, reused {generation.reused}")
    for nodeid, reason in generation.absent.items():
        print(f"not in reference: {nodeid}: {reason}")


def _gen(reference: str | None, force: bool) -> None:
    suite = collect(resolve(_settings(), reference))
    _report(generate(suite, force=force), len(suite.cases))


@task(help={"reference": REFERENCE_HELP, "force": "regenerate every case, valid or not"})
def gen(c: Context, reference: str | None = None, force: bool = False) -> None:
    """Generate the reference outputs, or reuse them when the cache holds valid ones."""
    _translate(lambda: _gen(reference, force))


def _test(reference: str | None, strict: bool, junitxml: str | None, no_gen: bool) -> int:
    suite = collect(resolve(_settings(), reference))
    if no_gen:
        require_valid(suite)
    else:
        _report(generate(suite), len(suite.cases))
    return run_checks(suite.reference, strict=strict, junitxml=junitxml)


@task(help={
    "reference": REFERENCE_HELP,
    "strict": "fail cases that are not in the reference instead of skipping them",
    "junitxml": "also write a JUnit XML report to this path",
    "no-gen": "never generate: stop with the reason when a reference is missing or invalid",
})
def test(c: Context, reference: str | None = None, strict: bool = False,
         junitxml: str | None = None, no_gen: bool = False) -> None:
    """Generate what is missing, then check the working tree against the reference."""
    code = _translate(lambda: _test(reference, strict, junitxml, no_gen))
    if code:
        raise Exit(code=code)


def _key(reference: str | None, explain: bool, github_output: bool) -> None:
    suite = collect(resolve(_settings(), reference))
    if explain:
        for name, value in suite.entry.parts.items():
            print(f"{name}: {value}")
        files = len({c.split("::")[0] for c in suite.cases})
        print(f"harness: {len(suite.cases)} cases in {files} files")
    line = cache_key(suite)
    if github_output:
        _append_github_output("key", line)
    print(line)


def _append_github_output(name: str, value: str) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        raise RegressionError("--github-output needs $GITHUB_OUTPUT, which GitHub Actions sets "
                              "in every step; outside Actions leave the flag off")
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(f"{name}={value}\n")


@task(help={
    "reference": REFERENCE_HELP,
    "explain": "list every part the key is made of",
    "github-output": "also append key=... to $GITHUB_OUTPUT",
})
def key(c: Context, reference: str | None = None, explain: bool = False,
        github_output: bool = False) -> None:
    """Print the cache key (one line) that CI's actions/cache uses."""
    _translate(lambda: _key(reference, explain, github_output))


def _cache_dir() -> Path:
    return _settings().cache_dir


@task(name="list")
def list_(c: Context) -> None:
    """List the cache entries: reference, key, cases, size, last use, what sets each apart."""
    for line in _translate(lambda: inventory.list_lines(_cache_dir())):
        print(line)


@task
def verify(c: Context) -> None:
    """Check every stored file against its hash; exit 1 on any fault."""
    cache_dir = _translate(_cache_dir)
    faults = inventory.verify(cache_dir)
    for fault in faults:
        print(f"FAULT {fault}")
    if faults:
        raise Exit(f"{len(faults)} faults in {cache_dir}; `invoke gen` re-records what it "
                   "needs, `invoke cache.clear` empties the cache", code=1)
    print(f"{len(inventory.entries(cache_dir))} entries in {cache_dir}: no faults")


@task(help={
    "max-size": "remove least recently used entries until the cache is at most this big "
                "(e.g. 500M, 2G)",
    "older-than": "remove entries not used for this long (e.g. 30d, 12h)",
})
def prune(c: Context, max_size: str | None = None, older_than: str | None = None) -> None:
    """Remove old or least recently used entries."""
    def work() -> list[inventory.EntryInfo]:
        if max_size is None and older_than is None:
            raise RegressionError("say what to prune: --max-size SIZE and/or --older-than AGE")
        return inventory.prune(_cache_dir(),
                               inventory.parse_size(max_size) if max_size else None,
                               inventory.parse_age(older_than) if older_than else None)
    removed = _translate(work)
    for info in removed:
        print(f"removed {info.directory} ({inventory.human_size(info.size)})")
    print(f"removed {len(removed)} entries")


@task
def clear(c: Context) -> None:
    """Remove every cache entry."""
    removed = _translate(lambda: inventory.clear(_cache_dir()))
    print(f"removed {len(removed)} entries")


cache = Collection("cache", list_, verify, prune, clear)
ns = Collection(gen, test, key, cache)
