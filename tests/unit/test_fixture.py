"""Tests of regression.plugin.fixture: the case's own inputs, check(), and both sinks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from regression.store.cache import Entry
from regression.store.record import ABSENT, CaseRecord, Output
from regression.compare.outputs import compare
from regression.config.settings import Determinism
from regression.environment.determinism import REDUCED_PRECISION
from regression.errors import DeterminismError, StoreError
from regression.plugin.fixture import CheckSink, RecordSink, Regression, snapshot
from regression.store.digest import TensorDigest

NODEID = "tests/test_model.py::test_forward"


def current(seed: int = 0) -> Determinism:
    """Settings that match how torch runs in this process, so check() finds no drift."""
    return Determinism(seed=seed, threads=torch.get_num_threads(),
                       deterministic_algorithms=torch.are_deterministic_algorithms_enabled())


@pytest.fixture(autouse=True)
def _tf32_off() -> Iterator[None]:
    """The plugin turns TF32 and reduced-precision reductions off before every case;
    check() refuses to run with them on."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    reduced = [getattr(torch.backends.cuda.matmul, flag) for flag in REDUCED_PRECISION]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for flag in REDUCED_PRECISION:
        setattr(torch.backends.cuda.matmul, flag, False)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    for flag, value in zip(REDUCED_PRECISION, reduced):
        setattr(torch.backends.cuda.matmul, flag, value)


def make(nodeid: str = NODEID, seed: int = 0) -> tuple[Regression, RecordSink]:
    sink = RecordSink()
    return Regression(nodeid, current(seed), sink), sink


def test_check_refuses_a_thread_count_other_than_the_configured_one() -> None:
    settings = Determinism(threads=torch.get_num_threads() + 1)
    sink = RecordSink()
    with pytest.raises(DeterminismError, match="determinism.threads is"):
        Regression(NODEID, settings, sink).check(torch.ones(2))
    assert sink.outputs == []  # nothing recorded under the wrong settings


def test_check_refuses_deterministic_algorithms_switched_off() -> None:
    switched = not torch.are_deterministic_algorithms_enabled()
    settings = Determinism(threads=torch.get_num_threads(), deterministic_algorithms=switched)
    with pytest.raises(DeterminismError, match="deterministic_algorithms"):
        Regression(NODEID, settings, RecordSink()).check(torch.ones(2))


def draws(case: Regression) -> list[torch.Tensor]:
    return [case.randn(2, 3), case.rand(4), case.randint(0, 100, (5,)),
            case.randn(2, dtype=torch.float64)]


def test_inputs_are_reproducible_for_the_same_nodeid_and_seed() -> None:
    first, second = draws(make()[0]), draws(make()[0])
    assert compare(first, second) == []


def test_inputs_differ_for_another_nodeid() -> None:
    first, other = draws(make()[0]), draws(make(NODEID + "[x]")[0])
    assert all(not torch.equal(a, b) for a, b in zip(first, other))


def test_inputs_differ_for_another_seed() -> None:
    assert not torch.equal(make(seed=0)[0].randn(8), make(seed=1)[0].randn(8))


def test_inputs_do_not_depend_on_the_global_generator() -> None:
    state = torch.get_rng_state()
    try:
        torch.manual_seed(1)
        first = draws(make()[0])
        torch.manual_seed(2)
        torch.randn(10)
        second = draws(make()[0])
    finally:
        torch.set_rng_state(state)
    assert compare(first, second) == []


def test_inputs_do_not_advance_the_global_generator() -> None:
    state = torch.get_rng_state()
    draws(make()[0])
    assert torch.equal(torch.get_rng_state(), state)


def test_input_shapes_and_dtypes() -> None:
    case = make()[0]
    assert case.randn(2, 3).shape == (2, 3)
    assert case.randn(5, dtype=torch.float16).dtype == torch.float16
    ints = case.randint(3, 7, [1000], dtype=torch.int32)
    assert ints.dtype == torch.int32
    assert int(ints.min()) >= 3 and int(ints.max()) <= 6


