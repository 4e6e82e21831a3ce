"""The cache.* tasks: list, verify, prune and clear the cache folder's entries."""

from __future__ import annotations

from pathlib import Path

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from regression.cli.common import current_settings, translated
from regression.config.settings import Settings
from regression.errors import RegressionError
from regression.store import inventory


def _cache_dir() -> Path:
    return current_settings().cache_dir


def _configured_references(settings: Settings) -> dict[str, str]:
    """config.yaml's reference and named references by their subject's code (the key's
    part), each with its label and commit, to mark their entries; one that does not resolve
    here (a shallow clone, no repository) is left out."""
    from regression.repository.gitcmd import open_repo, short
    from regression.repository.revision import resolve_revision
    from regression.run.types import subject_code

    named = [(f"config.yaml's reference {settings.reference}", settings.reference),
             *((f"config.yaml's references.{name}: {revision}", revision)
               for name, revision in settings.references.items())]
    try:
        repo = open_repo(settings.root)
    except RegressionError:
        return {}
    found: dict[str, str] = {}
    for label, revision in named:
        try:
            sha = resolve_revision(repo, revision)
            found.setdefault(subject_code(settings, repo, sha), f"{label} ({short(sha)})")
        except RegressionError:
            continue
    return found


@task(name="list")
def list_(c: Context) -> None:
    """List the cache entries; * marks config.yaml's reference."""
    def work() -> list[str]:
        settings = current_settings()
        return inventory.list_lines(settings.cache_dir, _configured_references(settings))
    for line in translated(work):
        print(line)


@task
def verify(c: Context) -> None:
    """Check every stored file against its hash; exit 1 on any fault."""
    cache_dir = translated(_cache_dir)
    faults = inventory.verify(cache_dir)
    for fault in faults:
        print(f"FAULT {fault}")
    if faults:
        raise Exit(f"{len(faults)} faults in {cache_dir}; `invoke gen` re-records what it "
                   f"needs, {_clearing(cache_dir)}", code=1)
    print(f"{len(inventory.entries(cache_dir))} entries in {cache_dir}: no faults")


def _clearing(cache_dir: Path) -> str:
    """What `cache.clear` does about the faults: all of them, or all but what it leaves."""
    left = inventory.foreign(cache_dir)
    if not left:
        return "`invoke cache.clear` empties the cache (leftovers of removals cut short too)"
    paths = " ".join(str(info.directory) for info in left)
    return ("`invoke cache.clear` removes every entry and leftover, but leaves what is not "
            f"provably the cache's: {paths}. Look inside, then remove it yourself "
            f"(`rm -r {paths}`) or keep it")


@task(help={
    "max-size": "remove least recently used entries until the cache is at most this big "
                "(e.g. 500M, 2G)",
    "older-than": "remove entries not used for this long (e.g. 30d, 12h)",
})
def prune(c: Context, max_size: str | None = None, older_than: str | None = None) -> None:
    """Remove old or least recently used entries, those bisect made first."""
    def work() -> tuple[Path, list[inventory.EntryInfo]]:
        if max_size is None and older_than is None:
            raise RegressionError("say what to prune: --max-size SIZE and/or --older-than AGE")
        settings = current_settings()
        return settings.cache_dir, inventory.prune(
            settings.cache_dir, None if max_size is None else inventory.parse_size(max_size),
            None if older_than is None else inventory.parse_age(older_than),
            configured=_configured_references(settings))
    cache_dir, removed = translated(work)
    for line in inventory.removed_lines(removed):
        print(line)
    _report_foreign(cache_dir)


@task
def clear(c: Context) -> None:
    """Remove every cache entry; what is not provably one is left alone and listed."""
    cache_dir = translated(_cache_dir)
    for line in inventory.removed_lines(translated(lambda: inventory.clear(cache_dir))):
        print(line)
    _report_foreign(cache_dir)


def _report_foreign(cache_dir: Path) -> None:
    """What prune and clear left in the cache folder because it is not provably an entry."""
    for info in inventory.foreign(cache_dir):
        print(f"left alone, not provably a cache entry: {info.directory}: {info.fault}")


cache = Collection("cache", list_, verify, prune, clear)
