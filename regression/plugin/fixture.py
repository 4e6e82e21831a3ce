"""The object behind the `regression` fixture: the case's own inputs, and check()."""

from __future__ import annotations

from typing import Protocol, Sequence

import torch

from regression.store.record import ABSENT, CaseRecord, Output
from regression.compare.outputs import Difference, compare
from regression.config.settings import Determinism
from regression.environment.determinism import case_seed, require_unchanged
from regression.errors import StoreError
from regression.report import changed_detail, mismatch_message
from regression.store.codec import Encoder, decode


STORE_CHOICES = ("values", "digest")


def snapshot(value: object, copy: bool = True, digest_above: int | None = None) -> object:
    """`value` checked to be storable, its tensors detached: CPU copies that later in-place
    edits don't reach, or (copy=False) views, for a value used before its owner can edit it;
    tensors of more than `digest_above` bytes as their digests."""
    encoder = Encoder(prefix="", copy=copy, digest_above=digest_above)
    return decode(encoder.encode(value), encoder.tensors)


class Sink(Protocol):
    """Where checked outputs go: recorded at the reference, compared in check mode."""

    keeps_values: bool  # whether values outlive take(), so it must get copies

    def take(self, name: str, value: object) -> None: ...

    def digest_above(self, store: str | None) -> int | None:
        """Bytes above which a tensor is taken as its digest (None: always its values)."""


class RecordSink:
    """Keeps every checked output of one case for storage; large tensors as digests."""

    keeps_values = True

    def __init__(self, digest_above: int | None = None, digests: bool = True) -> None:
        self.outputs: list[Output] = []
        self.threshold = digest_above
        """config.yaml's storage.digest_above, for a check() that does not choose."""
        self.digests = digests
        """False where the values themselves are wanted (a trace, full values on demand)."""

    def digest_above(self, store: str | None) -> int | None:
        if not self.digests or store == "values":
            return None
        return 0 if store == "digest" else self.threshold

    def take(self, name: str, value: object) -> None:
        self.outputs.append(Output(name, value))


class CheckSink:
    """Compares each checked output with the reference record, bit for bit. A differing
    output does not stop the test: every output is compared, and the case fails once, at
    its end, with `failure()`."""

    keeps_values = False  # compared within take(); only the differences' text is kept

    def digest_above(self, store: str | None) -> int | None:
        return None  # the values are compared: with the stored values or their digest

    def __init__(self, record: CaseRecord, reference: str) -> None:
        self.record = record
        self.reference = reference
        self.checked: list[str] = []
        self.changed: list[tuple[str, list[Difference]]] = []
        """Each differing output's name and differences, in the order checked."""

    @property
    def in_reference(self) -> bool:
        return self.record.status != ABSENT

    @property
    def differences(self) -> list[Difference]:
        return [d for _, differences in self.changed for d in differences]

    def take(self, name: str, value: object) -> None:
        self.checked.append(name)
        if not self.in_reference:
            return
        stored = {o.name: o.value for o in self.record.outputs}
        if name not in stored:
            found = ", ".join(repr(n) for n in stored) or "none"
            differences = [Difference(repr(name), f"not in the reference (it has: {found})")]
        else:
            differences = compare(stored[name], value, name=repr(name))
        if differences:
            self.changed.append((name, differences))

    def failure(self) -> str | None:
        """Why the case fails: every output that differs, in full; None when none does."""
        if not self.changed:
            return None
        return mismatch_message(self.reference, self.changed, len(self.checked))

    def detail(self) -> str:
        """The changed case in one line, for the summary."""
        return changed_detail(self.changed)

    def unchecked(self) -> list[str]:
        """Outputs the reference has that this run did not check."""
        return [o.name for o in self.record.outputs if o.name not in self.checked]


class Regression:
    """Inputs from the case's own generator, and check() against the reference revision."""

    def __init__(self, nodeid: str, settings: Determinism, sink: Sink,
                 device: str = "cpu") -> None:
        self.nodeid = nodeid
        self.generator = torch.Generator().manual_seed(case_seed(settings.seed, nodeid))
        self.device = torch.device(device)
        """Where the case runs: config.yaml's `device` (or --device). Move the model there;
        the input helpers already put their tensors there."""
        self._settings = settings
        self._sink = sink
        self._names: list[str] = []

    def randn(self, *size: int | Sequence[int], dtype: torch.dtype | None = None,
              device: torch.device | str | None = None) -> torch.Tensor:
        """Standard normal values from the case's generator, on `device` (default: the
        case's). Drawn on the CPU and then moved, so every device gets the same bits."""
        return self._placed(torch.randn(*_shape(size), generator=self.generator, dtype=dtype),
                            device)

    def rand(self, *size: int | Sequence[int], dtype: torch.dtype | None = None,
             device: torch.device | str | None = None) -> torch.Tensor:
        """Uniform [0, 1) values from the case's generator, on `device` (default: the case's)."""
        return self._placed(torch.rand(*_shape(size), generator=self.generator, dtype=dtype),
                            device)

    def randint(self, low: int, high: int, size: int | Sequence[int],
                dtype: torch.dtype = torch.int64,
                device: torch.device | str | None = None) -> torch.Tensor:
        """Integers in [low, high) from the case's generator, on `device` (default: the
        case's)."""
        shape = (size,) if isinstance(size, int) else tuple(size)
        return self._placed(torch.randint(low, high, shape, generator=self.generator,
                                          dtype=dtype), device)

    def _placed(self, values: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
        target = self.device if device is None else torch.device(device)
        return values if target.type == "cpu" else values.to(target)

    def check(self, value: object, name: str | None = None, store: str | None = None) -> None:
        """Record `value` at the reference; in check mode, require it bit-identical.

        `store="digest"` keeps only a digest of each tensor's bytes at the reference (and a
        summary), not its values: as exact a comparison, a much smaller cache, and a report
        that cannot show values until asked to record them. `store="values"` keeps the
        values whatever config.yaml's storage.digest_above says.
        """
        __tracebackhide__ = True
        if store is not None and store not in STORE_CHOICES:
            raise ValueError(f"store={store!r}: use store='digest' (keep a digest of each "
                             "tensor), store='values' (keep the values) or leave it out "
                             "(config.yaml's storage.digest_above decides)")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"check(value, name): the name must be text, not "
                            f"{type(name).__name__}; the value comes first, as in "
                            "regression.check(model(x), \"logits\")")
        name = str(len(self._names)) if name is None else name
        if name in self._names:
            raise ValueError(f"output name {name!r} is checked twice in this test; "
                             "give each check() a distinct name")
        self._names.append(name)
        require_unchanged(self._settings)  # the key says which settings made these bits
        try:
            taken = snapshot(value, copy=self._sink.keeps_values,
                             digest_above=self._sink.digest_above(store))
        except StoreError as exc:
            raise StoreError(f"output {name!r}: {exc}") from None
        self._sink.take(name, taken)


def _shape(size: Sequence[object]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        return tuple(size[0])
    return tuple(size)  # type: ignore[arg-type]
