"""The lateness guard: delays read from Spark's plan text, and the verdict against the bound."""

from __future__ import annotations

from datetime import timedelta

from spark_app.window.lateness import check_lateness, watermark_delays

PLAN = """~Join Inner
:  +- ~EventTimeWatermark 83b37e39-dce1, event_ts#8: timestamp, 30 minutes
+- ~EventTimeWatermark c5d721be-5a5e, event_ts#3: timestamp, 1 hours 5 minutes 30 seconds
"""


def test_delays_are_read_from_every_watermark_node() -> None:
    assert watermark_delays(PLAN) == [timedelta(minutes=30), timedelta(hours=1, minutes=5, seconds=30)]
    assert watermark_delays("~Project [a#1]\n+- ~StreamingRelation") == []


def test_enough_delay_passes_and_says_why() -> None:
    v = check_lateness(timedelta(minutes=30), timedelta(minutes=10), timedelta(minutes=15), "aligned", False)
    assert v.ok and v.required == timedelta(minutes=25)
    assert "no row is dropped" in v.message


def test_short_delay_is_refused_naming_the_number_to_raise() -> None:
    v = check_lateness(timedelta(minutes=5), timedelta(minutes=10), timedelta(seconds=900.4), "aligned", False)
    assert not v.ok
    assert "to at least 25m1s" in v.message, "the bound is rounded up, never understated"
    assert "alignment.maxDrift" in v.message and "allowLateDrops" in v.message


def test_strict_mode_bound_is_the_split_span_and_allowing_drops_passes() -> None:
    v = check_lateness(timedelta(minutes=5), timedelta(0), timedelta(minutes=6), "strict", True)
    assert v.ok and v.required == timedelta(minutes=6) and v.message.startswith("allowLateDrops")


def test_unordered_and_stateless_pipelines_are_not_refused() -> None:
    assert check_lateness(timedelta(minutes=1), timedelta(hours=1), timedelta(hours=1), "unordered", False).ok
    assert check_lateness(None, timedelta(hours=1), timedelta(hours=1), "aligned", False).ok
