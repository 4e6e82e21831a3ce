"""Tests of regression.store.inventory: parsing options, listing, verifying, pruning and
clearing."""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import filelock
import pytest
import torch

from regression.store.cache import Entry
from regression.store.record import CaseRecord, Collection, Output
from regression.errors import ReadOnlyError, RegressionError
from regression.store.inventory import (
    EntryInfo,
    clear,
    entries,
    folder_size,
    foreign,
    human_size,
    list_lines,
    parse_age,
    parse_size,
    prune,
    remove_entry,
    verify,
)

REFERENCE = "0123456789abcdef0123456789abcdef01234567"
PARTS = {"format": "4", "subject code": f"subj tree {REFERENCE}", "torch": "2.x", "threads": "1"}
NODEID = "tests/test_model.py::test_forward"
DAY = 86400.0


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def code(sha: str) -> str:
    """The subject code part of a commit whose subject's tree id is the commit's SHA."""
    return f"subj tree {sha}"


def make_entry(cache_dir: Path, used: float | None = None, made_by: str = "",
               reference: str = REFERENCE, **changes: str) -> Entry:
    """An entry holding one case with a tensor and its file's collection, made at the
    commit `reference` (whose subject code differs from every other's), last used at `used`
    when given."""
    entry = Entry(cache_dir, {**PARTS, "subject code": code(reference), **changes},
                  made_by=made_by, reference=reference)
    entry.create()
    entry.save_case(CaseRecord(NODEID, "h", outputs=(Output("y", torch.arange(4.0)),)))
    file = NODEID.split("::")[0]
    entry.save_collection(Collection(file, "h", {}, (NODEID,)))
    if used is not None:
        entry.touch()
        os.utime(entry.directory / "last-used", (used, used))
    return entry


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def unreadable_folder(cache_dir: Path, name: str = "f" * 32) -> Path:
    folder = cache_dir / name
    folder.mkdir(parents=True)
    (folder / "entry.json").write_bytes(b"garbage")
    return folder


# parse_size, parse_age, human_size


@pytest.mark.parametrize(("text", "size"), [
    ("500M", 500 << 20), ("2G", 2 << 30), ("1024", 1024), ("1.5K", 1536), ("10MB", 10 << 20),
    ("3GiB", 3 << 30), ("2g", 2 << 30), ("1T", 1 << 40), ("100B", 100), (" 5 K ", 5 << 10),
    ("0", 0),
])
def test_parse_size_reads_bytes_with_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1G", "", "5X", "1.5.2M", "G", "2 GB extra"])
def test_parse_size_refuses_what_is_not_a_size_naming_the_option(text: str) -> None:
    with pytest.raises(RegressionError, match=re.escape(f"--max-size {text!r} is not a size")):
        parse_size(text)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 30 * DAY), ("12h", 12 * 3600.0), ("90m", 5400.0), ("2w", 14 * DAY), ("45s", 45.0),
    ("1.5h", 5400.0), (" 2 D ", 2 * DAY),
])
def test_parse_age_reads_seconds(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["3 years", "", "10", "-1d", "5y", "d"])
def test_parse_age_refuses_what_is_not_an_age_naming_the_option(text: str) -> None:
    with pytest.raises(RegressionError, match=re.escape(f"--older-than {text!r} is not an age")):
        parse_age(text)


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 << 20, "5.0 MiB"),
    (3 << 30, "3.0 GiB"), (2048 << 30, "2048.0 GiB"),
])
def test_human_size(size: int, text: str) -> None:
    assert human_size(size) == text


def test_human_size_never_shows_1024_of_a_unit() -> None:
    assert human_size((1 << 20) - 1) == "1.0 MiB"


# entries


def test_entries_of_a_missing_or_empty_folder_are_none(cache: Path) -> None:
    assert entries(cache) == []
    cache.mkdir()
    assert entries(cache) == []


def test_entries_describe_each_entry_folder_and_nothing_else(cache: Path) -> None:
    first, second = make_entry(cache, threads="1"), make_entry(cache, threads="2")
    with first.lock():
        pass  # leaves a lock file beside the folders, which is no entry
    found = entries(cache)
    assert sorted(i.directory for i in found) == sorted([first.directory, second.directory])
    for info in found:
        assert info.entry is not None and info.entry.directory == info.directory
        assert (info.cases, info.fault) == (1, "")
        assert info.size == folder_size(info.directory) > 0


