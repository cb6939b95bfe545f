"""The lateness guard of a backfill (a replay must drop no row the live job kept): the widest span a
micro-batch may read (from the planned splits), the pipeline's watermark delay, and the verdict
that refuses a run whose delay is shorter than what a batch may span."""

from __future__ import annotations

import logging
from datetime import timedelta

from pyspark.sql import DataFrame

from spark_app.catalogs import load_table
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import LatenessError
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.jvm.calls import analyzed_plan
from spark_app.planning.splits import max_span
from spark_app.sources.frames import (
    source_spec,
)
from spark_app.sources.iceberg.stream import backfill_plan
from spark_app.window.lateness import LatenessVerdict, check_lateness, watermark_delays

log = logging.getLogger(__name__)


def plan_max_span(cfg: JobConfig, read: set[str] | None = None) -> timedelta:
    """Largest split span over the backfill's sources (those in ``read``), planned exactly as
    the sources will."""
    spans = []
    for name, src in cfg.sources.items():
        if not isinstance(src, IcebergBackfillSource) or (read is not None and name not in read):
            continue
        spec = source_spec(cfg, next(iter(cfg.sinks)), name, 1)
        table = load_table(spec.catalog_name, spec.catalog, src.table)
        sid = src.snapshot_id or (table.current_snapshot().snapshot_id if table.current_snapshot() else None)
        if sid is None:
            continue
        spans.append(max_span(backfill_plan(table, spec, sid)))
    return timedelta(microseconds=max(spans, default=0))


def plan_watermark_delay(df: DataFrame) -> timedelta | None:
    delays = watermark_delays(analyzed_plan(df))
    return min(delays) if delays else None


def lateness_verdict(
    cfg: JobConfig, outputs: dict[str, DataFrame], read: set[str] | None = None
) -> LatenessVerdict | None:
    if cfg.mode != "backfill":
        return None
    delay = cfg.alignment.lateness
    if delay is None:
        found = [d for df in outputs.values() if (d := plan_watermark_delay(df)) is not None]
        delay = min(found) if found else None
    verdict = check_lateness(
        delay,
        cfg.alignment.effective_drift,
        plan_max_span(cfg, read),
        cfg.alignment.mode,
        cfg.alignment.allow_late_drops,
    )
    if not verdict.ok:
        raise LatenessError(verdict.message)
    log.info("lateness guard: %s", verdict.message)
    return verdict
