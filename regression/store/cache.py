"""Cache entries: one folder per environment fingerprint, one verified record per case."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import xxhash

from regression.errors import CacheError, CacheWriteError, NoSpaceError, ReadOnlyError, StoreError
from regression.fingerprint import FORMAT_VERSION, differing_parts, key_of
from regression.store.files import dump_verified, load_verified, verify_safetensors, write_atomic, write_error
from regression.nodes import tensor_names

RECORDED = "recorded"
ABSENT = "absent"
NONDETERMINISTIC = "nondeterministic"
"""Recorded, but two recordings at the reference differed: never compared."""
ENTRY_FILE = "entry.json"
LAST_USED = "last-used"
CASES = "cases"
FORMAT = int(FORMAT_VERSION)
GITIGNORE = b"# Created by torch-regression.\n*\n"
_NO_FOLLOW_OR_BLOCK = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_FIXES = {
    NoSpaceError: "free space (`invoke cache.prune --max-size 2G` removes the least recently "
                  "used entries) or point REGRESSION_CACHE_DIR at a bigger disk",
    ReadOnlyError: "make the cache folder writable, or point REGRESSION_CACHE_DIR at a "
                   "writable folder",
}


@dataclass(frozen=True)
class Output:
    """One value a test passed to regression.check, under its name."""

    name: str
    value: object


@dataclass(frozen=True)
class CaseRecord:
    """What the reference revision produced for one test case."""

    nodeid: str
    harness: str
    status: str = RECORDED
    reason: str = ""
    outputs: tuple[Output, ...] = field(default_factory=tuple)
    helpers: Mapping[str, str] = field(default_factory=dict)
    """Test code found while recording (helper modules, files the tests read), by name
    relative to the project, with the digest of each: an edit invalidates the case."""


@dataclass(frozen=True)
class StagedCase:
    """A case whose tensors are written and whose record is not yet: see Entry.stage_case."""

    nodeid: str
    body: Mapping[str, object]
    tensor_file: str | None
    fresh: bool
    """Whether this recording made the tensor file (no earlier one had the same bytes)."""


@dataclass(frozen=True)
class StoredHarness:
    """What a stored case was recorded with: the harness digest and its helpers'."""

    digest: str
    helpers: Mapping[str, str]


def case_id(nodeid: str) -> str:
    """The file-name-safe identity of a test case."""
    return xxhash.xxh3_64_hexdigest(nodeid.encode())


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


def remove_folder(directory: Path) -> None:
    """Remove an entry folder, its identity file first so that a half-removed entry never
    reads as valid; a symbolic link (or a file) in its place loses only itself."""
    try:
        if directory.is_symlink() or directory.is_file():
            directory.unlink()
        elif directory.is_dir():
            (directory / ENTRY_FILE).unlink(missing_ok=True)
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
    tensor files and their temporary files. Anything else, or an identity file, and the
    folder is not provably a leftover: prune and clear leave it alone.
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
        if path.name == CASES and not path.is_symlink() and path.is_dir():
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
        self.lock_file = str(path)
        from filelock import FileLock  # 30 ms to import: only runs that record or prune

        self._lock = FileLock(self.lock_file)

    @property
    def is_locked(self) -> bool:
        return self._lock.is_locked

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


Stamp = tuple[int, int, int, int, int]
RACY_NS = 2_000_000_000
"""A file written this recently may be written again without its times changing (they tick
coarsely): it is read again each time, as git does with racily clean files."""
T = TypeVar("T")