def test_entries_are_ordered_least_recently_used_first(cache: Path) -> None:
    middle = make_entry(cache, used=2000.0, threads="1")
    newest = make_entry(cache, used=3000.0, threads="2")
    oldest = make_entry(cache, used=1000.0, threads="3")
    found = entries(cache)
    assert [i.directory for i in found] == [oldest.directory, middle.directory, newest.directory]
    assert [i.last_used for i in found] == [1000.0, 2000.0, 3000.0]


def test_unreadable_entry_folder_is_listed_with_its_fault(cache: Path) -> None:
    make_entry(cache)
    folder = unreadable_folder(cache)
    (bad,) = [i for i in entries(cache) if i.directory == folder]
    assert bad.entry is None
    assert "corrupt or truncated" in bad.fault
    assert bad.cases == 0


def test_folder_without_identity_file_is_listed_as_missing_it(cache: Path) -> None:
    (cache / ("e" * 32)).mkdir(parents=True)
    (info,) = entries(cache)
    assert info.entry is None and "is missing" in info.fault


# list_lines


def test_list_of_an_empty_cache_says_so(cache: Path) -> None:
    assert list_lines(cache) == [f"no cache entries in {cache}"]


def test_list_has_a_header_and_one_row_per_entry(cache: Path) -> None:
    make_entry(cache, used=1000.0, threads="1")
    make_entry(cache, used=2000.0, threads="2")
    unreadable_folder(cache)
    lines = list_lines(cache)
    assert len(lines) == 4
    assert lines[0].startswith("  reference") and lines[0].endswith("distinguished by")


def test_list_distinguishes_entries_only_by_the_parts_that_differ(cache: Path) -> None:
    old = make_entry(cache, used=1000.0, threads="1", reference="f" * 40)
    make_entry(cache, used=2000.0, threads="2")
    header, first, second = list_lines(cache)
    assert first.startswith("  " + "f" * 12 + "  " + old.key[:16])
    assert second.startswith("  " + REFERENCE[:12])
    assert first.endswith("threads=1") and second.endswith("threads=2")
    assert "torch=" not in first + second and "reference=" not in first + second \
        and "subject code=" not in first + second


def test_list_of_entries_differing_only_by_reference_says_so(cache: Path) -> None:
    make_entry(cache, used=1000.0, reference="a" * 40)
    make_entry(cache, used=2000.0, reference="b" * 40)
    assert [line.endswith("  the reference only") for line in list_lines(cache)[1:]] == \
        [True, True]


def test_list_shows_the_commit_an_entry_was_made_at_which_is_not_in_its_key(
        cache: Path) -> None:
    made = make_entry(cache, used=1000.0, reference="c" * 40, threads="1")
    assert made.key == Entry(cache, made.parts, reference="d" * 40).key
    old = Entry(cache, {"format": "3", "reference": "e" * 40, "torch": "2.x", "threads": "2"})
    old.create()  # format 3: the commit was a part of the key
    rows = list_lines(cache)[1:3]
    assert [row[2:14] for row in rows] == ["c" * 12, "e" * 12]


def test_list_marks_an_unreadable_entry(cache: Path) -> None:
    unreadable_folder(cache)
    (row,) = list_lines(cache)[1:]
    assert row.startswith("  ?") and "NOT AN ENTRY, left alone:" in row \
        and "corrupt or truncated" in row


def test_list_marks_the_configured_reference_and_says_which_it_is(cache: Path) -> None:
    other = "e" * 40
    make_entry(cache, used=1000.0, reference=other)
    make_entry(cache, used=2000.0)
    lines = list_lines(cache, {code(REFERENCE): f"config.yaml's reference v1.0 ({REFERENCE[:12]})"})
    rows = {line[2:14]: line for line in lines[1:3]}
    assert rows[REFERENCE[:12]].startswith("* ") and rows[other[:12]].startswith("  ")
    assert lines[3:] == [f"* config.yaml's reference v1.0 ({REFERENCE[:12]})"]


def test_list_says_when_the_configured_reference_has_no_entry(cache: Path) -> None:
    make_entry(cache, reference="e" * 40)
    lines = list_lines(cache, {code(REFERENCE): f"config.yaml's reference v1.0 ({REFERENCE[:12]})"})
    assert not any(line.startswith("*") for line in lines)
    assert lines[-1] == (f"  config.yaml's reference v1.0 ({REFERENCE[:12]}) has no entry "
                         "here: `invoke gen` records it")


