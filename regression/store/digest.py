"""A tensor stored as a digest: its dtype, shape, the xxh3-128 of its bytes and a summary.

For outputs too large to keep (a model's initial weights, checked for a thousand models):
the comparison stays bit-exact (equal digests of one dtype and shape), and the summary says
what the values were like, since the values themselves are not stored. A complex tensor's
digest is that of its real view (torch.view_as_real: the same bytes), under its complex
dtype and shape; its summary is of both parts together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from regression.nodes import COMPLEX_PARTS, float_bits, float_from_bits
from regression.store.tensorbytes import byte_blocks, complex_name, dtype_name, resolved

if TYPE_CHECKING:
    import torch

STATS = ("min", "max", "mean", "std")
"""Summary statistics of the finite values, as float64; None where there is none."""
COUNTS = ("nan", "inf")
"""How many elements are NaN, and how many are infinite."""


@dataclass(frozen=True)
class TensorDigest:
    """What is kept of a tensor stored as a digest: enough to compare it bit for bit."""

    dtype: str
    """The safetensors name of its dtype (F32, BF16, I64...); torch's for a complex dtype
    (complex64), which safetensors stores as its real view."""
    shape: tuple[int, ...]
    xxh3: str
    """xxh3-128 of its bytes in row-major (contiguous) order, little-endian, as hex."""
    stats: tuple[float | None, ...] = (None, None, None, None)
    counts: tuple[int, int] = (0, 0)

    @property
    def is_complex(self) -> bool:
        return self.dtype in COMPLEX_PARTS

    def real_view(self) -> TensorDigest:
        """The digest of a complex tensor's real view (its own digest for a real tensor):
        the same bytes, in the dtype of its parts, with a last dim of 2."""
        if not self.is_complex:
            return self
        return replace(self, dtype=COMPLEX_PARTS[self.dtype], shape=(*self.shape, 2))

    def of_complex(self, dtype: str) -> TensorDigest:
        """The digest of the complex tensor (of torch dtype `dtype`) this real view holds."""
        return replace(self, dtype=dtype, shape=self.shape[:-1])

    def node(self) -> dict[str, Any]:
        """The JSON content of its {"digest": ...} node (floats by their exact bits); a
        complex tensor's node holds its real_view's (store/codec.py)."""
        return {"dtype": self.dtype, "shape": list(self.shape), "xxh3": self.xxh3,
                **{k: None if v is None else float_bits(v) for k, v in zip(STATS, self.stats)},
                **dict(zip(COUNTS, self.counts))}

    @classmethod
    def from_node(cls, content: dict[str, Any]) -> TensorDigest:
        """The digest a node holds (checked first by nodes.tensor_names)."""
        stats = tuple(None if content[k] is None else float_from_bits(content[k])
                      for k in STATS)
        nan, inf = (int(content[k]) for k in COUNTS)
        return cls(str(content["dtype"]), tuple(content["shape"]), str(content["xxh3"]),
                   stats, (nan, inf))

    def summary(self) -> str:
        """Its statistics in one line, for a report that has no values to show."""
        shown = ", ".join(f"{k} {'-' if v is None else f'{v:.6g}'}"
                          for k, v in zip(STATS, self.stats))
        parts = "real and imaginary parts together: " if self.is_complex else ""
        return f"{parts}{shown}, {self.counts[0]} NaN, {self.counts[1]} inf"


def digest_tensor(tensor: torch.Tensor) -> TensorDigest:
    """The digest of a tensor, and its statistics; memory stays a chunk, not a copy. A
    complex tensor's is its real view's, under its complex dtype and shape."""
    import torch

    if tensor.is_complex():
        view = torch.view_as_real(resolved(tensor.detach()))
        return digest_tensor(view).of_complex(complex_name(tensor.dtype))

    count, mean, m2, low, high, nan, inf = 0, 0.0, 0.0, math.inf, -math.inf, 0, 0
    for piece in _pieces(tensor):
        part, part_nan, part_inf = _finite(piece)
        nan, inf = nan + part_nan, inf + part_inf
        if part.numel():
            n, part_mean, part_m2, part_low, part_high = _moments(part)
            delta = part_mean - mean  # Chan et al.: two pieces' moments as one
            mean += delta * n / (count + n)
            m2 += part_m2 + delta * delta * count * n / (count + n)
            count += n
            low, high = min(low, part_low), max(high, part_high)
    stats: tuple[float | None, ...] = (None, None, None, None)
    if count:
        stats = (low, high, mean, math.sqrt(max(m2 / count, 0.0)))
    return TensorDigest(dtype_name(tensor.dtype), tuple(tensor.shape), tensor_xxh3(tensor),
                        stats, (nan, inf))


def _finite(piece: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """The piece's finite values, and how many are NaN and infinite: no copy where all are
    finite (the usual case, told by a finite sum: a NaN or an infinity makes the sum one)."""
    import torch

    if not piece.is_floating_point() or math.isfinite(float(piece.sum(dtype=_wide(piece)))):
        return piece, 0, 0
    finite = torch.isfinite(piece)
    nan = int(piece.isnan().sum())
    return piece[finite], nan, int((~finite).sum()) - nan


def _wide(values: torch.Tensor) -> torch.dtype:
    """The dtype a float piece is summed in: its own, float32 for half precision."""
    import torch

    return torch.float32 if values.element_size() < 4 else values.dtype


def _moments(values: torch.Tensor) -> tuple[int, float, float, float, float]:
    """Count, mean, sum of squared deviations, min and max of a 1-D piece of finite values,
    in about the time of its hash: a sum, a min-max and a dot product, in the piece's own
    precision (float32 for half precision, float64 for integers and where the squares
    overflow). Where the mean is large beside the spread (a norm's weights near 1), the
    deviations are measured from the mean instead, lest the squares cancel."""
    import torch

    if not values.is_floating_point():
        values = values.to(torch.float64)  # integers and booleans: exact as float64
    elif values.dtype != _wide(values):
        values = values.to(_wide(values))
    n = values.numel()
    low, high = torch.aminmax(values)
    mean = float(values.sum()) / n
    squares = float(torch.dot(values, values))
    if not math.isfinite(squares) and values.dtype != torch.float64:
        values = values.to(torch.float64)  # finite values whose squares overflow
        mean, squares = float(values.sum()) / n, float(torch.dot(values, values))
    m2 = squares - n * mean * mean
    if m2 < 1e-3 * squares:
        centered = values - mean
        m2 = float(torch.dot(centered, centered))
    return n, mean, max(m2, 0.0), float(low), float(high)


def tensor_xxh3(tensor: torch.Tensor) -> str:
    """xxh3-128 of a tensor's bytes in row-major order, whatever its strides or device."""
    from regression.environment.fingerprint import content_hasher

    hasher = content_hasher()
    for piece in _pieces(tensor):
        for block in byte_blocks(piece):
            hasher.update(block)
    return hasher.hexdigest()


def _pieces(tensor: torch.Tensor) -> Any:
    """The values as contiguous CPU pieces in row-major order (lazy bits resolved; a
    complex tensor's real view: the same bytes)."""
    import torch

    from regression.compare.tensordiff import CHUNK, pieces

    tensor = resolved(tensor.detach())
    return pieces(torch.view_as_real(tensor) if tensor.is_complex() else tensor, CHUNK)
