"""Cache entries: one folder per environment fingerprint, one verified record per case."""

from __future__ import annotations

import json
import os
import stat
import time
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from regression.errors import CacheError, CacheWriteError, StoreError
from regression.environment.fingerprint import FORMAT_VERSION, differing_parts, key_of
from regression.store.cachedir import (CASES, COLLECTIONS, ENTRY_FILE, LAST_USED, EntryLock,
                                       ensure_cache_root, lock_path, remove_folder, with_fix)
from regression.store.files import Layout, Stamp, dump_verified, load_verified, stamp_of, \
    verified_layout, write_atomic, write_error
from regression.store.record import (TENSOR_FILE, CaseRecord, Collection, Output, StagedCase,
                                     StoredHarness, case_id, checked_body, checked_fields,
                                     collection_from)

FORMAT = int(FORMAT_VERSION)
_NO_FOLLOW_OR_BLOCK = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


KEEP_FOR_CHECK = 64 << 20
"""Bytes of small tensor files a check run's plan keeps, once verified, for the cases that
load them: each is read once, not twice, and memory stays bounded whatever the suite."""

RACY_NS = 2_000_000_000
"""A file written this recently may be written again without its times changing (they tick
coarsely): it is read again each time, as git does with racily clean files."""
T = TypeVar("T")


def stamp(path: Path) -> Stamp | None:
    """A file's stamp (files.Stamp); None when it cannot be read."""
    try:
        return stamp_of(os.lstat(path))
    except OSError:
        return None


def settled(found: Stamp) -> bool:
    """Whether a file was last written before the racy window: only then does its stamp
    stand for its content. Its ctime too, which nothing can set back: a copy that keeps its
    source's mtime (cp -p, rsync -t, tar) was still written now."""
    return max(found[3], found[4]) < time.time_ns() - RACY_NS


