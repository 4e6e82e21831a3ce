"""Tensors stored as digests, end to end: recorded without their values, a one-bit change
caught, and the full report given on demand (`invoke test --full-values`)."""

from __future__ import annotations

from pathlib import Path

from helpers import CONFIG, output, stored_bytes, stored_files, tagged_repo

SUBJECT = """\
import torch


def weights() -> dict[str, torch.Tensor]:
    values = torch.linspace(-1.0, 1.0, 64 * 256).reshape(64, 256)
    {change}
    return {{"weight": values, "bias": torch.zeros(4)}}
"""

TESTS = """\
import subj


def test_init(regression):
    regression.check(subj.weights(), name="init", store="digest")


def test_threshold(regression):
    regression.check(subj.weights(), name="state")  # storage.digest_above decides
"""


def test_digests_are_compared_bit_exact_and_reported_in_full_on_demand(tmp_path: Path) -> None:
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path=".") +
        "storage:\n  digest_above: 1 KiB\n",
        "subj/__init__.py": SUBJECT.format(change="pass"), "tests/test_subj.py": TESTS})
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    stored = sum(path.stat().st_size for path in stored_files(repo.cache))
    assert stored < 16 * 1024, stored  # two 64 KiB weights, kept as digests only

    repo.write("subj/__init__.py", SUBJECT.format(  # one bit of one element flipped
        change="values.view(torch.int32)[17, 33] ^= 1"))
    done = repo.invoke("test")
    text = output(done)
    assert done.returncode == 1, text
    for case, name in (("test_init", "'init'"), ("test_threshold", "'state'")):
        assert f"CHANGED tests/test_subj.py::{case}: {name}['weight']: float32[64, 256]: its " \
               "bytes differ from the reference's (a digest: the values were not stored)" in text
    assert "reference: min -1, max 1, mean" in text
    assert "`invoke test --full-values` records them at the reference" in text
    assert "all differing elements" not in text  # no values to show

    digests_only = stored_bytes(repo.cache)
    done = repo.invoke("test", "--full-values")
    text = output(done)
    assert done.returncode == 1, text
    assert "recording the values of 2 cases whose digests differ" in text
    full = text.split("recording the values of")[1]
    assert "float32[64, 256]: 1 of 16384 elements differ" in full
    assert "all differing elements:\n" in full and "(17, 33): reference" in full
    assert "a digest: the values were not stored" not in full
    # the values were for that report only: the entry holds the digest-only records again
    assert stored_bytes(repo.cache) == digests_only
    assert "the cache keeps the digests of 2 cases again" in full