def stamp(path: Path) -> Stamp | None:
    """What changes whenever a file is replaced or written: device, inode, size, mtime and
    ctime in ns (ctime cannot be set back); None when it cannot be read."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


class Entry:
    """The cached reference for one environment fingerprint."""

    def __init__(self, cache_dir: Path, parts: Mapping[str, str], made_by: str = "") -> None:
        self.parts = dict(parts)
        self.made_by = made_by
        """The command that created the entry when it was not gen or test ("bisect"): shown
        by cache.list, and pruned first. Not part of the key."""
        self.key = key_of(self.parts)
        self.directory = cache_dir / self.key
        self.cases = self.directory / CASES
        self._tensor_index: dict[str, set[str]] = {}
        """Tensor files in the cases folder by case id, listed once (see _tensor_files)."""
        self._verified: dict[Path, tuple[Stamp, Any]] = {}
        """Files verified in this run, by path: read again only once they changed."""

    @classmethod
    def from_directory(cls, directory: Path) -> Entry:
        """The entry stored in `directory`; CacheError when its name does not match its content."""
        if directory.is_symlink():
            raise CacheError(f"{directory} is a symbolic link, not an entry folder the cache "
                             "made; the cache never writes or deletes through one")
        body = load_verified(directory / ENTRY_FILE)
        parts = body.get("parts")
        if not isinstance(parts, dict):
            raise StoreError(f"{directory / ENTRY_FILE} holds no fingerprint")
        entry = cls(directory.parent, {str(k): str(v) for k, v in parts.items()},
                    str(body.get("made_by", "")))
        if entry.directory != directory:
            raise CacheError(f"{directory} is foreign: its fingerprint hashes to {entry.key}, "
                             "not to its folder's name")
        return entry

    def exists(self) -> bool:
        return (self.directory / ENTRY_FILE).is_file()

    def lock(self) -> EntryLock:
        """The lock held while this entry is generated or removed; freed if its holder dies."""
        return EntryLock(lock_path(self.directory.parent, self.key))

    def touch(self) -> bool:
        """Mark the entry as used now, for least-recently-used pruning.

        Only a hint: in a read-only or full cache it is skipped (False), never an error. It
        never follows a link and never makes the entry's folder.
        """
        path = self.directory / LAST_USED
        try:
            if path.is_symlink():
                path.unlink()
            elif os.path.lexists(path) and not path.is_file():
                return False  # a FIFO, device or folder put there: never opened
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | _NO_FOLLOW_OR_BLOCK, 0o666)
            try:
                if not stat.S_ISREG(os.fstat(handle).st_mode):
                    return False  # swapped in since: neither waited for nor touched
                os.utime(handle if os.utime in os.supports_fd else path)
            finally:
                os.close(handle)
        except OSError:
            return False
        return True

    def last_used(self) -> float:
        for name in (LAST_USED, ENTRY_FILE):
            with suppress(OSError):
                return (self.directory / name).lstat().st_mtime  # a link's own, never its target's
        return 0.0

    def stored_cases(self) -> list[Path]:
        """The case records in this entry."""
        return sorted(self.cases.glob("*.json")) if self.cases.is_dir() else []

    def faults(self) -> list[str]:
        """Everything in this entry that would not be trusted when read, as messages."""
        problems = []
        try:
            self.verify_identity()
        except CacheError as exc:
            problems.append(str(exc))
        for path in self.stored_cases():
            try:
                nodeid = str(load_verified(path).get("nodeid"))
                if self.case_path(nodeid) != path:
                    raise StoreError(f"{path} holds the case {nodeid!r} of another file name")
                self.valid_harness(nodeid)
            except CacheError as exc:
                problems.append(str(exc))
        return problems

    def create(self) -> None:
        """Make the entry's folder and identity file if they are missing."""
        ensure_cache_root(self.directory.parent)
        self.require_own_folders()
        if not self.exists():
            body = {"format": FORMAT, "parts": self.parts, "created": time.time(),
                    **({"made_by": self.made_by} if self.made_by else {})}
            try:
                write_atomic(self.directory / ENTRY_FILE, dump_verified(body))
            except CacheWriteError as exc:
                with suppress(OSError):
                    self.directory.rmdir()  # only if empty: a folder of ours, left unfinished
                raise with_fix(exc, f"cannot create the cache entry {self.directory}") from None
        self.verify_identity()

    def require_own_folders(self) -> None:
        """Raise CacheError when the entry or its cases folder is a link or not a folder:
        the cache never writes or deletes through a link, so such an entry is foreign."""
        for folder in (self.directory, self.cases):
            try:
                mode = os.lstat(folder).st_mode  # one call: this runs for every case checked
            except OSError:
                continue  # missing: made when needed
            if not stat.S_ISDIR(mode):
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
                raise CacheError(f"{folder} is {what}, not a folder the cache made; the cache "
                                 "never writes or deletes through a link")

    def discard(self) -> None:
        """Remove this entry (under its lock); a link in its place loses only itself."""
        try:
            remove_folder(self.directory)
        except CacheWriteError as exc:
            raise with_fix(exc, f"cannot discard the cache entry {self.directory}") from None

    def verify_identity(self) -> None:
        """Raise unless the stored fingerprint is exactly the current one."""
        self.require_own_folders()
        body = self._load_once(self.directory / ENTRY_FILE, load_verified)
        recorded = body.get("parts")
        if not isinstance(recorded, dict) or recorded != self.parts:
            differences = differing_parts(recorded if isinstance(recorded, dict) else {},
                                          self.parts)
            raise CacheError(
                f"cache entry {self.directory} belongs to another environment "
                f"(restored from another machine?):\n  " + "\n  ".join(differences)
            )

    def case_path(self, nodeid: str) -> Path:
        return self.cases / f"{case_id(nodeid)}.json"

    def save_case(self, record: CaseRecord) -> None:
        """Store one case atomically: tensors first, then the record that names them."""
        self.commit_case(self.stage_case(record), record.helpers)

    def stage_case(self, record: CaseRecord) -> StagedCase:
        """Write a case's tensors now, and keep only its record's small body: a recording
        lets go of each case's outputs as it ends, and names the case (commit_case) once the
        whole recording is proven the reference's. Until then no record names the tensors,
        so nothing reads them."""
        from regression.store.codec import Encoder, save_tensors

        self.require_own_folders()
        cid = case_id(record.nodeid)
        encoder = Encoder(prefix="t", copy=False)  # written out before this returns
        outputs = [{"name": o.name, "value": encoder.encode(o.value)} for o in record.outputs]
        body: dict[str, object] = {
            "format": FORMAT, "nodeid": record.nodeid, "environment": self.key,
            "harness": record.harness, "status": record.status, "reason": record.reason,
            "outputs": outputs, "tensors": None, "helpers": dict(record.helpers),
        }
        tensor_file, fresh = None, False
        if encoder.tensors:
            earlier = self._tensor_files(cid)
            try:
                tensor_file, tensor_digest = save_tensors(self.cases, cid,
                                                          dict(encoder.tensors))
            except CacheWriteError as exc:
                raise with_fix(exc, f"cannot store the reference of {record.nodeid}") from None
            body["tensors"] = {"file": tensor_file, "digest": tensor_digest}
            fresh = tensor_file not in earlier
        return StagedCase(record.nodeid, body, tensor_file, fresh)

    def commit_case(self, staged: StagedCase, helpers: Mapping[str, str]) -> None:
        """Write a staged case's record (with the helpers its recording found), which makes
        it valid, and remove the tensor files of its earlier recordings."""
        body = {**staged.body, "helpers": dict(helpers)}
        cid = case_id(staged.nodeid)
        earlier = self._tensor_files(cid)
        try:
            write_atomic(self.cases / f"{cid}.json", dump_verified(body))
        except CacheWriteError as exc:  # the record is written last: nothing reads as valid
            raise with_fix(exc, f"cannot store the reference of {staged.nodeid}") from None
        tensor_file = staged.tensor_file
        for old in earlier - {tensor_file}:
            with suppress(OSError):  # an orphan tensor file is never read
                (self.cases / old).unlink(missing_ok=True)
        self._tensor_index[cid] = {tensor_file} if tensor_file else set()

    def _tensor_files(self, cid: str) -> set[str]:
        """The tensor files of a case in the cases folder, from one listing per entry and
        run: listing it for every case stored would cost time in the square of the cases."""
        if not self._tensor_index and self.cases.is_dir():
            for name in os.listdir(self.cases):
                if _TENSOR_FILE.fullmatch(name):
                    self._tensor_index.setdefault(name[:16], set()).add(name)
            self._tensor_index.setdefault("", set())  # listed, even if empty
        return set(self._tensor_index.get(cid, ()))

    def drop_staged(self, staged: StagedCase) -> None:
        """A recording that is not stored: the tensor files it wrote go (not one an earlier
        recording wrote with the same bytes, which its record still names)."""
        if staged.tensor_file and staged.fresh:
            with suppress(OSError):
                (self.cases / staged.tensor_file).unlink(missing_ok=True)

    def _load_body(self, nodeid: str) -> tuple[dict[str, Any], set[str]] | None:
        """A case's record, checked to decode fully, and the tensor names its values use;
        None when absent, StoreError when untrusted."""
        path = self.case_path(nodeid)
        if not os.path.lexists(path):
            return None
        return self._load_once(path, lambda p: self._checked_body(p, nodeid))

    def _load_once(self, path: Path, load: Callable[[Path], T]) -> T:
        """load(path), verified once in a run: a case is planned and then checked, and both
        read its record. The file is read again if its stamp (inode, size, times) changed,
        as any rewrite (always a new file, renamed into place) or edit changes it."""
        before = stamp(path)
        known = self._verified.get(path)
        if known is not None and before is not None and known[0] == before:
            return known[1]  # type: ignore[no-any-return]
        loaded = load(path)
        if before is not None and before[3] < time.time_ns() - RACY_NS:
            self._verified[path] = (before, loaded)
        return loaded

    def forget(self, nodeid: str) -> None:
        """Let go of what was kept of a case's record once it is checked."""
        self._verified.pop(self.case_path(nodeid), None)

    def _checked_body(self, path: Path, nodeid: str) -> tuple[dict[str, Any], set[str]]:
        """A case's record from `path`, checked to decode fully, and its tensor names."""
        body = load_verified(path)
        if body.get("nodeid") != nodeid or body.get("environment") != self.key:
            raise StoreError(f"{path} belongs to another case or environment")
        problem = _shape_problem(body)
        if problem:
            raise StoreError(f"{path} is malformed: {problem}")
        names: set[str] = set()
        for output in body["outputs"]:
            try:
                names.update(tensor_names(output["value"]))
            except StoreError as exc:
                raise StoreError(f"{path} is malformed: output {output['name']!r} {exc}") from None
        return body, names

    def _require_tensors(self, nodeid: str, wanted: set[str], stored: set[str]) -> None:
        """Raise unless the tensor file holds every tensor the record names."""
        missing = sorted(wanted - stored)
        if missing:
            raise StoreError(f"{self.case_path(nodeid)} is malformed: it names tensors its "
                             f"tensor file lacks: {', '.join(missing[:5])}")

    def valid_harness(self, nodeid: str) -> StoredHarness | None:
        """The harness of a stored case that load_case would read; None when absent."""
        loaded = self._load_body(nodeid)
        if loaded is None:
            return None
        body, wanted = loaded
        stored: set[str] = set()
        if body["tensors"]:
            stored = verify_safetensors(self.cases / body["tensors"]["file"],
                                        body["tensors"]["digest"])
        self._require_tensors(nodeid, wanted, stored)
        return StoredHarness(str(body["harness"]), dict(body["helpers"]))

    def digested_harness(self, nodeid: str) -> str | None:
        """The harness of a stored case that keeps some tensor as a digest only (None when
        it keeps every value, or is absent): what `--full-values` records again."""
        loaded = self._load_body(nodeid)
        if loaded is None or '"digest":' not in json.dumps(loaded[0]["outputs"]):
            return None
        return str(loaded[0]["harness"])

    def load_case(self, nodeid: str) -> CaseRecord | None:
        """The stored case, None when there is none; StoreError when it cannot be trusted."""
        from regression.store.codec import decode, tensors_from_file

        loaded = self._load_body(nodeid)
        self.forget(nodeid)  # read for this case's check: not kept for the rest of the run
        if loaded is None:
            return None
        body, wanted = loaded
        try:
            tensors = {}
            if body["tensors"]:
                tensors = tensors_from_file(self.cases / body["tensors"]["file"],
                                            body["tensors"]["digest"])
            self._require_tensors(nodeid, wanted, set(tensors))
            outputs = tuple(Output(o["name"], decode(o["value"], tensors))
                            for o in body["outputs"])
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise StoreError(f"{self.case_path(nodeid)} is malformed: {exc!r}") from None
        return CaseRecord(nodeid=nodeid, harness=body["harness"], status=body["status"],
                          reason=body["reason"], outputs=outputs, helpers=dict(body["helpers"]))


_TENSOR_FILE = re.compile(r"[0-9a-f]{16}\.[0-9a-f]{16}\.safetensors")


def _shape_problem(body: dict[str, Any]) -> str:
    """What is wrong with the fields of a case record, "" when nothing."""
    if body.get("status") not in (RECORDED, ABSENT, NONDETERMINISTIC):
        return f"unknown status {body.get('status')!r}"
    if not isinstance(body.get("harness"), str) or not isinstance(body.get("reason"), str):
        return "harness and reason must be strings"
    helpers = body.get("helpers")
    if not isinstance(helpers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in helpers.items()):
        return "helpers must map file names to digests"
    outputs = body.get("outputs")
    if not isinstance(outputs, list) or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str) and isinstance(o.get("value"),
                                                                                dict)
            for o in outputs):
        return "outputs must be a list of named values"
    if len({o["name"] for o in outputs}) != len(outputs):
        return "two outputs have one name"
    tensors = body.get("tensors")
    if tensors is not None and not (
            isinstance(tensors, dict) and isinstance(tensors.get("digest"), str)
            and isinstance(tensors.get("file"), str) and _TENSOR_FILE.fullmatch(tensors["file"])):
        return "bad tensors field"
    return ""
