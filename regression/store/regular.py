"""Regular files read safely: never through a link, never a FIFO (opening one waits for a
writer) or a device (opening one can act), whole, within a limit. The one reader of the files
this tool wrote (cache files, a run's job, a scratch folder's marker); a leaf: it imports
nothing of ours but the errors, so a plain pytest run can read its job with it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from regression.errors import StoreError

CACHE = "the cache"
"""Who wrote the files read here, as the errors name it: by default, the cache."""
RUN = "torch-regression"
"""The writer of a run's own files (its job, its scratch folder's marker)."""
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_regular(path: Path, limit: int | None = None, writer: str = CACHE,
                 mode: int | None = None) -> bytearray:
    """A regular file's bytes in a buffer of its size, filled in place (no second copy);
    StoreError, before reading, for a file of more than `limit` bytes, and for anything that
    is no regular file `writer` could have written. `mode`: see opened_regular."""
    handle, found = opened_regular(path, writer, mode)
    size = found.st_size
    try:
        if limit is not None and size > limit:
            raise StoreError(f"{path} cannot be read: it is {size} bytes, more than any "
                             f"file of its kind {writer} writes ({limit})")
        return fill(path, handle, bytearray(size))
    except OSError as exc:
        raise read_error(path, exc, writer) from None
    finally:
        os.close(handle)


def opened_regular(path: Path, writer: str = CACHE, mode: int | None = None
                   ) -> tuple[int, os.stat_result]:
    """A descriptor to read `path`, opened only if it is a regular file, and the file's
    status as it was opened. `mode`: the file's mode from the caller's own `lstat` of it just now
    (a case's record is stamped first), which spares a second one."""
    try:
        # anything else is never opened
        _require_regular(path, os.lstat(path).st_mode if mode is None else mode, writer)
        handle = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except OSError as exc:
        raise read_error(path, exc, writer) from None
    try:
        found = os.fstat(handle)
        _require_regular(path, found.st_mode, writer)  # swapped in since the lstat
    except BaseException as exc:
        os.close(handle)
        if isinstance(exc, OSError):
            raise read_error(path, exc, writer) from None
        raise
    return handle, found


def _require_regular(path: Path, mode: int, writer: str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _KINDS if test(mode)), "not a regular file")
        raise StoreError(f"{path} cannot be read: it is {kind}, where {writer} writes a "
                         f"regular file; {writer} never opens one")


def read_error(path: Path, exc: OSError, writer: str = CACHE) -> StoreError:
    """A failed read as an error that says why in words."""
    if exc.errno == errno.ELOOP:
        return StoreError(f"{path} cannot be read: it is a symbolic link, and {writer} never "
                          "reads through one")
    return StoreError(f"{path} cannot be read: {exc.strerror or exc}")


def fill(path: Path, handle: int, data: bytearray) -> bytearray:
    """`data` filled from `handle`, which must hold exactly as many bytes, no more: each
    read asks for one byte more than is left, so a file that grew says so in the same call
    (every file is read after each case: a call fewer is worth it)."""
    beyond = bytearray(1)
    with memoryview(data) as view:
        filled = 0
        while count := os.readv(handle, [view[filled:], beyond]):
            filled += count
            if filled >= len(data):
                break
    if filled != len(data):
        raise StoreError(f"{path} changed while it was read")
    return data
