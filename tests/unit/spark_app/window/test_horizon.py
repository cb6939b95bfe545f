"""The state horizon from plan text (as Spark 4.3 prints it), the drain, the warm-up guard,
and the completeness check on a finished backfill's offsets: pure, no Spark."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from spark_app.apps.run import require_complete
from spark_app.contract.config import parse_config
from spark_app.contract.errors import IncompleteBackfillError
from spark_app.contract.offsets import BackfillOffset
from spark_app.window.horizon import StateHorizon, check_warmup, dedup_horizon, drain, emits_on_watermark, plan_horizon

# Excerpts of analyzed plans printed by pyspark 4.3 (see the plan probe in the issue 13 notes).
TUMBLING = (
    "~Aggregate [window#9-T7200000ms, (value#1L % cast(3 as bigint))], [window#9-T7200000ms AS w#3-T7200000ms]\n"
    "+- ~Project [named_struct(start, knownnullable(precisetimestampconversion(((precisetimestampconversion("
    "event_ts#2-T7200000ms, TimestampType, LongType) - CASE WHEN (((precisetimestampconversion(event_ts#2-T7200000ms,"
    " TimestampType, LongType) - 0) % 600000000) < cast(0 as bigint)) THEN (((precisetimestampconversion("
    "event_ts#2-T7200000ms, TimestampType, LongType) - 0) % 600000000) + 600000000) ELSE (((precisetimestampconversion("
    "event_ts#2-T7200000ms, TimestampType, LongType) - 0) % 600000000)) END) - 0), LongType, TimestampType)), end, "
    "knownnullable(precisetimestampconversion((((precisetimestampconversion(event_ts#2-T7200000ms, TimestampType, "
    "LongType) - 0) - 0) + 600000000), LongType, TimestampType))) AS window#9-T7200000ms, event_ts#2-T7200000ms]\n"
    "      +- ~EventTimeWatermark a1, event_ts#2: timestamp, 2 hours\n"
)
SLIDING_UNRESOLVED = "'Aggregate ['window('event_ts, 1 hour, 15 minutes, 0 second)], [count(1) AS count#16]\n"
SESSION = (
    "~Aggregate [session_window#15-T7200000ms, value#1L], [session_window#15-T7200000ms AS s#10-T7200000ms]\n"
    "+- ~Filter isnotnull(event_ts#2-T7200000ms)\n"
    "   +- ~Project [named_struct(start, precisetimestampconversion(precisetimestampconversion(event_ts#2-T7200000ms, "
    "TimestampType, LongType), LongType, TimestampType), end, knownnullable(precisetimestampconversion("
    "precisetimestampconversion(cast(event_ts#2-T7200000ms + cast(30 minutes as interval) as timestamp), "
    "TimestampType, LongType), LongType, TimestampType))) AS session_window#15-T7200000ms, event_ts#2-T7200000ms]\n"
)
SESSION_UNRESOLVED = "'Aggregate ['session_window('event_ts, 45 minutes) AS s#10, 'value], ['value]\n"
RANGE_JOIN = (
    "~Join Inner, (((value#1L = value#23L) AND (event_ts#21-T7200000ms >= cast(event_ts#2-T7200000ms - "
    "INTERVAL '06' HOUR as timestamp))) AND (event_ts#21-T7200000ms <= event_ts#2-T7200000ms))\n"
    ":- ~SubqueryAlias x\n"
)
OUTER_JOIN = RANGE_JOIN.replace("Join Inner", "Join LeftOuter").replace("INTERVAL '06' HOUR", "INTERVAL '90' MINUTE")
DEDUP = "~DeduplicateWithinWatermark [value#1L]\n+- ~EventTimeWatermark a1, event_ts#2: timestamp, 2 hours\n"


@pytest.mark.parametrize(
    ("plan", "lookback", "lookahead", "reason"),
    [
        (TUMBLING, timedelta(minutes=10), timedelta(minutes=10), "time window of 10m"),
        (SLIDING_UNRESOLVED, timedelta(hours=1), timedelta(hours=1), "time window of 1h"),
        (SESSION, timedelta(minutes=30), timedelta(minutes=30), "session gap of 30m"),
        (SESSION_UNRESOLVED, timedelta(minutes=45), timedelta(minutes=45), "session gap of 45m"),
        (RANGE_JOIN, timedelta(hours=6), timedelta(0), "range join bound of 6h"),
        (OUTER_JOIN, timedelta(minutes=90), timedelta(minutes=90), "outer range join bound of 1h30m"),
    ],
    ids=["tumbling", "sliding", "session", "session-unresolved", "range-join", "outer-join"],
)
def test_plan_horizon(plan: str, lookback: timedelta, lookahead: timedelta, reason: str) -> None:
    h = plan_horizon(plan)
    assert (h.lookback, h.lookahead) == (lookback, lookahead)
    assert reason in h.describe()


def test_dedup_horizon_is_the_watermark_delay() -> None:
    assert dedup_horizon(DEDUP, timedelta(hours=2)).lookback == timedelta(hours=2)
    assert dedup_horizon(DEDUP, None) == StateHorizon()
    assert dedup_horizon(RANGE_JOIN, timedelta(hours=2)) == StateHorizon()


def test_only_operators_that_wait_for_the_watermark_need_a_drain() -> None:
    assert emits_on_watermark(TUMBLING) and emits_on_watermark(SESSION) and emits_on_watermark(OUTER_JOIN)
    assert not emits_on_watermark(RANGE_JOIN) and not emits_on_watermark(DEDUP)
    h = plan_horizon(SESSION)
    assert drain(timedelta(hours=2), h, True) == timedelta(hours=2, minutes=30)
    assert drain(timedelta(hours=2), h, False) == timedelta(0)
    assert drain(None, h, True) == timedelta(0)


def test_warmup_guard_names_both_numbers_and_the_fix() -> None:
    h = plan_horizon(RANGE_JOIN)
    v = check_warmup(timedelta(minutes=30), h, history_before=True, allow_short=False)
    assert not v.ok
    assert "window.warmup is 30m" in v.message and "looks back 6h" in v.message
    assert "Set window.warmup to at least 6h" in v.message and "allowShortWarmup" in v.message
    assert check_warmup(timedelta(minutes=30), h, history_before=True, allow_short=True).ok
    assert check_warmup(timedelta(hours=6), h, history_before=True, allow_short=False).ok
    # nothing before the read start: there is nothing a longer warm-up could read
    assert check_warmup(timedelta(0), h, history_before=False, allow_short=False).ok


def _progress(name: str, *offsets: BackfillOffset) -> dict[str, object]:
    return {"name": name, "sources": [{"endOffset": json.dumps(o.to_dict())} for o in offsets]}


def test_a_backfill_that_did_not_admit_its_splits_fails() -> None:
    cfg = parse_config(
        {
            "name": "bf",
            "pipeline": "m:f",
            "mode": "backfill",
            "catalogs": {"default": {}},
            "sources": {"a": {"kind": "icebergBackfill", "table": "n.a"}},
            "sinks": {"out": {"kind": "console"}},
            "checkpoint": {"location": "/tmp/x"},
            "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T01:00:00Z"},
        }
    )
    done = BackfillOffset(1, 7, "p", 7, "a")
    require_complete(cfg, [_progress("bf-out", BackfillOffset(1, 3, "p", 7, "a")), _progress("bf-out", done)])
    with pytest.raises(IncompleteBackfillError, match=r"bf-out/a admitted 0 of 12 splits"):
        require_complete(cfg, [_progress("bf-out", BackfillOffset(1, 0, "p", 12, "a"))])
    # a bootstrap's archive leg says what stopping there means for the job: no switch to Kafka
    with pytest.raises(IncompleteBackfillError, match=r"job bf ended its bootstrap .* not switched to Kafka"):
        require_complete(cfg, [_progress("bf-out", BackfillOffset(1, 0, "p", 12, "a"))], bootstrap=True)
    # offsets written before the split count was recorded are taken as they are
    require_complete(cfg, [_progress("bf-out", BackfillOffset(1, 0, "p"))])
