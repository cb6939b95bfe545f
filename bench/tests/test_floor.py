"""The per-batch fixed cost the backfill bench reports against its floor (issue 15)."""

from __future__ import annotations

from typing import Any

from bench.floor import batch_overhead_s


def batch(rows: int, ms: float) -> dict[str, Any]:
    return {"numInputRows": rows, "durationMs": {"triggerExecution": ms}}


def test_the_overhead_is_the_intercept_of_time_on_rows() -> None:
    # 1.2 s per batch plus 0.5 ms per row, and an empty trigger that does not count
    progress = [batch(n, 1200 + 0.5 * n) for n in (1000, 4000, 9000, 20000)] + [batch(0, 50)]
    assert batch_overhead_s(progress) == 1.2


def test_same_sized_batches_give_their_median_and_too_few_give_none() -> None:
    assert batch_overhead_s([batch(100, ms) for ms in (900, 1000, 1500)]) == 1.0
    assert batch_overhead_s([batch(100, 900), batch(0, 10)]) is None


def test_a_fit_pulled_below_zero_is_bounded_by_the_cheapest_batch() -> None:
    progress = [batch(10, 300), batch(20, 250), batch(1_000_000, 60_000), batch(2_000_000, 130_000)]
    assert batch_overhead_s(progress) == 0.25
