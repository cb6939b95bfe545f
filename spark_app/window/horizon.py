"""The pipeline's state horizon: how far its results look back and ahead of their time.

A backfill of ``[start, end)`` is exact only if it reads enough history around the window:

* **look-back** (warm-up): a result at the start of the window may depend on rows up to
  this far before it: a range join's bound, a session gap, a window's length, a dedup
  horizon. Reading less silently loses or changes results at the start of the window.
* **look-ahead** (drain): a result whose time is just before the end is only *emitted* once
  the watermark passes its window/session end. Reading stops at ``end`` would leave those
  results in state forever, so the read goes on to ``end + watermark delay + look-ahead``
  and the sink keeps only rows inside the window.

Horizons come from the query plan where Spark shows them (window lengths, session gaps,
range-join bounds, dedup within the watermark) and from what the pipeline declares (a
module-level ``state_horizon(**pipeline_args)`` returning a :class:`StateHorizon`, for what a
plan cannot show, e.g. ``flatMapGroupsWithState`` timeouts). The larger of the two wins.
Pure functions over the plan's text form, so they are unit tested without Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from spark_app.contract.durations import format_duration
from spark_app.window.lateness import spark_interval

# Analyzed plan: window(...) is rewritten to named_struct(start, ..., end, ... + <size us>) AS window#N
_WINDOW_ANALYZED = re.compile(r"named_struct\(start, (?:(?!named_struct).)*?\+ (\d+)\), LongType, TimestampType\)\)\)")
# Unanalyzed plan (the DataFrame's last step): 'window('ts, 10 minutes, 10 minutes, 0 second)
_WINDOW_UNRESOLVED = re.compile(r"\bwindow\('?[\w.`]+, ([^,()]+),")
_SESSION_ANALYZED = re.compile(r"cast\(([^()]+) as interval\) as timestamp\), TimestampType, LongType\), LongType")
_SESSION_UNRESOLVED = re.compile(r"\bsession_window\('?[\w.`]+, ([^()]+)\)")
# Range-join bounds as Spark prints interval literals: INTERVAL '06' HOUR, INTERVAL '1 02:00:00' DAY TO SECOND
_INTERVAL = re.compile(r"INTERVAL '(-?[\d :.]+)' (DAY|HOUR|MINUTE|SECOND)(?: TO (HOUR|MINUTE|SECOND))?")
_JOIN = re.compile(r"Join (\w+), ([^\n]*)")
_STATEFUL_EMITS_ON_WATERMARK = (
    "Aggregate",
    "FlatMapGroupsWithState",
    "TransformWithState",
    "SessionWindow",
    # the same operators for Python state (applyInPandasWithState, transformWithStateInPandas)
    "FlatMapGroupsInPandasWithState",
    "TransformWithStateInPandas",
    "TransformWithStateInPySpark",
)


@dataclass(frozen=True)
class StateHorizon:
    """How far a pipeline's results depend on rows before (look-back) and after (look-ahead)
    their time column; each entry of ``reasons`` says where a number came from."""

    lookback: timedelta = timedelta(0)
    lookahead: timedelta = timedelta(0)
    reasons: tuple[str, ...] = field(default=(), compare=False)

    def merge(self, other: StateHorizon) -> StateHorizon:
        return StateHorizon(
            max(self.lookback, other.lookback),
            max(self.lookahead, other.lookahead),
            tuple(dict.fromkeys(self.reasons + other.reasons)),
        )

    def describe(self) -> str:
        return ", ".join(self.reasons) or "no stateful look-back or look-ahead"


def _interval_literal(value: str, unit: str, to: str | None) -> timedelta:
    """Spark SQL interval literals as they are printed in plans (ANSI day-time intervals)."""
    sign = -1 if value.startswith("-") else 1
    value = value.lstrip("-")
    if to is None:
        n = float(value)
        return sign * timedelta(**{f"{unit.lower()}s": n})
    days = 0.0
    if unit == "DAY" and " " in value:
        d, value = value.split(" ", 1)
        days = float(d)
    elif unit == "DAY":
        return sign * timedelta(days=float(value))
    parts = [float(p) for p in value.split(":")]
    order = ["HOUR", "MINUTE", "SECOND"]
    first = order.index(unit) if unit in order else 0
    seconds = sum(p * 60 ** (2 - (first + i)) for i, p in enumerate(parts))
    return sign * timedelta(days=days, seconds=seconds)


def plan_horizon(plan: str) -> StateHorizon:
    """The state horizon Spark's plan text shows (analyzed, or with an unresolved last step)."""
    horizon = StateHorizon()
    sizes = [timedelta(microseconds=int(n)) for n in _WINDOW_ANALYZED.findall(plan)]
    sizes += [spark_interval(t) for t in _WINDOW_UNRESOLVED.findall(plan)]
    if sizes:
        size = max(sizes)
        horizon = horizon.merge(StateHorizon(size, size, (f"time window of {format_duration(size)}",)))
    gaps = [spark_interval(t) for t in _SESSION_ANALYZED.findall(plan) + _SESSION_UNRESOLVED.findall(plan)]
    if gaps:
        gap = max(gaps)
        horizon = horizon.merge(StateHorizon(gap, gap, (f"session gap of {format_duration(gap)}",)))
    for kind, condition in _JOIN.findall(plan):
        bounds = [abs(_interval_literal(*m)) for m in _INTERVAL.findall(condition)]
        if not bounds:
            continue
        bound = max(bounds)
        outer = "Outer" in kind or kind in ("LeftAnti", "FullOuter")
        # An outer join emits its unmatched rows when the watermark passes the bound: look-ahead too.
        what = f"{'outer ' if outer else ''}range join bound of {format_duration(bound)}"
        horizon = horizon.merge(StateHorizon(bound, bound if outer else timedelta(0), (what,)))
    return horizon