def test_size_may_be_one_sequence() -> None:
    case = make()[0]
    assert case.rand(torch.Size([4, 1])).shape == (4, 1)  # type: ignore[arg-type]
    assert case.randn([5]).shape == (5,)  # type: ignore[arg-type]
    assert compare(make()[0].randn((2, 3)), make()[0].randn(2, 3)) == []  # type: ignore[arg-type]


def test_check_records_a_snapshot_that_later_edits_do_not_change() -> None:
    case, sink = make()
    value = torch.zeros(3)
    inner = [value]
    case.check({"t": value, "list": inner}, name="out")
    value.add_(1)
    inner.append(value)
    assert len(sink.outputs) == 1
    assert sink.outputs[0].name == "out"
    assert compare({"t": torch.zeros(3), "list": [torch.zeros(3)]}, sink.outputs[0].value) == []


def test_check_names_unnamed_outputs_by_position() -> None:
    case, sink = make()
    case.check(torch.ones(1))
    case.check(2.0)
    case.check("x", name="named")
    assert [o.name for o in sink.outputs] == ["0", "1", "named"]


def test_check_refuses_a_duplicate_name() -> None:
    case, sink = make()
    case.check(torch.ones(1), name="y")
    with pytest.raises(ValueError, match="'y' is checked twice"):
        case.check(torch.ones(1), name="y")
    assert len(sink.outputs) == 1


@pytest.mark.parametrize("name", [torch.ones(2), 3, ("a",), b"logits"])
def test_check_refuses_a_name_that_is_no_text(name: object) -> None:
    """The arguments swapped (`check("logits", model(x))`) or a name of another type: a
    clear error at the call, not a failure to store the record at the end of the run."""
    case, sink = make()
    with pytest.raises(TypeError, match="the name must be text, not .*the value comes first"):
        case.check("logits", name=name)  # type: ignore[arg-type]
    assert sink.outputs == []


def test_check_refuses_an_unstorable_value() -> None:
    case, sink = make()
    with pytest.raises(StoreError, match=r"at \[1\]"):
        case.check([1, {1, 2}], name="bad")
    assert sink.outputs == []


def test_check_of_a_value_nested_thousands_deep_is_a_store_error_naming_the_limit() -> None:
    case, sink = make()
    value: object = torch.ones(1)
    for _ in range(5000):
        value = {"x": value}
    with pytest.raises(StoreError, match=r"at \['x'\]\['x'\]\['x'\]\['x'\]\.\.\.\['x'\]\['x'\] "
                                         r"\(101 levels\): it is nested more than 100 levels"):
        case.check(value, name="deep")
    assert sink.outputs == []


def test_snapshot_detaches_and_copies() -> None:
    original = torch.ones(2, requires_grad=True)
    copy = snapshot(original)
    assert isinstance(copy, torch.Tensor)
    assert not copy.requires_grad
    assert copy.data_ptr() != original.data_ptr()


def stored_and_loaded(value: object, tmp_path: Path) -> CaseRecord:
    """A case recorded with check(value), through the cache's files and back."""
    case, sink = make()
    case.check(value, name="out")
    entry = Entry(tmp_path / "cache", {"part": "1"})
    entry.create()
    entry.save_case(CaseRecord(NODEID, "h", outputs=tuple(sink.outputs)))
    record = entry.load_case(NODEID)
    assert record is not None
    return record


@pytest.mark.parametrize(("recorded", "checked", "missing", "extra"), [
    ({1: "t"}, {1.0: "t"}, "1 (int)", "1.0 (float)"),
    ({1: "t"}, {True: "t"}, "1 (int)", "True (bool)"),
    ({0.0: "t"}, {-0.0: "t"}, "0.0 (float)", "-0.0 (float)"),
], ids=["int-float", "int-bool", "minus-zero"])
def test_stored_dict_keys_keep_their_type_and_bits(
        tmp_path: Path, recorded: dict[object, str], checked: dict[object, str], missing: str,
        extra: str) -> None:
    case, sink = check_case(stored_and_loaded(recorded, tmp_path))
    case.check(checked, name="out")
    failure = sink.failure() or ""
    assert f"keys missing: {missing}" in failure
    assert f"keys not in reference: {extra}" in failure


