"""Complex outputs end to end: a subject that returns torch.stft and torch.fft.rfft spectra,
recorded at the reference (as values and as a digest), identical when unchanged, and a
change in the imaginary part alone caught and named, in full for the digest too on demand
(`--full-values`), which leaves the cache entry as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import CONFIG, output, stored_bytes, stored_files, tagged_repo

SUBJECT = """\
import torch

IMAGINARY = {imaginary}


def _scaled(spectrum: torch.Tensor) -> torch.Tensor:
    return torch.complex(spectrum.real, spectrum.imag * IMAGINARY)


def stft(signal: torch.Tensor) -> torch.Tensor:
    return _scaled(torch.stft(signal, 32, hop_length=8, window=torch.hann_window(32),
                              return_complex=True))


def rfft(signal: torch.Tensor) -> torch.Tensor:
    return _scaled(torch.fft.rfft(signal))
"""

TESTS = """\
import subj


def test_spectra(regression):
    signal = regression.randn(256)
    regression.check({"stft": subj.stft(signal), "rfft": (subj.rfft(signal),)}, name="spectra")


def test_digest(regression):
    regression.check(subj.rfft(regression.randn(4, 256)), name="rfft", store="digest")
"""


@pytest.mark.slow
def test_complex_spectra_are_recorded_and_a_changed_imaginary_part_is_caught(
        tmp_path: Path) -> None:
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": SUBJECT.format(imaginary="1.0"), "tests/test_subj.py": TESTS})
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    records = b"".join(p.read_bytes() for p in stored_files(repo.cache) if p.suffix == ".json")
    assert records.count(b'{"complex":{"dtype":"complex64","view":{"tensor":') == 2
    assert records.count(b'{"complex":{"dtype":"complex64","view":{"digest":') == 1

    repo.write("subj/__init__.py", SUBJECT.format(imaginary="1.5"))  # real parts unchanged
    done = repo.invoke("test")
    text = output(done)
    assert done.returncode == 1, text
    assert "CHANGED tests/test_subj.py::test_spectra: 'spectra'['stft']: complex64[17, 33]: " \
           in text
    assert "['rfft'][0]: complex64[129]: " in text
    assert ", in the imaginary part only; max |diff| " in text
    assert "real part: bit-identical" in text
    assert "CHANGED tests/test_subj.py::test_digest: 'rfft': complex64[4, 129]: its bytes " \
           "differ from the reference's" in text

    recorded = stored_bytes(repo.cache)
    done = repo.invoke("test", "--full-values")
    full = output(done).split("recording the values of 1 case whose digests differ")[1]
    assert done.returncode == 1, full
    assert "'rfft': complex64[4, 129]: 508 of 516 elements differ, in the imaginary part " \
           "only; max |diff| " in full  # the 8 zero imaginary parts (0 Hz, Nyquist) stay
    assert stored_bytes(repo.cache) == recorded  # the digest is the reference again
