"""The cache folder on disk: its creation, write access, entry locks, and safe removal."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from contextlib import suppress
from pathlib import Path

from regression.errors import CacheWriteError, NoSpaceError, ReadOnlyError
from regression.store.files import write_atomic, write_error

ENTRY_FILE = "entry.json"
LAST_USED = "last-used"
CASES = "cases"
COLLECTIONS = "collections"
GITIGNORE = b"# Created by torch-regression.\n*\n"
_FIXES = {
    NoSpaceError: "free space (`invoke cache.prune --max-size 2G` removes the least recently "
                  "used entries) or point REGRESSION_CACHE_DIR at a bigger disk",
    ReadOnlyError: "make the cache folder writable, or point REGRESSION_CACHE_DIR at a "
                   "writable folder",
}


def lock_path(cache_dir: Path, key: str) -> Path:
    """The lock file of an entry: beside its folder, so removing the folder keeps it."""
    return cache_dir / f"{key}.lock"


def with_fix(exc: CacheWriteError, doing: str) -> CacheWriteError:
    """`exc` again, saying what was being done and how to make room or get write access."""
    fix = _FIXES.get(type(exc), "check the cache folder")
    return type(exc)(exc.path, f"{doing}: {exc.reason}", f"{fix}, then run again.")


def ensure_cache_root(cache_dir: Path) -> None:
    """Create the cache folder, ignored by git from the inside like .pytest_cache.

    The .gitignore goes only into a folder made here: written into a folder that already
    existed (one of the project's, named by mistake) it would hide new files there from git.
    """
    try:
        cache_dir.mkdir(parents=True)
    except FileExistsError:
        return
    except OSError as exc:
        raise with_fix(write_error(cache_dir, exc, "create"), "cannot create the cache") from None
    try:
        write_atomic(cache_dir / ".gitignore", GITIGNORE)
    except CacheWriteError as exc:
        with suppress(OSError):
            cache_dir.rmdir()  # so that the next run makes it again, .gitignore included
        raise with_fix(exc, f"cannot create the cache {cache_dir}") from None


def require_writable(folder: Path) -> None:
    """Raise ReadOnlyError, naming the folder, unless this process may write in it."""
    if os.access(folder, os.W_OK):
        return
    try:
        mounted_read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs on Windows
        mounted_read_only = False
    why = "a read-only file system" if mounted_read_only else "not writable by this user"
    raise ReadOnlyError(str(folder), f"the cache folder {folder} is read-only ({why})")


TRASH = re.compile(r"\.trash-([0-9a-f]{32})-[0-9a-f]{8}")
"""What an entry folder is renamed to before it is deleted; group 1: the entry's name."""


def trashed_entry(name: str) -> str:
    """The name of the entry a trash folder named `name` was, or "" if it is none."""
    found = TRASH.fullmatch(name)
    return found.group(1) if found else ""


def remove_folder(directory: Path) -> None:
    """Remove an entry folder: its identity file first, so that it never reads as valid,
    then renamed to a trash name, so that a removal cut short (kill -9) leaves no folder
    under the entry's name, and what it leaves is named as the cache's own (`TRASH`: prune,
    clear and verify find it). A symbolic link (or a file) in its place loses only itself."""
    try:
        if directory.is_symlink() or directory.is_file():
            directory.unlink()
        elif directory.is_dir():
            (directory / ENTRY_FILE).unlink(missing_ok=True)
            if not trashed_entry(directory.name):
                trash = directory.with_name(f".trash-{directory.name}-{secrets.token_hex(4)}")
                os.rename(directory, trash)
                directory = trash
            shutil.rmtree(directory)  # unlinks links inside, never follows them
    except OSError as exc:
        raise write_error(directory, exc, "remove") from None


_LEFTOVER_NAMES = re.compile(r"last-used|\.entry\.json\.[a-z0-9_]+\.tmp")
_CASE_NAMES = re.compile(r"[0-9a-f]{16}\.(?:json|[0-9a-f]{16}\.safetensors)"
                         r"|\.[0-9a-f]{16}(?:\.json)?\.[a-z0-9_]+\.tmp")
"""What the cache writes in an entry besides its identity file (temporary files included)."""


def stranger(directory: Path) -> str:
    """What in `directory` proves it is not a leftover of the cache ("" when nothing does).

    A removal unlinks the identity file first, and a creation writes it first into the new
    folder, so one cut short (kill -9) leaves a folder without entry.json that holds only
    regular files named as the cache names them: last-used, cases/, and in it case records,
    tensor files and their temporary files, collections/ and its records. Anything else,
    or an identity file, and the folder is not provably a leftover: prune and clear leave
    it alone.
    """
    if directory.is_symlink() or not directory.is_dir():
        return f"{directory} itself, which is not a folder"
    if os.path.lexists(directory / ENTRY_FILE):
        return f"{ENTRY_FILE}, its identity file"
    try:
        return _first_stranger(directory)
    except OSError as exc:
        return f"what cannot be listed ({exc.strerror or exc})"


def _first_stranger(directory: Path) -> str:
    """The first thing in an entry folder that the cache never writes, in words; "" if none."""
    for path in sorted(directory.iterdir()):
        if path.name in (CASES, COLLECTIONS) and not path.is_symlink() and path.is_dir():
            inside = (p for p in sorted(path.iterdir())
                      if not (_CASE_NAMES.fullmatch(p.name) and _is_plain_file(p)))
            found = next(inside, None)
        else:
            found = None if _LEFTOVER_NAMES.fullmatch(path.name) and _is_plain_file(path) \
                else path
        if found is not None:
            return f"{found.relative_to(directory)} ({_kind(found)})"
    return ""


def _is_plain_file(path: Path) -> bool:
    return stat.S_ISREG(path.lstat().st_mode)


def _kind(path: Path) -> str:
    """What a path is, in words, without following a link."""
    mode = path.lstat().st_mode
    kinds = {stat.S_ISLNK: "a symbolic link", stat.S_ISDIR: "a folder", stat.S_ISREG: "a file"}
    return next((kind for test, kind in kinds.items() if test(mode)), "a special file")


class EntryLock:
    """The file lock of one entry; freed if its holder dies. Taking it needs write access."""

    def __init__(self, path: Path) -> None:
        self.path = path
        from filelock import FileLock  # 30 ms to import: only runs that record or prune

        self._lock = FileLock(str(path))

    def __enter__(self) -> EntryLock:
        ensure_cache_root(self.path.parent)
        require_writable(self.path.parent)
        try:
            if self.path.is_symlink():
                self.path.unlink()  # a link in the cache is never followed: only it goes
            self._lock.acquire()
        except OSError as exc:
            raise write_error(self.path, exc, "lock") from None
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()

