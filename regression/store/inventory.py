"""Cache management: list, verify, prune and clear the entries of a cache folder."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping

from regression.store.cache import Entry
from regression.store.cachedir import (ENTRY_FILE, EntryLock, lock_path, remove_folder, stranger,
                                       trashed_entry, with_fix)
from regression.errors import CacheError, CacheWriteError, RegressionError
from regression.repository.gitcmd import short

BISECT = "bisect"
"""Entry.made_by of the entries `invoke bisect` records, one per commit."""
_ENTRY_NAME = re.compile(r"[0-9a-f]{32}")  # only such names are listed; only proven entries go
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class EntryInfo:
    """One cache entry as `cache.list` shows it."""

    directory: Path
    entry: Entry | None
    size: int
    cases: int
    last_used: float
    fault: str = ""
    leftover: bool = False
    """Not an entry, but what a removal or creation cut short leaves: prune and clear remove it."""


def folder_size(folder: Path) -> int:
    """The bytes of the files in `folder`; links count as nothing and are not followed."""
    if folder.is_symlink():
        return 0
    return sum(p.lstat().st_size for p in folder.rglob("*")
               if not p.is_symlink() and p.is_file())


def entries(cache_dir: Path) -> list[EntryInfo]:
    """Everything in the cache named like an entry, least recently used first; `entry` is None
    for what is not provably one (it is listed with why, and never removed)."""
    found = []
    if cache_dir.is_dir():
        for folder in sorted(p for p in cache_dir.iterdir()
                             if _ENTRY_NAME.fullmatch(p.name) or trashed_entry(p.name)):
            try:
                entry: Entry | None = Entry.from_directory(folder)
                fault, leftover = "", False
            except CacheError as exc:
                entry, (leftover, fault) = None, _judge(folder, str(exc))
            used = entry.last_used() if entry else folder.lstat().st_mtime
            cases = len(entry.stored_cases()) if entry else 0
            found.append(EntryInfo(folder, entry, folder_size(folder), cases, used, fault,
                                   leftover))
    return sorted(found, key=lambda info: info.last_used)


def _judge(folder: Path, fault: str) -> tuple[bool, str]:
    """Whether a folder that is not an entry is a leftover of the cache, and its fault saying
    so, or naming what it holds that the cache never writes."""
    found = stranger(folder)
    if not found:
        return True, (f"{fault}; it holds only files the cache writes, left by a removal or "
                      "creation cut short: `invoke cache.prune` and `cache.clear` remove it")
    if not folder.is_symlink() and not os.path.lexists(folder / ENTRY_FILE):
        fault += f"; it holds {found}, which the cache never writes"
    return False, fault


def foreign(cache_dir: Path) -> list[EntryInfo]:
    """What is named like an entry but not provably the cache's: prune and clear leave it alone."""
    return [info for info in entries(cache_dir) if info.entry is None and not info.leftover]


def removed_lines(removed: list[EntryInfo]) -> list[str]:
    """What prune or clear removed, one line each, then how many."""
    lines = [f"removed {info.directory} ({human_size(info.size)})"
             + (": not an entry, but a leftover holding only files the cache writes"
                if info.leftover else "") for info in removed]
    return [*lines, f"removed {len(removed)} entries"]


def list_lines(cache_dir: Path, configured: Mapping[str, str] | None = None) -> list[str]:
    """A table of the entries: reference, key, cases, size, last used, what made it, what
    sets it apart; then what the marks mean. `configured`: config.yaml's references by
    their subject's code (the key's part), each with its label (their entries are marked
    *)."""
    configured = configured or {}
    infos = entries(cache_dir)
    if not infos:
        return [f"no cache entries in {cache_dir}"]
    varying = _varying_parts([i.entry.parts for i in infos if i.entry])
    only_reference = "the reference only" if len(infos) > 1 else "-"
    lines = [f"  {'reference':12}  {'key':16}  {'cases':>5}  {'size':>9}  {'last used':16}  "
             f"{'made by':8}  distinguished by"]
    for info in infos:
        reference = _commit(info)
        mark = "*" if info.entry and info.entry.parts.get(CODE) in configured else " "
        apart = ("; ".join(f"{p}={info.entry.parts.get(p, '')}" for p in varying)
                 if info.entry else f"NOT AN ENTRY, {_fate(info)}: {info.fault}")
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.last_used))
        lines.append(f"{mark} {short(reference):12}  {info.directory.name[:16]:16}  "
                     f"{info.cases:>5}  {human_size(info.size):>9}  {used:16}  "
                     f"{_made_by(info):8}  {apart or only_reference}")
    return lines + _legend(infos, configured)


CODE = "subject code"
"""The key's part that sets apart the references of one environment."""


