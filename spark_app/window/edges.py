"""A backfill's edges, resolved before any row is read: which sources the pipeline really
reads, whether the warm-up covers its look-back, how far past the end it must drain, and
whether the history reaches that far yet.

Each answer comes from the pipeline's query plan (built once, before the queries start) and
from Iceberg metadata; the decisions themselves are the pure functions of ``horizon``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame

from spark_app.contract.config import JobConfig
from spark_app.contract.durations import format_duration
from spark_app.contract.errors import ConfigError, WarmupError
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.jvm.calls import analyzed_plan, leaf_ids
from spark_app.window.history import covered as history_covered
from spark_app.window.history import history_files
from spark_app.window.horizon import (
    StateHorizon,
    check_warmup,
    dedup_horizon,
    drain,
    emits_on_watermark,
    plan_horizon,
)
from spark_app.window.lateness import watermark_delays

log = logging.getLogger(__name__)


def _leaf_ids(df: DataFrame) -> set[int]:
    """Expression ids of the attributes the plan's leaf relations produce."""
    return set().union(*leaf_ids(df))


def read_sources(frames: dict[str, DataFrame], output: DataFrame) -> set[str]:
    """The sources whose relation appears in ``output``'s plan: each ``load()`` makes a
    relation with fresh attribute ids, so a frame the pipeline used is found by its ids."""
    used = _leaf_ids(output)
    return {name for name, frame in frames.items() if _leaf_ids(frame) <= used}


def declares_horizon(entry: str) -> bool:
    """Whether the pipeline module declares its state horizon (``state_horizon``)."""
    return callable(getattr(importlib.import_module(entry.split(":")[0]), "state_horizon", None))


def declared_horizon(entry: str, args: dict[str, Any]) -> StateHorizon:
    """What the pipeline module declares: ``state_horizon(**pipeline_args)`` returning a
    StateHorizon or a timedelta (look-back and look-ahead alike)."""
    module = importlib.import_module(entry.split(":")[0])
    fn = getattr(module, "state_horizon", None)
    if fn is None:
        return StateHorizon()
    value = fn(**args)
    if isinstance(value, timedelta):
        return StateHorizon(value, value, (f"declared by {entry.split(':')[0]}: {format_duration(value)}",))
    if not isinstance(value, StateHorizon):
        raise ConfigError(f"{entry.split(':')[0]}.state_horizon() must return a StateHorizon or a timedelta")
    return value


@dataclass(frozen=True)
class Edges:
    """What the runtime decided about the window's edges; goes into the run report."""

    used: dict[str, tuple[str, ...]]
    """Per sink, the sources its query reads."""
    unused: tuple[str, ...]
    delay: timedelta | None
    horizon: StateHorizon
    drain: timedelta
    warmup_message: str
    history_end: datetime | None = None
    """The newest event time of the read sources (None: no data past the window's end)."""
    notices: tuple[str, ...] = field(default=())
    open_results: int = 0
    """Windows or sessions starting in the window still open in state when reading stopped."""

    @property
    def final(self) -> bool:
        return not any(n.startswith("not yet final") for n in self.notices)


def plans_horizon(cfg: JobConfig, plans: Iterable[str]) -> tuple[timedelta | None, StateHorizon]:
    """The watermark delay (``alignment.lateness``, else the plans' smallest) and the state
    horizon of the pipeline's outputs: what it declares merged with what its plans show."""
    plans = list(plans)
    delay = cfg.alignment.lateness
    if delay is None:
        found = [d for p in plans for d in watermark_delays(p)]
        delay = min(found) if found else None
    horizon = declared_horizon(cfg.pipeline, cfg.pipeline_args)
    for p in plans:
        horizon = horizon.merge(plan_horizon(p)).merge(dedup_horizon(p, delay))
    return delay, horizon


def output_horizon(cfg: JobConfig, outputs: dict[str, DataFrame]) -> tuple[timedelta | None, StateHorizon]:
    """A live run's watermark delay and horizon, from its outputs' analyzed plans: its progress
    reports carry both, which a blue/green upgrade needs of each version (``contract.blue_green``:
    the look-ahead for the compared window and the boundary, the delay for the catch-up)."""
    return plans_horizon(cfg, (analyzed_plan(df) for df in outputs.values()))