def dedup_horizon(plan: str, delay: timedelta | None) -> StateHorizon:
    """Deduplication keeps a key for the watermark delay: a duplicate that far before the
    window start decides whether a row inside it is new."""
    if delay is None or not re.search(r"\bDeduplicate(WithinWatermark)?\b", plan):
        return StateHorizon()
    return StateHorizon(delay, timedelta(0), (f"deduplication within the watermark delay {format_duration(delay)}",))


def emits_on_watermark(plan: str) -> bool:
    """Whether some operator holds results until the watermark passes them (aggregations in
    append mode, sessions, outer joins, arbitrary state): those need a drain."""
    if any(re.search(rf"(?<![\w.]){op}\b", plan) for op in _STATEFUL_EMITS_ON_WATERMARK):
        return True
    return any("Outer" in kind for kind, _ in _JOIN.findall(plan))


def drain(delay: timedelta | None, horizon: StateHorizon, emits: bool) -> timedelta:
    """How far past the window's end to read so every result inside it is emitted."""
    if delay is None or not emits:
        return timedelta(0)
    return delay + horizon.lookahead


@dataclass(frozen=True)
class DrainStep:
    """What to do when reading stopped with results that start in the window still open:
    read on to ``read_until`` (None: stop), and if stopping, the notice that says why."""

    read_until: datetime | None
    notice: str | None = None


def next_drain_step(
    open_results: int,
    end: datetime,
    read_until: datetime,
    history_end: datetime | None,
    base_drain: timedelta,
    max_drain: timedelta | None,
) -> DrainStep:
    """Read on past ``read_until`` while results are open and the history goes on.

    Each step doubles how far past ``end`` the backfill reads (a session that outlasted the
    drain may outlast it twice; doubling bounds the restarts by log2 of the longest one),
    never past the history (nothing there advances the watermark) nor past ``end + maxDrain``.
    When the history ends first, more drain cannot help: the notice names where the history
    ends and how far it must reach to close what it holds (``base_drain`` past it)."""
    if open_results <= 0:
        return DrainStep(None)
    limit = None if max_drain is None else end + max_drain
    if history_end is None or history_end < read_until:
        reached = "holds nothing past the window's end" if history_end is None else f"ends at {history_end.isoformat()}"
        until = (history_end or end) + base_drain
        return DrainStep(
            None,
            f"not yet final: the sources' history {reached}; {open_results} windows or sessions that start in the "
            f"window stay open until it reaches {until.isoformat()} (their last events so far + watermark delay + "
            "look-ahead): run the backfill again once it has",
        )
    if limit is not None and read_until >= limit:
        return DrainStep(
            None,
            f"not yet final: {open_results} windows or sessions that start in the window were still open when "
            f"reading stopped at {read_until.isoformat()}, window.maxDrain ({format_duration(max_drain)}) past the "
            "end, while the history goes on: raise window.maxDrain (or leave it unset) to read until they close",
        )
    step = max(read_until - end, base_drain, timedelta(minutes=1))
    target = read_until + step
    target = min(target, history_end + timedelta(microseconds=1))
    if limit is not None:
        target = min(target, limit)
    return DrainStep(target)


@dataclass(frozen=True)
class WarmupVerdict:
    ok: bool
    message: str


def check_warmup(warmup: timedelta, horizon: StateHorizon, history_before: bool, allow_short: bool) -> WarmupVerdict:
    """Refuse a warm-up shorter than the pipeline's look-back when there is history before it
    (the lateness guard's twin: both name the two numbers and the fix)."""
    need = horizon.lookback
    if warmup >= need:
        return WarmupVerdict(True, f"warm-up {format_duration(warmup)} >= look-back {format_duration(need)}")
    if not history_before:
        return WarmupVerdict(
            True,
            f"warm-up {format_duration(warmup)} < look-back {format_duration(need)}, but the sources hold no "
            "history before the read start: nothing to miss",
        )
    msg = (
        f"window.warmup is {format_duration(warmup)} but the pipeline looks back {format_duration(need)} "
        f"({horizon.describe()}): results in the first {format_duration(need - warmup)} of the window would "
        f"miss rows from before the warm-up. Set window.warmup to at least {format_duration(need)}, or set "
        "window.allowShortWarmup: true to accept the difference"
    )
    if allow_short:
        return WarmupVerdict(True, "allowShortWarmup: " + msg)
    return WarmupVerdict(False, msg)