def test_stored_nan_and_tuple_keys_match_the_same_keys_checked_again(tmp_path: Path) -> None:
    def value() -> dict[object, object]:
        return {float("nan"): torch.ones(2), True: 1, (1, -0.0): 2, 1.5: None}

    case, sink = check_case(stored_and_loaded(value(), tmp_path))
    case.check(value(), name="out")
    assert sink.differences == []


def reference_record() -> CaseRecord:
    return CaseRecord(NODEID, "h", outputs=(
        Output("logits", torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
        Output("meta", {"n": 3}),
    ))


def check_case(record: CaseRecord | None = None) -> tuple[Regression, CheckSink]:
    sink = CheckSink(record or reference_record(), "abc1234 (main)")
    return Regression(NODEID, current(), sink), sink


def test_check_sink_passes_identical_values() -> None:
    case, sink = check_case()
    case.check(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), name="logits")
    case.check({"n": 3}, name="meta")
    assert sink.in_reference
    assert sink.differences == []
    assert sink.unchecked() == []


def test_check_sink_fails_naming_the_output_and_the_difference() -> None:
    case, sink = check_case()
    case.check(torch.tensor([[1.0, 2.0], [3.0, 4.5]]), name="logits")
    message = sink.failure() or ""
    assert message.startswith(
        "output 'logits' is not bit-identical to the reference abc1234 (main):\n")
    assert "'logits': float32[2, 2]: 1 of 4 elements differ; max |diff| 0.5 at (1, 1)" in message
    assert [d.path for d in sink.differences] == ["'logits'"]


def test_check_sink_names_the_nested_location() -> None:
    case, sink = check_case()
    case.check({"n": 4}, name="meta")
    assert "'meta'['n']: 4, reference 3" in (sink.failure() or "")


def test_check_sink_fails_for_an_output_the_reference_lacks() -> None:
    case, sink = check_case()
    case.check(torch.ones(1), name="extra")
    assert "not in the reference (it has: 'logits', 'meta')" in (sink.failure() or "")


def test_check_sink_compares_every_output_and_fails_once_listing_each() -> None:
    case, sink = check_case()
    case.check(torch.tensor([[1.0, 2.0], [3.0, 4.5]]), name="logits")  # no raise: go on
    case.check({"n": 4}, name="meta")
    failure = sink.failure() or ""
    assert failure.startswith("2 of 2 outputs are not bit-identical to the reference "
                              "abc1234 (main): 'logits', 'meta'\n")
    assert "  'logits': float32[2, 2]: 1 of 4 elements differ" in failure
    assert "\n      ULP distances: " in failure  # the full report, under its output
    assert "  'meta'['n']: 4, reference 3" in failure
    assert sink.detail().endswith("(and 1 more output differs: 'meta')")


def test_check_sink_reports_unchecked_outputs() -> None:
    case, sink = check_case()
    case.check(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), name="logits")
    assert sink.unchecked() == ["meta"]


def test_absent_record_is_not_in_reference_and_never_raises() -> None:
    record = CaseRecord(NODEID, "h", status=ABSENT, reason="failed at the reference")
    case, sink = check_case(record)
    case.check(torch.ones(3), name="anything")
    case.check([1, 2])
    assert sink.in_reference is False
    assert sink.checked == ["anything", "1"]
    assert sink.differences == []
    assert sink.unchecked() == []


def test_check_sink_compares_against_inputs_drawn_the_same_way() -> None:
    recorder, recorded = make()
    recorder.check(recorder.randn(4) * 2, name="y")
    record = CaseRecord(NODEID, "h", outputs=tuple(recorded.outputs))
    checker, sink = check_case(record)
    checker.check(checker.randn(4) * 2, name="y")
    assert sink.differences == []


def test_randint_takes_an_int_size() -> None:
    from regression.plugin.fixture import RecordSink, Regression

    drawn = Regression("t.py::x", current(), RecordSink()).randint(0, 10, 5)
    assert drawn.shape == (5,) and drawn.dtype == torch.int64