def test_list_names_the_entries_bisect_made_and_that_prune_takes_them_first(
        cache: Path) -> None:
    for sha in "abc":
        make_entry(cache, used=1000.0, made_by="bisect", reference=sha * 40)
    make_entry(cache, used=500.0, made_by="bisect")  # bisect ran from the reference
    lines = list_lines(cache, {code(REFERENCE): f"config.yaml's reference v1.0 ({REFERENCE[:12]})"})
    made = [line.split()[-4] for line in lines[1:5]]  # made by, before "the reference only"
    assert made == ["bisect"] * 4
    assert lines[-1] == ("3 entries made by `invoke bisect` (one per commit it recorded): "
                         "`invoke cache.prune` removes them before any other entry, e.g. "
                         "`invoke cache.prune --older-than 1d`")
    make_entry(cache, threads="2")  # made by gen or test
    lines = list_lines(cache)
    assert sum("  gen/test  " in line for line in lines) == 1
    assert sum("  bisect  " in line for line in lines) == 4


def test_who_made_an_entry_is_stored_with_it_and_not_in_its_key(cache: Path) -> None:
    made = make_entry(cache, made_by="bisect")
    assert made.key == Entry(cache, PARTS).key
    assert Entry.from_directory(made.directory).made_by == "bisect"
    plain = make_entry(cache, threads="2")
    assert Entry.from_directory(plain.directory).made_by == ""


def test_prune_by_size_removes_what_bisect_made_before_older_entries(cache: Path) -> None:
    old = make_entry(cache, used=1000.0, threads="1")
    bisected = [make_entry(cache, used=2000.0 + i, made_by="bisect", reference=sha * 40)
                for i, sha in enumerate("ab")]
    at_reference = make_entry(cache, used=1500.0, made_by="bisect", threads="3")
    kept = sum(i.size for i in entries(cache) if i.directory in (old.directory,
                                                                 at_reference.directory))
    removed = prune(cache, max_size=kept, older_than=None, configured={code(REFERENCE)})
    assert [i.directory for i in removed] == [e.directory for e in bisected]
    assert old.directory.exists() and at_reference.directory.exists()


# verify


def case_file(entry: Entry) -> Path:
    return entry.case_path(NODEID)


def tensor_file(entry: Entry) -> Path:
    (path,) = entry.cases.glob("*.safetensors")
    return path


def test_verify_of_a_clean_cache_finds_nothing(cache: Path) -> None:
    make_entry(cache, threads="1")
    make_entry(cache, threads="2")
    assert verify(cache) == []


def test_verify_reports_a_flipped_byte_in_a_case_file(cache: Path) -> None:
    entry = make_entry(cache)
    flip_last_byte(case_file(entry))
    (fault,) = verify(cache)
    assert str(case_file(entry)) in fault and "corrupt or truncated" in fault


def test_verify_reports_a_flipped_byte_in_a_tensor_file(cache: Path) -> None:
    entry = make_entry(cache)
    path = tensor_file(entry)
    flip_last_byte(path)
    (fault,) = verify(cache)
    assert str(path) in fault and "corrupt or truncated" in fault


def test_verify_reports_a_folder_named_for_another_fingerprint(cache: Path) -> None:
    entry = make_entry(cache)
    entry.directory.rename(cache / ("f" * 32))
    (fault,) = verify(cache)
    assert "foreign" in fault and str(cache / ("f" * 32)) in fault


def test_verify_reports_each_fault_once(cache: Path) -> None:
    first, second = make_entry(cache, threads="1"), make_entry(cache, threads="2")
    flip_last_byte(case_file(first))
    flip_last_byte(tensor_file(second))
    unreadable_folder(cache)
    assert len(verify(cache)) == 3


# prune, clear, remove_entry


def three_entries(cache: Path) -> list[Entry]:
    """Entries used one day apart, oldest first."""
    return [make_entry(cache, used=1000.0 + n * DAY, threads=str(n)) for n in range(3)]


def test_prune_by_age_removes_entries_unused_for_longer(cache: Path) -> None:
    old, middle, new = three_entries(cache)
    removed = prune(cache, max_size=None, older_than=1.5 * DAY, now=1000.0 + 2 * DAY)
    assert [i.directory for i in removed] == [old.directory]
    assert not old.directory.exists()
    assert middle.directory.exists() and new.directory.exists()


def test_prune_by_size_removes_least_recently_used_until_under_the_limit(cache: Path) -> None:
    old, middle, new = three_entries(cache)
    sizes = [i.size for i in entries(cache)]
    removed = prune(cache, max_size=sum(sizes) - 1, older_than=None)
    assert [i.directory for i in removed] == [old.directory]
    assert [i.directory for i in entries(cache)] == [middle.directory, new.directory]


