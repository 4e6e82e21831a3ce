"""The invoke tasks: thin over the runner; library errors become Exit here and only here."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from .config import Settings, find_config, load_settings
from .errors import RegressionError
from .runner import Generation, cache_key, collect, generate, resolve, run_checks

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


def _test(reference: str | None, strict: bool, junitxml: str | None) -> int:
    suite = collect(resolve(_settings(), reference))
    _report(generate(suite), len(suite.cases))
    return run_checks(suite.reference, strict=strict, junitxml=junitxml)


@task(help={
    "reference": REFERENCE_HELP,
    "strict": "fail cases that are not in the reference instead of skipping them",
    "junitxml": "also write a JUnit XML report to this path",
})
def test(c: Context, reference: str | None = None, strict: bool = False,
         junitxml: str | None = None) -> None:
    """Generate what is missing, then check the working tree against the reference."""
    code = _translate(lambda: _test(reference, strict, junitxml))
    if code:
        raise Exit(code=code)


def _key(reference: str | None, explain: bool) -> None:
    suite = collect(resolve(_settings(), reference))
    if explain:
        for name, value in suite.entry.parts.items():
            print(f"{name}: {value}")
        files = len({c.split("::")[0] for c in suite.cases})
        print(f"harness: {len(suite.cases)} cases in {files} files")
    print(cache_key(suite))


@task(help={"reference": REFERENCE_HELP, "explain": "list every part the key is made of"})
def key(c: Context, reference: str | None = None, explain: bool = False) -> None:
    """Print the cache key (one line) that CI's actions/cache uses."""
    _translate(lambda: _key(reference, explain))


ns = Collection(gen, test, key)
