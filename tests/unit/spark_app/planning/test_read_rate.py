"""The read-rate cap: the token bucket and the admission decision (pure), the run's shared
ledger (a file several source processes use), the reader's prefix cut and wait, and the
JobConfig contract (``readRate``)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_app.alignment.reads import ReadLedger, job_of, ledger_file
from spark_app.contract.config import AlignmentConfig, Window, parse_config
from spark_app.contract.errors import ConfigError
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.planning.admission import Admission
from spark_app.planning.read_rate import BURST_S, PATIENCE_S, Fit, ReadBudget, TokenBucket, fit, read_cost, window_peak
from spark_app.planning.splits import FilePiece, Split, TimeRange
from spark_app.sources.iceberg import backfill_reader
from spark_app.sources.iceberg.spec import SourceSpec
from tests.unit.job_configs import BACKFILL, LIVE, variant

# --- the bucket ----------------------------------------------------------------------------


def test_a_bucket_starts_full_refills_at_its_rate_and_caps_at_capacity() -> None:
    b = TokenBucket.full(100.0, now=10.0)
    assert (b.capacity, b.available(10.0)) == (100.0 * BURST_S, 200.0)
    b = b.take(150, now=10.0)
    assert b.available(10.0) == 50.0
    assert b.available(10.5) == 100.0
    assert b.available(60.0) == 200.0  # never above capacity
    assert b.available(9.0) == 50.0  # a clock that went back refills nothing


def test_debt_is_repaid_before_anything_else_fits() -> None:
    b = TokenBucket.full(100.0, now=0.0).take(500, now=0.0)  # a split of 5 s of rate
    assert b.available(0.0) == -300.0
    assert b.seconds_until(b.need(50), now=0.0) == pytest.approx(3.5)
    assert b.seconds_until(b.need(1000), now=0.0) == pytest.approx(5.0)  # needs a full bucket, not 1000


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        TokenBucket.full(0.0, now=0.0)


# --- the admission decision ------------------------------------------------------------------


def test_uncapped_admits_everything() -> None:
    f = fit([(10, 1), (20, 2)], ReadBudget(), now=0.0)
    assert (f.count, f.wait_s, f.cost) == (2, 0.0, (30, 3))


def test_the_longest_prefix_the_tokens_pay_for() -> None:
    budget = ReadBudget.of(100, None, now=0.0)  # 200 tokens
    f = fit([(80, 1), (80, 1), (80, 1)], budget, now=0.0)
    assert (f.count, f.cost) == (2, (160, 2))
    assert f.budget.bytes is not None and f.budget.bytes.available(0.0) == 40.0


def test_a_split_larger_than_the_bucket_goes_in_alone_once_the_bucket_is_full() -> None:
    budget = ReadBudget.of(100, None, now=0.0)
    f = fit([(1000, 1), (10, 1)], budget, now=0.0)
    assert f.count == 1 and f.budget.bytes is not None and f.budget.bytes.available(0.0) == -800
    nothing = fit([(10, 1)], f.budget, now=1.0)
    assert nothing.count == 0 and nothing.wait_s == pytest.approx(7.1)  # debt 700 left, then 10 tokens
    assert fit([(10, 1)], f.budget, now=1.0 + nothing.wait_s).count == 1


def test_a_patient_source_goes_in_once_the_bucket_is_out_of_debt() -> None:
    """Sources with small splits share the bucket and keep it below a large split's need; after
    waiting PATIENCE_S a source takes its split as soon as no bucket is in debt."""
    budget = ReadBudget.of(100, None, now=0.0)  # 200 tokens of burst
    drained = fit([(190, 1)], budget, now=0.0).budget  # someone else's small split: 10 left
    assert fit([(150, 1)], drained, now=0.0).count == 0, "impatient: waits for its 150"
    patient = fit([(150, 1)], drained, now=0.0, patient=True)
    assert patient.count == 1 and patient.budget.bytes is not None
    assert patient.budget.bytes.available(0.0) == -140, "in debt by the split, as any split that does not fit"
    assert fit([(1, 1)], patient.budget, now=0.5, patient=True).count == 0, "nobody goes in while in debt"


def test_a_large_split_is_not_starved_by_sources_with_small_ones(tmp_path: Path) -> None:
    ledger = ReadLedger(tmp_path / "reads.json")
    ledger.start(100.0, None, now=0.0)
    clock, waited, big_in = 0.0, 0.0, None
    while clock < 120 and big_in is None:
        ledger.admit("job/out/small", [(20, 1)], clock)  # takes 20 whenever it fits: ~5 per second
        if (f := ledger.admit("job/out/big", [(190, 1)], clock, waited)) is not None and f.count:
            big_in = clock
        waited = clock
        clock += 0.2
    assert big_in is not None and big_in <= PATIENCE_S + 1, f"the large split waited {big_in}"


def test_every_capped_resource_must_pay() -> None:
    budget = ReadBudget.of(1_000_000, 1.0, now=0.0)  # 2 files of burst
    f = fit([(10, 1), (10, 1), (10, 1)], budget, now=0.0)
    assert f.count == 2
    later = fit([(10, 1)], f.budget, now=0.25)
    assert later.count == 0 and later.wait_s == pytest.approx(0.75)


def test_nothing_to_admit_waits_for_nothing() -> None:
    budget = ReadBudget.of(100, None, now=0.0)
    assert fit([], budget, now=0.0) == Fit(0, 0.0, budget, (0, 0))


costs_st = st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 3)), min_size=1, max_size=60)


@given(
    costs=costs_st,
    rate=st.floats(50.0, 5_000.0),
    files_rate=st.one_of(st.none(), st.floats(0.5, 20.0)),
    work=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=20),
    chunk=st.integers(1, 8),
)
@settings(max_examples=300, deadline=None)
def test_any_schedule_reads_everything_in_order_within_the_bound(
    costs: list[tuple[int, int]], rate: float, files_rate: float | None, work: list[float], chunk: int
) -> None:
    """Whatever alignment offers per batch (``chunk``) and however long batches take (``work``):
    every split is admitted eventually, in order, nothing is admitted while in debt, and over
    any interval the admitted bytes are at most rate * length + max(capacity, largest split)."""
    now, position, batches = 0.0, 0, 0
    budget = ReadBudget.of(rate, files_rate, now)
    admitted: list[tuple[float, float]] = []
    while position < len(costs):
        offered = costs[position : position + chunk]
        f = fit(offered, budget, now)
        if f.count == 0:
            assert f.wait_s > 0
            now += f.wait_s
            f = fit(offered, budget, now)
            assert f.count >= 1, "after the computed wait the next split fits"
        assert budget.bytes is not None and budget.bytes.available(now) >= -1e-6, "admitted while in debt"
        admitted += [(now, float(c[0])) for c in offered[: f.count]]
        position += f.count
        budget = f.budget
        now += work[batches % len(work)]
        batches += 1
    assert position == len(costs)
    slack = max(rate * BURST_S, max(c[0] for c in costs))
    times = [t for t, _ in admitted]
    for start in times:
        for end in times:
            if end >= start:
                inside = sum(a for t, a in admitted if start <= t <= end)
                assert inside <= rate * (end - start) + slack + 1e-6


def test_a_minute_of_capped_reads_stays_within_ten_percent() -> None:
    """The bench's question on a synthetic schedule: splits of 0.5-3 s of rate, batches that
    take 0.4-1.2 s, a cap of 1 MB/s for five minutes of reading."""
    rate = 1_000_000.0
    sizes = [int(rate * (0.5 + (i * 37 % 25) / 10)) for i in range(200)]
    now, position, i = 0.0, 0, 0
    budget = ReadBudget.of(rate, None, now)
    events: list[tuple[float, float]] = []
    while position < len(sizes):
        offered = [(s, 1) for s in sizes[position : position + 4]]
        f = fit(offered, budget, now)
        if f.count == 0:
            now += f.wait_s
            continue
        events += [(now, float(c[0])) for c in offered[: f.count]]
        position, budget = position + f.count, f.budget
        now += 0.4 + (i % 5) * 0.2
        i += 1
    assert now > 300
    assert window_peak(events, 60.0) <= 1.1 * rate * 60
    assert sum(a for _, a in events) / now <= 1.02 * rate


def test_window_peak() -> None:
    events = [(0.0, 1.0), (30.0, 2.0), (60.0, 4.0), (61.0, 8.0)]
    assert window_peak(events, 60.0) == 14.0  # [1, 61] holds 2 + 4 + 8
    assert window_peak(events, 0.5) == 8.0
    assert window_peak([], 60.0) == 0.0


# --- what a split costs: what its reads open ---------------------------------------------------

SLICE = TimeRange("event_ts", 0, 10)
LAYOUTS = {"wide": (1000, (4, 304, 704)), "plain": (500, (4,))}


def test_whole_files_and_row_group_runs_cost_their_bytes() -> None:
    split = Split(0, 1, (FilePiece("plain", None, 10, 500), FilePiece("big", (2, 3), 10, 4096)), 20, 4596)
    assert read_cost(split, LAYOUTS) == (4596, 2)


def test_a_time_slice_costs_the_row_groups_it_opens_not_its_share_of_rows() -> None:
    whole = Split(0, 1, (FilePiece("wide", None, 5, 50, SLICE),), 5, 50)
    assert read_cost(whole, LAYOUTS) == (1000, 1)  # a slice of every row group opens the file
    some = Split(0, 1, (FilePiece("wide", (1,), 5, 50, SLICE),), 5, 50)
    assert read_cost(some, LAYOUTS) == (400, 1)  # row group 1: bytes 304..704
    last = Split(0, 1, (FilePiece("wide", (2,), 5, 50, SLICE),), 5, 50)
    assert read_cost(last, LAYOUTS) == (296, 1)  # the last row group runs to the end of the file


def test_slices_of_one_file_in_one_split_are_one_read() -> None:
    late = TimeRange("event_ts", 20, 30)
    two = Split(0, 1, (FilePiece("wide", (0,), 5, 50, SLICE), FilePiece("wide", (1,), 5, 50, late)), 10, 100)
    assert read_cost(two, LAYOUTS) == (700, 1)
    with_all = Split(0, 1, (FilePiece("wide", (0,), 5, 50, SLICE), FilePiece("wide", None, 5, 50, late)), 10, 100)
    assert read_cost(with_all, LAYOUTS) == (1000, 1)


def test_an_unknown_layout_falls_back_to_the_planners_bytes() -> None:
    split = Split(0, 1, (FilePiece("elsewhere", None, 5, 77, SLICE),), 5, 77)
    assert read_cost(split, LAYOUTS) == (77, 1)


# --- the ledger: one bucket for the run's source processes ----------------------------------


def test_the_ledger_file_is_per_run_next_to_the_alignment_state() -> None:
    assert ledger_file("/tmp/kappa-alignment/g-abc.json", "bf") == Path("/tmp/kappa-alignment/g-abc.bf.reads.json")
    assert job_of("bf/out/plays") == "bf"


def test_without_a_ledger_nothing_is_capped(tmp_path: Path) -> None:
    ledger = ReadLedger(tmp_path / "none.json")
    assert ledger.admit("j/o/s", [(10, 1)], now=0.0) is None
    assert ledger.members() == {} and ledger.cap() == (None, None)


def test_the_ledger_counts_and_caps(tmp_path: Path) -> None:
    ledger = ReadLedger(tmp_path / "r.json")
    ledger.start(100, None, now=0.0)
    first = ledger.admit("j/o/a", [(150, 1), (100, 1)], now=0.0)
    assert first is not None and first.count == 1
    assert ledger.admit("j/o/b", [(100, 1)], now=0.0) == Fit(0, pytest.approx(0.5), first.budget, (0, 0))  # type: ignore[arg-type]
    second = ledger.admit("j/o/b", [(100, 1)], now=0.5, waited_s=0.5)
    assert second is not None and second.count == 1
    reads = ledger.members()
    assert (reads["j/o/a"].bytes, reads["j/o/a"].files) == (150, 1)
    assert (reads["j/o/b"].bytes, reads["j/o/b"].waited_s, reads["j/o/b"].first) == (100, 0.5, 0.5)
    assert ledger.cap() == (100.0, None)
    ledger.start(None, None, now=1.0)  # a new run: fresh counts, here uncapped
    assert ledger.members() == {} and ledger.cap() == (None, None)
    assert ledger.admit("j/o/a", [(10**9, 5)], now=1.0) == Fit(1, 0.0, ReadBudget(), (10**9, 5))


def _take_all(path: str, member: str, n: int, out: Any) -> None:
    ledger, got = ReadLedger(path), 0
    while got < n:
        f = ledger.admit(member, [(1, 1)], now=0.0)
        if f is None or f.count == 0:
            break
        got += f.count
    out.put(got)


def test_processes_share_one_bucket(tmp_path: Path) -> None:
    """Sources run in their own processes: together they get the bucket's tokens, not each."""
    path = str(tmp_path / "r.json")
    ReadLedger(path).start(50, None, now=0.0)  # 100 tokens, no refill at a frozen clock
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_take_all, args=(path, f"j/o/{i}", 1000, out)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert sum(out.get(timeout=5) for _ in procs) == 100
    assert sum(r.bytes for r in ReadLedger(path).members().values()) == 100