def _commit(info: EntryInfo) -> str:
    """The commit an entry was made at; an entry of format 3 or older held it in its key."""
    if info.entry is None:
        return "?"
    return info.entry.reference or info.entry.parts.get("reference", "?")


def _made_by(info: EntryInfo) -> str:
    if info.entry is None:
        return "?"
    return info.entry.made_by or "gen/test"


def made_by_bisect(info: EntryInfo, configured: Collection[str] = ()) -> bool:
    """An entry `invoke bisect` made for a commit that shares no subject's code with
    config.yaml's references (`configured`: their subject code parts): the first to go when
    the cache is pruned."""
    return info.entry is not None and info.entry.made_by == BISECT \
        and info.entry.parts.get(CODE) not in configured


def _legend(infos: list[EntryInfo], configured: Mapping[str, str]) -> list[str]:
    """What the mark and the bisect entries mean, under the table."""
    present = {i.entry.parts.get(CODE) for i in infos if i.entry}
    lines = [f"* {label}" if code in present
             else f"  {label} has no entry here: `invoke gen` records it"
             for code, label in configured.items()]
    bisected = sum(made_by_bisect(info, configured) for info in infos)
    if bisected:
        lines.append(f"{bisected} {'entry' if bisected == 1 else 'entries'} made by `invoke "
                     "bisect` (one per commit it recorded): `invoke cache.prune` removes "
                     "them before any other entry, e.g. `invoke cache.prune --older-than 1d`")
    return lines


def _fate(info: EntryInfo) -> str:
    return "a leftover" if info.leftover else "left alone"


def _varying_parts(all_parts: list[dict[str, str]]) -> list[str]:
    names = list(dict.fromkeys(name for parts in all_parts for name in parts))
    return [n for n in names
            if n not in ("reference", CODE) and len({parts.get(n) for parts in all_parts}) > 1]


def verify(cache_dir: Path) -> list[str]:
    """Every fault in the cache, as messages; empty when everything reads back exactly."""
    faults = []
    for info in entries(cache_dir):
        if info.entry is None:
            faults.append(info.fault)
        else:
            faults += info.entry.faults()
    return faults


def prune(cache_dir: Path, max_size: int | None, older_than: float | None,
          now: float | None = None, configured: Collection[str] = ()) -> list[EntryInfo]:
    """Remove entries unused for `older_than` seconds, then least recently used ones
    until the cache holds at most `max_size` bytes, those bisect made (for commits other than
    the `configured` references) before any other; returns what was removed.

    Only proven entries count and go, and leftovers of removals cut short, which never count
    as entries, go whatever the limits; the rest is left alone (`foreign`).
    """
    now = time.time() if now is None else now
    found = entries(cache_dir)
    removed = [info for info in found if info.leftover and remove_entry(info.directory)]
    infos = sorted((info for info in found if info.entry is not None),
                   key=lambda info: not made_by_bisect(info, configured))  # stable: LRU
    total = sum(i.size for i in infos)
    for info in infos:
        too_old = older_than is not None and now - info.last_used > older_than
        too_big = max_size is not None and total > max_size
        if (too_old or too_big) and remove_entry(info.directory):
            total -= info.size
            removed.append(info)
    return removed


def clear(cache_dir: Path) -> list[EntryInfo]:
    """Remove every entry, and every leftover, the cache can prove its own; the rest is left
    alone (`foreign`)."""
    return [info for info in entries(cache_dir)
            if (info.entry is not None or info.leftover) and remove_entry(info.directory)]


def remove_entry(directory: Path) -> bool:
    """Delete one entry folder while holding its lock, so no generation is cut short.

    Proven again under the lock (identity file verified, fingerprint hashing to the folder's
    name, no link; or a leftover, see `stranger`): False, and nothing removed, when it is
    neither.
    """
    name = trashed_entry(directory.name) or directory.name  # a removal cut short: its entry's
    try:
        with EntryLock(lock_path(directory.parent, name)):
            if not _provably_own(directory):
                return False
            remove_folder(directory)
    except CacheWriteError as exc:
        raise with_fix(exc, f"cannot remove the cache entry {directory}") from None
    # The lock file stays: deleting it would let a waiter and a newcomer lock different files.
    return True


def _provably_own(directory: Path) -> bool:
    """An entry, or a leftover of one: a folder the cache may remove."""
    try:
        Entry.from_directory(directory)
    except CacheError:
        return not stranger(directory)
    return True


def parse_size(text: str) -> int:
    """'500M', '2G', '1024' -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not match:
        raise RegressionError(f"--max-size {text!r} is not a size; write e.g. 500M, 2G or 1024")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '2w' -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        raise RegressionError(f"--older-than {text!r} is not an age; write e.g. 30d, 12h or 2w")
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if round(value, 1) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
