"""Atomic, self-verifying files: what is read back is exactly what was written, or an error."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

from regression.store import strictjson
from regression.errors import CacheWriteError, NoSpaceError, ReadOnlyError, StoreError
from regression.environment.fingerprint import content_hasher, digest
from regression.nodes import MAX_DEPTH
from regression.store.regular import fill, opened_regular, read_error, read_regular
from regression.store.tensorfile import LENGTH_BYTES, Slot, header_length, parse_header

_HEADER = b"torch-regression "
MAX_RECORD = 256 << 20
"""Bytes of a verified JSON file: structure and scalars only (tensors have their own files)."""
RECORD_DEPTH = 3 * MAX_DEPTH + 8
"""JSON levels of a record: a stored value nests at most 3 per level, the record itself 3."""
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def write_error(path: Path, exc: OSError, action: str = "write") -> CacheWriteError:
    """A failed write or removal as an error that says why in words, naming path and folder."""
    reason = exc.strerror or str(exc)
    if exc.errno in _NO_SPACE:
        space = "no space left on device" if exc.errno == errno.ENOSPC \
            else f"no space left ({reason})"
        return NoSpaceError(str(path), f"{space}: cannot {action} {path.name} in {path.parent}")
    if exc.errno in _READ_ONLY:
        return ReadOnlyError(str(path), f"{path.parent} is read-only ({reason}): cannot {action} "
                                        f"{path.name} there")
    if exc.errno == errno.ELOOP:
        reason = "it is a symbolic link, and the cache never writes through one"
    if exc.errno == errno.EISDIR:
        reason = "a folder is in its place, and the cache never removes a folder it did not " \
                 "make: remove it yourself"
    return CacheWriteError(str(path), f"cannot {action} {path}: {reason}")


class Temporary:
    """A new file open for writing, each write straight to its descriptor (no buffer, and
    no second open), then renamed into place."""

    def __init__(self, handle: int, path: Path) -> None:
        self.handle = handle
        self.path = path
        self.replaced = False

    def write(self, data: bytes | memoryview) -> int:
        """Write all of `data`; the number of bytes, as a stream's write() returns."""
        with memoryview(data) as view, view.cast("B") as octets:
            done = 0
            while done < len(octets):
                done += os.write(self.handle, octets[done:])
            return done

    def close(self) -> None:
        if self.handle >= 0:
            handle, self.handle = self.handle, -1
            os.close(handle)

    def replace(self, target: Path) -> None:
        """Close the file and rename it to `target`: readers see all of it, or the old one."""
        self.close()
        os.replace(self.path, target)
        self.replaced = True