# --- the reader: a prefix of what alignment admitted, waiting rather than ending the query --


def _costs(sizes: list[int]) -> list[tuple[int, int]]:
    return [(s, 1) for s in sizes]


def _reader(tmp_path: Path, mode: str = "unordered") -> backfill_reader.BackfillReader:
    spec = SourceSpec(
        name="plays",
        member="bf/out/plays",
        source=IcebergBackfillSource(kind="icebergBackfill", table="demo.plays"),
        catalog={},
        ordering_column="event_ts",
        window=Window(start="2026-11-01T10:00:00Z", end="2026-11-01T11:00:00Z"),
        alignment=AlignmentConfig(mode=mode),
        group="g",
        members=("bf/out/plays",),
        watermark_file=str(tmp_path / "g.json"),
    )
    return backfill_reader.BackfillReader(spec)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def as_time(self) -> SimpleNamespace:
        """The reader module's ``time``, this clock's: patching the ``time`` module itself would
        hand it every other thread's sleeps too (a worker's cluster threads, after the node's tests)."""
        return SimpleNamespace(monotonic=self.monotonic, sleep=self.sleep)


def test_the_reader_cuts_a_prefix_and_waits_for_tokens_instead_of_admitting_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(backfill_reader, "time", clock.as_time())
    reader = _reader(tmp_path)
    ledger = reader.ledger()
    assert ledger is not None and ledger.path == tmp_path / "g.bf.reads.json"
    ledger.start(1000, None, now=clock.now)  # 2000 bytes of burst
    costs = _costs([800, 800, 800, 5000, 10])
    aligned = Admission(0, 5, None, False)
    cut, waited, at = reader._rate_cut(costs, aligned)
    assert (cut.start, cut.end, waited, clock.slept, at) == (0, 2, 0.0, [], clock.now)
    cut, waited, at = reader._rate_cut(costs, Admission(2, 5, None, False))
    assert cut.end == 3 and waited == pytest.approx(0.4, abs=0.01)  # 400 tokens left, 800 needed
    assert at == clock.now  # taken after the sleep, on the bucket's clock
    cut, waited, _ = reader._rate_cut(costs, Admission(3, 5, None, False))
    assert cut.end == 4 and waited == pytest.approx(2.0, abs=0.01)  # the big one waits for a full bucket
    cut, waited, _ = reader._rate_cut(costs, Admission(4, 5, None, True))
    assert (cut.end, cut.throttled) == (5, True) and waited == pytest.approx(3.01, abs=0.01)  # debt 3000 repaid
    reads = ledger.members()["bf/out/plays"]
    assert (reads.bytes, reads.files) == (7410, 5) and reads.waited_s == pytest.approx(5.41, abs=0.02)