def names_code(cache_dir: Path, code: str) -> bool:
    """Whether an entry of the cache, of any environment, was made for the subject's code
    `code` (the key's "subject code" part; read without torch, which the key needs). Where
    none was, a run records every case; True where that cannot be told (a folder
    unreadable)."""
    try:
        folders = [p for p in os.scandir(cache_dir) if p.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return False
    except OSError:
        return True
    for folder in folders:
        identity = Path(folder.path) / ENTRY_FILE
        if not os.path.lexists(identity):
            continue  # not an entry (a leftover folder): no reference's
        try:
            parts = load_verified(identity).get("parts")
        except (OSError, StoreError):
            return True
        if isinstance(parts, dict) and parts.get("subject code") == code:
            return True
    return False


class Entry:
    """The cached reference for one environment fingerprint."""

    def __init__(self, cache_dir: Path, parts: Mapping[str, str], made_by: str = "",
                 reference: str = "", keep: int = 0) -> None:
        self.parts = dict(parts)
        self.made_by = made_by
        """The command that created the entry when it was not gen or test ("bisect"): shown
        by cache.list, and pruned first. Not part of the key."""
        self.reference = reference
        """The commit the entry was made at (its full SHA), shown by cache.list. Not part of
        the key: commits whose subject's code is the same share one entry."""
        self.key = key_of(self.parts)
        self.directory = cache_dir / self.key
        self.cases = self.directory / CASES
        self.identity = self.directory / ENTRY_FILE
        self._case_paths: dict[str, Path] = {}
        """Each case's record path, joined once (a case's path is wanted several times)."""
        self._layouts: dict[Path, Layout] = {}
        """Tensor files the plan verified, by path: the check that loads one takes the bytes
        the plan kept, or reads it again, but hashes and parses it again only if it changed
        since."""
        self._keep = keep
        """Bytes of verified tensor files the plan may still keep for the check that loads
        them (read once, not twice); 0 where nothing loads them (gen, an xdist worker)."""
        self._kept: dict[str, Path] = {}
        """The tensor file whose bytes are kept, by case (see release)."""
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
                    str(body.get("made_by", "")), str(body.get("reference", "")))
        if entry.directory != directory:
            raise CacheError(f"{directory} is foreign: its fingerprint hashes to {entry.key}, "
                             "not to its folder's name")
        return entry

    def exists(self) -> bool:
        return self.identity.is_file()

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
        folder = self.directory / COLLECTIONS
        for path in [] if folder.is_symlink() else sorted(folder.glob("*.json")):
            try:
                body = load_verified(path)
                file = str(body.get("file"))
                if path.name != f"{case_id(file)}.json":
                    raise StoreError(f"{path} holds the cases of {file!r}, another file's name")
                collection_from(body, file, self.key, str(path))
            except CacheError as exc:
                problems.append(str(exc))
        return problems

    def create(self) -> None:
        """Make the entry's folder and identity file if they are missing."""
        ensure_cache_root(self.directory.parent)
        self.require_own_folders()
        if not self.exists():
            body = {"format": FORMAT, "parts": self.parts, "created": time.time(),
                    **({"made_by": self.made_by} if self.made_by else {}),
                    **({"reference": self.reference} if self.reference else {})}
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
        body = self._load_once(self.identity, load_verified)
        recorded = body.get("parts")
        if not isinstance(recorded, dict) or recorded != self.parts:
            differences = differing_parts(recorded if isinstance(recorded, dict) else {},
                                          self.parts)
            raise CacheError(
                f"cache entry {self.directory} belongs to another environment "
                f"(restored from another machine?):\n  " + "\n  ".join(differences)
            )

    def case_path(self, nodeid: str) -> Path:
        path = self._case_paths.get(nodeid)
        if path is None:
            path = self._case_paths[nodeid] = self.cases / f"{case_id(nodeid)}.json"
        return path

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

    def save_collection(self, collection: Collection) -> None:
        """Store which regression cases a test file collected at the reference (atomic)."""
        folder = self.directory / COLLECTIONS
        body = {"format": FORMAT, "file": collection.file, "environment": self.key,
                "harness": collection.harness, "helpers": dict(collection.helpers),
                "cases": sorted(collection.cases), "conditions": collection.conditions}
        self.require_own_folders()
        if folder.is_symlink() or (os.path.lexists(folder) and not folder.is_dir()):
            raise CacheError(f"{folder} is not a folder the cache made; the cache never "
                             "writes through a link")
        try:
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise write_error(folder, exc, "create") from None
            write_atomic(folder / f"{case_id(collection.file)}.json", dump_verified(body))
        except CacheWriteError as exc:
            raise with_fix(exc, f"cannot store the cases of {collection.file}") from None

    def collection(self, file: str) -> Collection | None:
        """The regression cases `file` collected at the reference, as last recorded; None
        when none is stored; StoreError when what is stored cannot be trusted."""
        folder = self.directory / COLLECTIONS
        path = folder / f"{case_id(file)}.json"
        found = stamp(path)
        if folder.is_symlink() or (found is None and not os.path.lexists(path)):
            return None
        # read once a run (the plan, then the end of the run), again only once it changed
        return self._load_once(path, lambda p: collection_from(load_verified(p), file,
                                                                self.key, str(p)), found)

    def _tensor_files(self, cid: str) -> set[str]:
        """The tensor files of a case in the cases folder, from one listing per entry and
        run: listing it for every case stored would cost time in the square of the cases."""
        if not self._tensor_index and self.cases.is_dir():
            for name in os.listdir(self.cases):
                if TENSOR_FILE.fullmatch(name):
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
        try:  # one call for all three: whether it is there, its stamp, its kind
            found: os.stat_result | None = os.lstat(path)
        except OSError:
            found = None
        if found is None and not os.path.lexists(path):
            return None
        mode = found.st_mode if found else None  # None: the read says why it cannot
        return self._load_once(path, lambda p: checked_body(p, nodeid, self.key, mode),
                               stamp_of(found) if found else None)

    def _load_once(self, path: Path, load: Callable[[Path], T],
                   before: Stamp | None = None) -> T:
        """load(path), verified once in a run: a case is planned and then checked, and both
        read its record. The file is read again if its stamp (inode, size, times) changed,
        as any rewrite (always a new file, renamed into place) or edit changes it."""
        before = before or stamp(path)
        known = self._verified.get(path)
        if known is not None and before is not None and known[0] == before:
            return known[1]  # type: ignore[no-any-return]
        loaded = load(path)
        if before is not None and settled(before):
            self._verified[path] = (before, loaded)
        return loaded

    def forget(self, nodeid: str) -> None:
        """Let go of what was kept of a case's record once it is checked."""
        path = self._case_paths.pop(nodeid, None) or self.case_path(nodeid)
        self._verified.pop(path, None)

    def _require_tensors(self, nodeid: str, wanted: set[str], stored: set[str],
                         where: Path | str | None = None) -> None:
        """Raise unless the tensor file holds every tensor the record (at `where`) names."""
        missing = sorted(wanted - stored)
        if missing:
            raise StoreError(f"{where or self.case_path(nodeid)} is malformed: it names "
                             f"tensors its tensor file lacks: {', '.join(missing[:5])}")

    def valid_harness(self, nodeid: str) -> StoredHarness | None:
        """The harness of a stored case that load_case would read; None when absent."""
        loaded = self._load_body(nodeid)
        if loaded is None:
            return None
        body, wanted = loaded
        stored: set[str] = set()
        if body["tensors"]:
            path = self.cases / body["tensors"]["file"]
            self.release(nodeid)  # planned again: what the last plan kept goes back first
            layout = verified_layout(path, body["tensors"]["digest"], keep=self._keep > 0)
            if layout.data is not None and len(layout.data) <= self._keep:
                self._keep -= len(layout.data)
                self._layouts[path] = layout
                self._kept[nodeid] = path
            elif settled(layout.stamp):
                self._layouts[path] = replace(layout, data=None)
            stored = {slot.name for slot in layout.slots}
        self._require_tensors(nodeid, wanted, stored)
        return StoredHarness(str(body["harness"]), dict(body["helpers"]))

    def release(self, nodeid: str) -> None:
        """Let go of the bytes kept for a case's tensor file: planned again, or to be
        recorded again (its new record may name another file)."""
        path = self._kept.pop(nodeid, None)
        if path is not None:
            self._taken(path)

    def _taken(self, path: Path) -> Layout | None:
        """The layout the plan verified for `path`, if any, taken: the bytes it kept no
        longer count against the budget."""
        layout = self._layouts.pop(path, None)
        if layout is not None and layout.data is not None:
            self._keep += len(layout.data)
        return layout

    def digested_harness(self, nodeid: str) -> str | None:
        """The harness of a stored case that keeps some tensor as a digest only (None when
        it keeps every value, or is absent): what `--full-values` records again."""
        loaded = self._load_body(nodeid)
        if loaded is None or '"digest":' not in json.dumps(loaded[0]["outputs"]):
            return None
        return str(loaded[0]["harness"])

    def load_case(self, nodeid: str) -> CaseRecord | None:
        """The stored case, None when there is none; StoreError when it cannot be trusted."""
        path = self.case_path(nodeid)
        loaded = self._load_body(nodeid)
        self.forget(nodeid)  # read for this case's check: not kept for the rest of the run
        if loaded is None:
            return None
        return self._decoded(nodeid, *loaded, path)

    def staged_record(self, nodeid: str, body: dict[str, Any]) -> CaseRecord:
        """A case that a recording still under way staged and handed over (run/handoff.py):
        its body checked as a stored record's is, its tensors read from the file it names
        and verified; StoreError when it cannot be trusted."""
        where = f"the recording's hand-over of {nodeid}"
        return self._decoded(nodeid, *checked_fields(body, nodeid, self.key, where), where)

    def _decoded(self, nodeid: str, body: dict[str, Any], wanted: set[str],
                 where: Path | str) -> CaseRecord:
        """A checked record body with its tensors, read and verified."""
        from regression.store.codec import decode, tensors_from_file

        try:
            tensors = {}
            if body["tensors"]:
                path = self.cases / body["tensors"]["file"]
                self._kept.pop(nodeid, None)
                tensors = tensors_from_file(path, body["tensors"]["digest"], self._taken(path))
            self._require_tensors(nodeid, wanted, set(tensors), where)
            outputs = tuple(Output(o["name"], decode(o["value"], tensors))
                            for o in body["outputs"])
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise StoreError(f"{where} is malformed: {exc!r}") from None
        return CaseRecord(nodeid=nodeid, harness=body["harness"], status=body["status"],
                          reason=body["reason"], outputs=outputs, helpers=dict(body["helpers"]))