@contextmanager
def temporary_file(folder: Path, name: str) -> Iterator[Temporary]:
    """A new hidden file in `folder`, open, to write and then rename (Temporary.replace);
    removed if it is left over.

    An OSError while it is made, written or renamed (a full disk, a read-only folder) becomes
    a CacheWriteError that names `folder / name`.
    """
    target = folder / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, path = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    except OSError as exc:
        raise write_error(target, exc) from None
    temporary = Temporary(handle, Path(path))
    try:
        os.fchmod(handle, 0o666 & ~umask())  # mkstemp makes 0600; honour the umask instead
        yield temporary
    except OSError as exc:
        raise write_error(target, exc) from None
    finally:
        with suppress(OSError):
            temporary.close()
        if not temporary.replaced:
            with suppress(OSError):  # a hidden .tmp file left behind is never read
                temporary.path.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` so that `path` is either absent, the old content, or all of `data`.

    The rename makes it atomic for readers and for a killed writer. There is no fsync: a file
    torn by a power cut fails the content hash every reader checks, and is never trusted.
    """
    with temporary_file(path.parent, path.name) as temporary:
        temporary.write(data)
        temporary.replace(path)


def umask() -> int:
    """The process umask (reading it means setting it; it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dump_verified(body: dict[str, Any]) -> bytes:
    """JSON preceded by a header line holding the hash of the JSON bytes."""
    # compact: with an indent, json encodes in Python, at a third of a case's store time
    content = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    if len(content) > MAX_RECORD:
        raise StoreError(f"cannot store a record of {len(content)} bytes, more than the "
                         f"{MAX_RECORD} a record may hold: check() tensors rather than so many "
                         "numbers and strings (torch.as_tensor turns a list of numbers into one)")
    return _HEADER + digest(content).encode() + b"\n" + content


def load_verified(path: Path, mode: int | None = None) -> dict[str, Any]:
    """The JSON body of a file written with dump_verified, after checking its hash; parsed
    within bounds (size, nesting, numbers, keys), as anyone could have written it. `mode`:
    see regular.opened_regular."""
    data = bytes(read_regular(path, MAX_RECORD + len(_HEADER) + 64, mode=mode))
    header, _, content = data.partition(b"\n")
    if not header.startswith(_HEADER) or header[len(_HEADER):].decode(errors="replace") \
            != digest(content):
        raise StoreError(f"{path} is corrupt or truncated: its content hash does not match")
    try:
        body = strictjson.loads(content, RECORD_DEPTH)
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path} is not valid JSON: {exc}") from None
    except ValueError as exc:
        raise StoreError(f"{path} is not a record this tool wrote: its JSON {exc}") from None
    if not isinstance(body, dict):
        raise StoreError(f"{path} does not hold a JSON object")
    return body


Stamp = tuple[int, int, int, int, int]
"""What changes whenever a file is replaced or written: device, inode, size, mtime and ctime
in ns (ctime cannot be set back)."""


def stamp_of(found: os.stat_result) -> Stamp:
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


@dataclass(frozen=True)
class Layout:
    """A tensor file verified whole: its content hash, its stamp as it was read, and where
    its tensors lie."""

    digest: str
    stamp: Stamp
    slots: tuple[Slot, ...]
    data: bytearray | None = field(default=None, compare=False, repr=False)
    """The verified bytes themselves, where the reader keeps them (a small file read whole):
    the check that loads the file then reads it no second time."""


def read_tensor_file(path: Path, expected_digest: str, known: Layout | None = None
                     ) -> tuple[bytearray, tuple[Slot, ...] | None]:
    """The bytes of a tensor file, read once into one buffer. Its content hash is checked,
    unless `known` verified this very file with this digest and its stamp has not changed
    since (any write changes it); then its slots come too, and None otherwise. The bytes
    `known` kept are used as they are: they are what was verified."""
    if known is not None and known.data is not None and known.digest == expected_digest:
        return known.data, known.slots
    handle, opened = opened_regular(path)
    try:
        data = fill(path, handle, bytearray(opened.st_size))
        after = stamp_of(os.fstat(handle))  # after the read: a write before or during it shows
    except OSError as exc:
        raise read_error(path, exc) from None
    finally:
        os.close(handle)
    if known is not None and known.digest == expected_digest and known.stamp == after:
        return data, known.slots
    if digest(data) != expected_digest:
        raise StoreError(f"{path} is corrupt or truncated: its content hash does not match")
    return data, None


WHOLE = 1 << 20
"""Bytes of a tensor file verified from one read of it; a larger one is streamed."""


def verified_layout(path: Path, expected_digest: str, keep: bool = False) -> Layout:
    """A safetensors file's layout, after checking its hash and layout in one streaming pass,
    without torch and without unpickling; memory stays small whatever the file's size. With
    `keep`, a file small enough to be read whole keeps its bytes in the layout."""
    handle, opened = opened_regular(path)
    size, kept = opened.st_size, None
    # its stamp before the read: a write during or after the read changes it, so the bytes
    # hashed below are trusted only while it holds (read_tensor_file stamps after its read)
    found = stamp_of(opened)
    try:
        if size <= WHOLE:  # most are small: one read, no stream
            data = fill(path, handle, bytearray(size))
            content_digest = digest(data)
            header = bytes(data[:LENGTH_BYTES + _length_or_0(data)])
            kept = data if keep else None
        else:
            with open(handle, "rb", closefd=False) as stream:
                content_digest, header, size = _hash_with_header(path, stream)
    except OSError as exc:
        raise read_error(path, exc) from None
    finally:
        os.close(handle)
    if content_digest != expected_digest:
        raise StoreError(f"{path} is corrupt or truncated: its content hash does not match")
    try:
        length = header_length(header, size)
        slots = parse_header(header[LENGTH_BYTES:LENGTH_BYTES + length], size)
    except ValueError as exc:
        raise StoreError(f"{path} is not a valid safetensors file: {exc}") from None
    return Layout(expected_digest, found, tuple(slots), kept)


def _length_or_0(data: bytes | bytearray) -> int:
    """The header length a file's first bytes give; 0 when they give none that fits."""
    try:
        return header_length(bytes(data[:LENGTH_BYTES]), len(data))
    except ValueError:
        return 0  # not a safetensors file: reported once the hash is known to match


def _hash_with_header(path: Path, stream: IO[bytes], chunk: int = 1 << 20
                      ) -> tuple[str, bytes, int]:
    """The content hash of a file, its first bytes up to the end of the header, its size;
    exactly as many bytes as the file had when opened, or StoreError."""
    size = os.fstat(stream.fileno()).st_size
    hasher = content_hasher()
    header = stream.read(LENGTH_BYTES)
    try:
        header += stream.read(header_length(header, size))
    except ValueError:
        pass  # not a safetensors file: reported once the hash is known to match
    hasher.update(header)
    remaining = size - len(header)
    while remaining > 0 and (block := stream.read(min(chunk, remaining))):
        hasher.update(block)
        remaining -= len(block)
    if remaining or stream.read(1):
        raise StoreError(f"{path} changed while it was read")
    return hasher.hexdigest(), header, size