def test_a_cut_never_marks_the_bound_as_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(backfill_reader, "time", clock.as_time())
    reader = _reader(tmp_path, "aligned")
    reader.ledger().start(1000, None, now=clock.now)  # type: ignore[union-attr]
    cut, _, _ = reader._rate_cut(_costs([1500, 1500]), Admission(0, 2, 10, True))
    assert (cut.end, cut.throttled, cut.bound) == (1, False, 10)


def test_nothing_offered_or_no_ledger_means_no_wait(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    costs = _costs([10**12])
    assert reader._rate_cut(costs, Admission(0, 1, None, False)) == (Admission(0, 1, None, False), 0.0, None)
    reader.ledger().start(1, None, now=0.0)  # type: ignore[union-attr]
    assert reader._rate_cut(costs, Admission(0, 0, 5, True)) == (Admission(0, 0, 5, True), 0.0, None)


def test_the_member_count_is_a_prefix_sum_of_the_plan(tmp_path: Path) -> None:
    """What a member reports to the coordinator follows from its offset alone (restarts)."""
    reader = _reader(tmp_path)
    reader._plans[7] = ([], "fp")
    reader._costs[7] = _costs([100, 200, 300])
    assert [reader.read_count(7, p) for p in range(4)] == [(0, 0), (100, 1), (300, 2), (600, 3)]


# --- the contract: JobConfig.readRate --------------------------------------------------------


def test_read_rate_on_the_wire() -> None:
    cfg = parse_config(variant(BACKFILL, readRate={"maxBytesPerSecond": 50_000_000, "maxFilesPerSecond": 2.5}))
    assert cfg.read_rate is not None
    assert (cfg.read_rate.max_bytes_per_second, cfg.read_rate.max_files_per_second) == (50_000_000, 2.5)
    assert '"readRate"' in cfg.to_json() and '"maxBytesPerSecond": 50000000' in cfg.to_json()
    assert parse_config(BACKFILL).read_rate is None


@pytest.mark.parametrize(
    ("read_rate", "message"),
    [
        ({"maxBytesPerSecond": 0}, "readRate.maxBytesPerSecond: Input should be greater than 0"),
        ({"maxFilesPerSecond": -1}, "readRate.maxFilesPerSecond: Input should be greater than 0"),
        ({"maxBytesPerSecond": "fast"}, "readRate.maxBytesPerSecond: "),
        ({"maxBytes": 10}, "readRate.maxBytes: unknown field"),
    ],
)
def test_a_bad_read_rate_is_refused_naming_the_field(read_rate: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(variant(BACKFILL, readRate=read_rate))
    assert message in str(info.value)


def test_read_rate_on_a_live_job_is_refused() -> None:
    with pytest.raises(ConfigError, match="readRate is only meaningful with mode: backfill"):
        parse_config(variant(LIVE, readRate={"maxBytesPerSecond": 1000}))