def test_prune_by_size_removes_as_many_as_needed(cache: Path) -> None:
    old, middle, new = three_entries(cache)
    newest_size = entries(cache)[-1].size
    removed = prune(cache, max_size=newest_size, older_than=None)
    assert [i.directory for i in removed] == [old.directory, middle.directory]
    assert [i.directory for i in entries(cache)] == [new.directory]


def test_prune_to_size_zero_removes_every_entry(cache: Path) -> None:
    made = three_entries(cache)
    removed = prune(cache, max_size=0, older_than=None)
    assert [i.directory for i in removed] == [e.directory for e in made]
    assert entries(cache) == []


def test_prune_within_both_limits_removes_nothing(cache: Path) -> None:
    three_entries(cache)
    total = folder_size(cache)
    assert prune(cache, max_size=total, older_than=10 * DAY, now=1000.0 + 3 * DAY) == []
    assert prune(cache, max_size=None, older_than=None) == []
    assert len(entries(cache)) == 3


def test_clear_removes_every_entry_and_keeps_the_cache_folder(cache: Path) -> None:
    made = three_entries(cache)
    removed = clear(cache)
    assert sorted(i.directory for i in removed) == sorted(e.directory for e in made)
    assert not any(e.directory.exists() for e in made)
    assert [p.name for p in cache.iterdir() if p.is_dir()] == []


def test_remove_entry_removes_the_folder_and_keeps_its_lock_file(cache: Path) -> None:
    entry = make_entry(cache)
    with entry.lock():
        pass
    remove_entry(entry.directory)
    assert not entry.directory.exists()
    assert (cache / f"{entry.key}.lock").exists()  # removing it would race with waiters