class LookingSink:
    """Sees each value only during take(), as CheckSink does."""

    keeps_values = False

    def __init__(self) -> None:
        self.seen: list[object] = []

    def take(self, name: str, value: object) -> None:
        self.seen.append(value)

    def digest_above(self, store: str | None) -> int | None:
        return None


def test_a_sink_that_only_looks_gets_detached_views_not_copies() -> None:
    output = torch.arange(6.0, requires_grad=True).reshape(2, 3).t()
    sink = LookingSink()
    Regression(NODEID, current(), sink).check({"x": output})
    seen = sink.seen[0]
    assert isinstance(seen, dict)
    assert seen["x"].data_ptr() == output.data_ptr() and seen["x"].stride() == output.stride()
    assert not seen["x"].requires_grad


def test_check_sink_keeps_no_value_and_compares_non_contiguous_outputs() -> None:
    assert CheckSink.keeps_values is False and RecordSink.keeps_values is True
    case, sink = check_case()
    case.check(torch.tensor([[1.0, 3.0], [2.0, 4.0]]).t(), name="logits")
    assert sink.differences == []


def test_check_mode_still_refuses_an_unstorable_value() -> None:
    case, sink = check_case()
    with pytest.raises(StoreError, match=r"at \[1\]"):
        case.check([1, {1, 2}], name="logits")
    assert sink.checked == []


def test_the_case_s_device_is_where_the_input_helpers_put_their_tensors() -> None:
    on_meta = Regression(NODEID, current(), RecordSink(), "meta")
    assert on_meta.device == torch.device("meta")
    made = [on_meta.randn(2, 3), on_meta.rand(2), on_meta.randint(0, 5, (2,))]
    assert [t.device.type for t in made] == ["meta"] * 3
    assert on_meta.randn(2, device="cpu").device.type == "cpu"  # an explicit device wins


def test_inputs_are_drawn_on_the_cpu_so_every_device_gets_the_same_bits() -> None:
    on_cpu = Regression(NODEID, current(), RecordSink(), "cpu")
    elsewhere = Regression(NODEID, current(), RecordSink(), "meta")
    elsewhere.randn(4, 5)  # drawn from the case's CPU generator, then moved
    on_cpu.randn(4, 5)
    assert on_cpu.generator.get_state().equal(elsewhere.generator.get_state())
    assert torch.equal(on_cpu.randn(3), elsewhere.randn(3, device="cpu"))
    assert Regression(NODEID, current(), RecordSink()).device == torch.device("cpu")


def _large() -> torch.Tensor:
    return torch.randn(1 << 16, generator=torch.Generator().manual_seed(0))


def test_record_mode_takes_large_tensors_as_digests() -> None:
    """store="digest": every tensor; config's threshold: the larger ones; store="values":
    none; and a trace (digests off) or the check sink never digests."""
    small = torch.ones(4)
    for store, threshold, digests, kinds in [
            ("digest", None, True, (TensorDigest, TensorDigest)),
            (None, 1024, True, (TensorDigest, torch.Tensor)),
            (None, None, True, (torch.Tensor, torch.Tensor)),
            ("values", 0, True, (torch.Tensor, torch.Tensor)),
            ("digest", 0, False, (torch.Tensor, torch.Tensor))]:
        sink = RecordSink(threshold, digests=digests)
        regression = Regression("t.py::t", current(), sink)
        regression.check({"big": _large(), "small": small}, name="out", store=store)
        value = sink.outputs[0].value
        assert isinstance(value, dict)
        assert (type(value["big"]), type(value["small"])) == kinds, (store, threshold, digests)


@pytest.mark.parametrize("store", ["digests", "Digest", ""])
def test_an_unknown_store_choice_says_which_there_are(store: str) -> None:
    regression = Regression("t.py::t", current(), RecordSink())
    with pytest.raises(ValueError, match="use store='digest'.*store='values'"):
        regression.check(torch.ones(2), store=store)