def resolve(cfg: JobConfig, frames: dict[str, dict[str, DataFrame]], outputs: dict[str, DataFrame]) -> Edges:
    """Decide the edges from a first build of the pipeline (``frames`` per sink)."""
    assert cfg.window is not None
    used = {sink: tuple(sorted(read_sources(frames[sink], df))) for sink, df in outputs.items()}
    read_any = {s for names in used.values() for s in names}
    unused = tuple(sorted(set(cfg.sources) - read_any))
    plans = {sink: analyzed_plan(df) for sink, df in outputs.items()}
    delay, horizon = plans_horizon(cfg, plans.values())
    emits = any(emits_on_watermark(p) for p in plans.values())
    window = cfg.window
    drained = window.drain if window.drain is not None else drain(delay, horizon, emits)
    if window.drain is None and window.max_drain is not None:
        drained = min(drained, window.max_drain)
    backfill_sources = [n for n in sorted(read_any) if isinstance(cfg.sources[n], IcebergBackfillSource)]
    # Warm-up: is there history the look-back would need but the read does not reach?
    history_before = horizon.lookback > window.warmup and any(
        history_files(cfg, n, window.start - horizon.lookback, window.read_start) for n in backfill_sources
    )
    verdict = check_warmup(window.warmup, horizon, history_before, window.allow_short_warmup)
    if not verdict.ok:
        raise WarmupError(verdict.message)
    covered = history_covered(cfg, backfill_sources)
    if covered.refusal is not None:
        raise ConfigError(covered.refusal)
    notices = [f"source {n} is configured but no output reads it: not an alignment member" for n in unused]
    notices += covered.notices
    if not verdict.message.startswith("warm-up "):
        notices.append(verdict.message)
    history_end = None
    if drained > timedelta(0):
        missing = [s for s, sink in cfg.sinks.items() if sink.time_column is None]
        if missing:
            raise ConfigError(
                f"sinks.{missing[0]}.timeColumn is not set, but this pipeline holds results until the watermark "
                f"passes them, so the backfill reads {format_duration(drained)} past window.end to emit them: "
                "name the output's event-time column (timeColumn) so rows outside the window are not written"
            )
        history_end = _newest(cfg, backfill_sources, window.end)
        read_end = window.end + drained
        if history_end is None or history_end < read_end - timedelta(microseconds=1):
            reached = "nothing" if history_end is None else history_end.isoformat()
            notices.append(
                f"not yet final: results are emitted once the watermark passes them, which needs history until "
                f"{read_end.isoformat()} (end + drain {format_duration(drained)}: watermark delay "
                f"{format_duration(delay or timedelta(0))} + look-ahead {format_duration(horizon.lookahead)}), but "
                f"the sources hold {reached} past the end; windows or sessions closing after that are missing "
                "until the backfill is run again once the history has arrived"
            )
    for n in notices:
        log.warning("backfill %s: %s", cfg.name, n)
    return Edges(used, unused, delay, horizon, drained, verdict.message, history_end, tuple(notices))


def _newest(cfg: JobConfig, sources: list[str], end: datetime) -> datetime | None:
    """The newest event time at or after ``end`` over the sources (the least of them: the
    watermark follows the slowest source)."""
    newest: list[datetime | None] = []
    for n in sources:
        uppers = [f.upper for f in history_files(cfg, n, end, None) if f.upper is not None]
        newest.append(datetime.fromtimestamp(max(uppers) / 1e6, tz=end.tzinfo) if uppers else None)
    if not newest or any(n is None for n in newest):
        return None
    return min(n for n in newest if n is not None)


# Operators whose state holds results not emitted yet (keyed by the result's window/session).
_RESULT_STATE = ("sessionWindowStateStoreSaveExec", "stateStoreSave")


def _start_field(schema: Any, prefix: str = "key") -> str | None:
    """The key field holding a result's start time: ``sessionStartTime``, or ``<window>.start``."""
    from pyspark.sql.types import StructType, TimestampType

    for f in schema.fields:
        if isinstance(f.dataType, TimestampType):
            return f"{prefix}.{f.name}"
        if isinstance(f.dataType, StructType):
            names = {c.name: c.dataType for c in f.dataType.fields}
            if isinstance(names.get("start"), TimestampType):
                return f"{prefix}.{f.name}.start"
    return None


def open_results(spark: Any, checkpoint: str, start: datetime, end: datetime) -> tuple[int, datetime | None]:
    """Results (windows, sessions) still held in a finished query's state that start in
    ``[start, end)``: read with Spark's state data source, so "not yet final" is counted, not
    guessed."""
    from pyspark.sql import functions as F

    meta = spark.read.format("state-metadata").load(checkpoint).collect()
    count, earliest = 0, None
    for op in meta:
        if op.operatorName not in _RESULT_STATE:
            continue
        state = spark.read.format("statestore").option("operatorId", op.operatorId).load(checkpoint)
        column = _start_field(state.schema["key"].dataType)
        if column is None:
            continue
        lo, hi = (F.lit(t.replace(tzinfo=None).isoformat()).cast("timestamp") for t in (start, end))
        row = (
            state.where((F.col(column) >= lo) & (F.col(column) < hi))
            .agg(F.count("*").alias("n"), F.min(column).alias("first"))
            .collect()[0]
        )
        count += int(row.n)
        if row.first is not None and (earliest is None or row.first < earliest):
            earliest = row.first
    return count, earliest