def test_remove_entry_unlinks_the_identity_file_first_while_holding_the_lock(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = make_entry(cache)
    seen: dict[str, bool] = {}

    def interrupted_rmtree(path: Path, **kwargs: object) -> None:
        seen["identity"] = (Path(path) / "entry.json").exists()
        try:
            filelock.FileLock(str(cache / f"{entry.key}.lock"), timeout=0).acquire()
            seen["locked"] = False
        except filelock.Timeout:
            seen["locked"] = True

    monkeypatch.setattr(shutil, "rmtree", interrupted_rmtree)
    remove_entry(entry.directory)
    assert seen == {"identity": False, "locked": True}
    (info,) = entries(cache)  # the half-removed entry is never read as valid
    assert info.entry is None and "entry.json is missing" in info.fault


def test_clear_and_prune_never_touch_folders_that_are_not_entries(cache: Path) -> None:
    make_entry(cache)
    (cache / "src").mkdir()
    (cache / "src" / "keep.py").write_text("x = 1\n")
    clear(cache)
    prune(cache, max_size=0, older_than=0)
    assert (cache / "src" / "keep.py").read_text() == "x = 1\n"


def not_ours(cache: Path, tmp_path: Path) -> dict[str, Path]:
    """Things in the cache named like entries that the cache cannot prove its own."""
    cache.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious.txt").write_text("keep me\n")
    renamed = make_entry(cache, threads="9")
    moved = cache / ("d" * 32)
    renamed.directory.rename(moved)  # a real entry under another name: no proof
    linked = make_entry(tmp_path / "other-cache", threads="8")
    link = cache / linked.key  # a real entry, but reached through a link
    link.symlink_to(linked.directory, target_is_directory=True)
    user = cache / ("a" * 32)  # e.g. a folder named by an MD5 sum
    user.mkdir()
    (user / "data.bin").write_bytes(b"user data")
    (cache / ("b" * 32)).symlink_to(target, target_is_directory=True)
    return {"corrupt": unreadable_folder(cache), "renamed": moved, "linked": link,
            "user": user, "link": cache / ("b" * 32)}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("clean", [
    lambda cache: clear(cache),
    lambda cache: prune(cache, max_size=0, older_than=None),
    lambda cache: prune(cache, max_size=None, older_than=0.0, now=1e12),
], ids=["clear", "prune-size", "prune-age"])
def test_clear_and_prune_remove_only_what_they_prove_their_own(
        cache: Path, tmp_path: Path, clean: Callable[[Path], list[EntryInfo]]) -> None:
    ours = make_entry(cache, threads="1")
    strangers = not_ours(cache, tmp_path)
    before = snapshot(tmp_path / "elsewhere") | snapshot(tmp_path / "other-cache")
    kept = {name: snapshot(path) for name, path in strangers.items() if not path.is_symlink()}
    removed = clean(cache)
    assert [i.directory for i in removed] == [ours.directory]
    assert not ours.directory.exists()
    assert all(path.is_symlink() or path.is_dir() for path in strangers.values())
    assert {name: snapshot(path) for name, path in strangers.items()
            if not path.is_symlink()} == kept
    assert snapshot(tmp_path / "elsewhere") | snapshot(tmp_path / "other-cache") == before
    assert sorted(i.directory for i in foreign(cache)) == sorted(strangers.values())


def test_each_thing_left_alone_says_why(cache: Path, tmp_path: Path) -> None:
    strangers = not_ours(cache, tmp_path)
    faults = {i.directory: i.fault for i in foreign(cache)}
    assert "corrupt or truncated" in faults[strangers["corrupt"]]
    assert "hashes to" in faults[strangers["renamed"]]
    assert "symbolic link" in faults[strangers["linked"]]
    assert "symbolic link" in faults[strangers["link"]]
    assert "is missing" in faults[strangers["user"]]


def test_remove_entry_refuses_what_is_not_provably_an_entry(cache: Path, tmp_path: Path) -> None:
    strangers = not_ours(cache, tmp_path)
    for path in strangers.values():
        assert remove_entry(path) is False
        assert path.is_symlink() or path.is_dir()


def test_clearing_a_read_only_cache_is_an_error_that_names_the_folder(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = make_entry(cache)
    monkeypatch.setattr("regression.store.cache.os.access", lambda *args, **kwargs: False)
    with pytest.raises(ReadOnlyError) as raised:
        clear(cache)
    message = str(raised.value)
    assert f"cannot remove the cache entry {entry.directory}" in message
    assert f"the cache folder {cache} is read-only" in message and "Fix:" in message
    assert entry.exists()


def killed_while_removing(entry: Entry) -> None:
    """`remove_entry` of `entry` in a child process that is killed (SIGKILL) by its own hand
    once the removal has deleted one file: a `cache.prune` killed half-way."""
    pid = os.fork()
    if pid == 0:
        def killed_rmtree(path: Path, **kwargs: object) -> None:
            next(p for p in Path(path).rglob("*") if p.is_file()).unlink()
            os.kill(os.getpid(), signal.SIGKILL)

        shutil.rmtree = killed_rmtree  # type: ignore[assignment]
        try:
            remove_entry(entry.directory)
        finally:
            os._exit(3)  # never reached: the child was killed in its removal
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_a_removal_killed_half_way_leaves_no_folder_under_the_entrys_name(cache: Path) -> None:
    entry = make_entry(cache)
    killed_while_removing(entry)
    assert not entry.directory.exists()
    (info,) = entries(cache)
    assert info.directory.name.startswith(f".trash-{entry.key}-")
    assert info.entry is None and info.leftover
    assert "`invoke cache.prune` and `cache.clear` remove it" in info.fault
    assert verify(cache) == [info.fault]
    assert Entry(cache, PARTS).load_case(NODEID) is None  # nothing of it reads as stored


@pytest.mark.parametrize("reclaim", [lambda c: prune(c, None, 1e9), clear],
                         ids=["prune", "clear"])
def test_prune_and_clear_reclaim_a_removal_killed_half_way(
        cache: Path, reclaim: Callable[[Path], list[EntryInfo]]) -> None:
    kept = make_entry(cache, threads="2")
    killed_while_removing(make_entry(cache))
    removed = reclaim(cache)
    assert sum(info.leftover for info in removed) == 1
    assert len(removed) == (2 if reclaim is clear else 1)
    assert not [p for p in cache.iterdir() if p.name.startswith(".trash-")]
    assert verify(cache) == []
    assert kept.directory.exists() == (reclaim is not clear)
    assert not [p for p in cache.glob(".trash-*.lock")], "a lock file per trash folder"


def test_a_trash_folder_holding_what_the_cache_never_writes_is_left_alone(
        cache: Path, tmp_path: Path) -> None:
    entry = make_entry(cache)
    killed_while_removing(entry)
    (trash,) = cache.glob(".trash-*")
    (trash / "notes.txt").write_text("mine")
    assert clear(cache) == [] and (trash / "notes.txt").exists()
    assert [info.directory for info in foreign(cache)] == [trash]
