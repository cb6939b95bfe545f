"""The lateness guard: refuse a backfill whose pipeline would drop rows as late.

With alignment, the out-of-orderness a backfill creates is at most ``maxDrift + the largest
time span of one split`` (Apple, "Streaming from Iceberg", slide 76). A stateful pipeline
whose watermark delay is at least that drops no row; one with less may. The delay comes
from the query plan (``EventTimeWatermark`` nodes; the smallest, since Spark's global
watermark is the minimum) or from ``alignment.lateness``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta

from spark_app.contract.durations import format_duration

_UNITS = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 604800,
}
_NODE = re.compile(r"EventTimeWatermark [^\n]*")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s+(microsecond|millisecond|second|minute|hour|day|week)s?")


def spark_interval(text: str) -> timedelta:
    """Spark's interval text as plans print it: '30 minutes', '1 hours 30 minutes'."""
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in _PART.findall(text)))


def watermark_delays(plan: str) -> list[timedelta]:
    """Delays of every ``EventTimeWatermark`` node in a plan's text form."""
    # "EventTimeWatermark <id>, event_ts#8: timestamp, 30 minutes"
    return [spark_interval(node.rsplit(":", 1)[-1]) for node in _NODE.findall(plan)]


@dataclass(frozen=True)
class LatenessVerdict:
    ok: bool
    required: timedelta
    delay: timedelta | None
    message: str


def _short(d: timedelta) -> str:
    return format_duration(timedelta(seconds=math.ceil(d.total_seconds())))  # never understate a bound


def check_lateness(
    delay: timedelta | None,
    max_drift: timedelta,
    max_split_span: timedelta,
    mode: str,
    allow_late_drops: bool,
) -> LatenessVerdict:
    required = max_drift + max_split_span
    if mode == "bounded":
        return LatenessVerdict(True, required, delay, "bounded: one batch query reads every row at once, none is late")
    if mode == "unordered":
        return LatenessVerdict(True, required, delay, "unordered: no ordering bound (meant for stateless pipelines)")
    if delay is None:
        return LatenessVerdict(
            True, required, None, "the pipeline has no event-time watermark: nothing is dropped as late"
        )
    if delay >= required:
        return LatenessVerdict(
            True,
            required,
            delay,
            f"watermark delay {_short(delay)} >= maxDrift {_short(max_drift)} + largest split "
            f"span {_short(max_split_span)}: no row is dropped as late",
        )
    msg = (
        f"the pipeline's watermark delay is {_short(delay)} but this backfill can deliver rows up to "
        f"{_short(required)} out of order (alignment.maxDrift {_short(max_drift)} + largest "
        f"split span {_short(max_split_span)}): rows would be dropped as late. Raise the watermark "
        f"delay (withWatermark, or alignment.lateness) to at least {_short(required)}, or lower "
        "alignment.maxDrift, or set alignment.allowLateDrops: true to accept the drops"
    )
    if allow_late_drops:
        return LatenessVerdict(True, required, delay, "allowLateDrops: " + msg)
    return LatenessVerdict(False, required, delay, msg)
