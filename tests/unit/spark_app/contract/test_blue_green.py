"""The blue/green hand-over's rules on hand-written offset logs: the seam, the boundary, the
catch-up and the compared window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from spark_app.contract.blue_green import (
    FinalBatch,
    NoWatermarkError,
    Position,
    boundary,
    caught_up,
    compare_window,
    durable_batch,
    off_seam,
    position,
)
from spark_app.contract.checkpoints.layout import parse_offsets

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def entry(watermark: datetime | None, *sources: str) -> str:
    meta = {"batchTimestampMs": 1} | ({"batchWatermarkMs": ms(watermark)} if watermark else {})
    return "\n".join(["v1", json.dumps(meta), *sources])


KAFKA_AT_42 = '{"impressions":{"0":42,"1":17}}'
KAFKA_AT_43 = '{"impressions":{"0":43,"1":17}}'
KAFKA_REORDERED = '{"impressions":{"1":17,"0":42}}'


def test_the_durable_batch_is_the_newest_done_or_recorded_with_its_offsets_logged() -> None:
    assert durable_batch(with_offsets=[0, 1, 2, 3], committed=[0, 1]) == 1
    # batch 2 was recorded for commit (the sink's pending log) before Spark logged it done
    assert durable_batch(with_offsets=[0, 1, 2, 3], committed=[0, 1], recorded=[2]) == 2
    # batch 3 has offsets only: it may run again with other input after a restart
    assert durable_batch(with_offsets=[3], committed=[], recorded=[]) is None
    # a commit without its offsets (a checkpoint being cleaned) is not a position
    assert durable_batch(with_offsets=[5], committed=[4, 5]) == 5
    assert durable_batch(with_offsets=[], committed=[4]) is None


def test_a_position_parses_each_sources_offsets_and_keeps_a_source_without_one() -> None:
    p = position(7, parse_offsets(entry(T0, KAFKA_AT_42, "-")))
    assert p == Position(7, ms(T0), {"0": {"impressions": {"0": 42, "1": 17}}, "1": None})
    from spark_app.contract.blue_green import kafka_offsets

    assert kafka_offsets(p, None) == {"impressions": {"0": 42, "1": 17}}  # green's cap: blue's offsets, by topic


ARCHIVE = '{"snapshot":7,"position":{"split":3,"row":0},"complete":true}'


def test_the_seam_compares_kafka_offsets_by_topic_as_values_not_as_text() -> None:
    blue = position(7, parse_offsets(entry(T0, KAFKA_AT_42)))
    assert off_seam(blue, position(9, parse_offsets(entry(T0, KAFKA_REORDERED)))) == []
    assert off_seam(blue, position(9, parse_offsets(entry(T0, KAFKA_AT_43)))) == ["impressions"]
    # green reads the topic behind its archive: more sources in its log, the same Kafka offsets
    assert off_seam(blue, position(9, parse_offsets(entry(T0, ARCHIVE, KAFKA_AT_42)))) == []
    # green still in its archive: it never reached the topic
    assert off_seam(blue, position(9, parse_offsets(entry(T0, ARCHIVE, "-")))) == ["impressions"]
    with pytest.raises(ValueError, match="Kafka"):
        off_seam(position(1, parse_offsets(entry(T0, ARCHIVE))), position(1, parse_offsets(entry(T0, ARCHIVE))))


def live(snapshot: int, at: int, complete: bool) -> str:
    return json.dumps({"v": 1, "kind": "live", "snapshot_id": str(snapshot), "position": at, "complete": complete})


BACKFILL = json.dumps({"v": 1, "kind": "backfill", "snapshot_id": "5", "position": 9, "plan": "p", "splits": 9})


def test_the_seam_compares_iceberg_live_positions_by_snapshot_whatever_the_sources_order() -> None:
    blue = position(7, parse_offsets(entry(T0, live(11, 3, True), live(21, 1, False))))
    # green: each table behind its archive (a backfill offset), in another order
    green = position(9, parse_offsets(entry(T0, BACKFILL, live(21, 1, False), BACKFILL, live(11, 3, True))))
    assert off_seam(blue, green) == []
    # a snapshot read whole is the same position whatever split count its writer logged
    assert off_seam(blue, position(9, parse_offsets(entry(T0, live(11, 0, True), live(21, 1, False))))) == []
    assert off_seam(blue, position(9, parse_offsets(entry(T0, live(11, 3, True), live(21, 2, False))))) == [
        "icebergLive snapshot 21"
    ]
    # green still on its archive of one table: it has not reached blue's snapshot there
    assert off_seam(blue, position(9, parse_offsets(entry(T0, BACKFILL, live(11, 3, True))))) == [
        "icebergLive snapshot 21"
    ]


def final(version: str, sink: str, watermark: datetime | None, lookahead: timedelta = timedelta(0)) -> FinalBatch:
    return FinalBatch(version, sink, position(3, parse_offsets(entry(watermark, KAFKA_AT_42))), lookahead)


def test_the_boundary_is_the_smallest_watermark_less_lookahead_floored_to_the_second() -> None:
    finals = [
        final("blue", "attributed", T0 + timedelta(minutes=10, seconds=5, milliseconds=700)),
        final("green", "attributed", T0 + timedelta(minutes=12)),
        final("blue", "totals", T0 + timedelta(minutes=20), lookahead=timedelta(minutes=9, seconds=30)),
        final("green", "totals", T0 + timedelta(minutes=20)),
    ]
    # totals' blue: 12:20 - 9m30s = 12:10:30; attributed's blue: 12:10:05.7 -> the smaller, floored
    assert boundary(finals) == T0 + timedelta(minutes=10, seconds=5)


def test_a_final_batch_without_a_watermark_has_no_boundary_and_says_what_to_use() -> None:
    with pytest.raises(NoWatermarkError) as refused:
        boundary([final("blue", "copy", T0), final("green", "copy", None)])
    said = str(refused.value)
    assert said.startswith("sink query copy of green has no event-time watermark at batch 3"), said
    assert "use upgrade.mode last-state or snapshot" in said
    with pytest.raises(ValueError, match="no sink query"):
        boundary([])


@pytest.mark.parametrize(
    ("green_behind", "lateness_added", "expected"),
    [
        (timedelta(seconds=20), timedelta(0), True),  # within two 10 s triggers
        (timedelta(seconds=21), timedelta(0), False),
        (timedelta(minutes=5, seconds=20), timedelta(minutes=5), True),  # v2 waits 5 min longer for late events
        (timedelta(seconds=21), -timedelta(minutes=5), False),  # a smaller lateness gives no slack
        (-timedelta(seconds=30), timedelta(0), True),  # ahead (a trigger after blue's last look)
    ],
)
def test_green_has_caught_up_within_two_triggers_and_the_lateness_it_adds(
    green_behind: timedelta, lateness_added: timedelta, expected: bool
) -> None:
    assert caught_up(T0 - green_behind, T0, timedelta(seconds=10), lateness_added) is expected


def test_the_compared_window_ends_where_both_are_final_and_starts_after_greens_warm_up() -> None:
    watermarks = {
        "attributed": (T0 + timedelta(minutes=50, seconds=40), T0 + timedelta(minutes=50, seconds=10)),
        "totals": (T0 + timedelta(minutes=55), T0 + timedelta(minutes=56)),
    }
    # the lower of attributed's two, less 5 minutes of lookahead, floored to the minute: 12:45
    window = compare_window(watermarks, timedelta(minutes=5), timedelta(minutes=30), T0)
    assert window == (T0 + timedelta(minutes=15), T0 + timedelta(minutes=45))
    # green's output is complete only from 12:30: the window starts there
    later = compare_window(watermarks, timedelta(minutes=5), timedelta(minutes=30), T0 + timedelta(minutes=30))
    assert later == (T0 + timedelta(minutes=30), T0 + timedelta(minutes=45))
    # complete only after the window would end: nothing to compare yet
    assert compare_window(watermarks, timedelta(minutes=5), timedelta(minutes=30), T0 + timedelta(hours=1)) is None
    with pytest.raises(ValueError, match="no sink"):
        compare_window({}, timedelta(0), timedelta(minutes=30), T0)
