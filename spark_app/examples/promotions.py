"""The dimension of the enrich examples (``spark_app.examples.enrich``), for the titles of the
generator's events: ``dims.promotions``, the table marketing changes in place (one snapshot per
change), and ``dims.promotion_changes``, its change log (one row per new version, with
``changed_ts``), which ``examples/enrich-changes-*.yaml`` reads as a second, aligned source.

Why a change log that keeps moving: the changes pipeline joins in event time, so its output
waits for the watermark of both sources; a log whose last change is early would hold back every
impression after it. So each ``every`` of the events' span gets a commit of changes, as a team
whose campaigns change every few minutes would have, and the log ends where the events end.
Seeded: the same config writes the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

PROMOTIONS_SCHEMA = Schema(
    NestedField(1, "title_id", LongType(), required=True),
    NestedField(2, "campaign", StringType(), required=False),
    NestedField(3, "cpm", DoubleType(), required=False),
)
CHANGES_SCHEMA = Schema(*PROMOTIONS_SCHEMA.fields, NestedField(4, "changed_ts", TimestampType(), required=True))
CAMPAIGNS = ("launch", "holiday", "binge", "festival", "comeback")


@dataclass(frozen=True)
class PromotionsConfig:
    start: datetime
    hours: float
    titles: int = 300
    """The generator's (``GeneratorConfig.titles``): every title an impression names has a price."""
    every: timedelta = timedelta(minutes=10)
    """One commit of changes per this much event time."""
    changes_per_commit: int = 20
    namespace: str = "dims"
    seed: int = 17


def _prices(titles: np.ndarray, rng: np.random.Generator) -> tuple[list[str], list[float]]:
    campaigns = [CAMPAIGNS[i] for i in rng.integers(0, len(CAMPAIGNS), len(titles))]
    return campaigns, [round(float(c), 2) for c in rng.uniform(2.0, 12.0, len(titles))]


def _table(titles: np.ndarray, rng: np.random.Generator, changed: list[datetime] | None = None) -> pa.Table:
    campaigns, cpms = _prices(titles, rng)
    columns = {"title_id": pa.array(titles, pa.int64()), "campaign": campaigns, "cpm": cpms}
    schema = PROMOTIONS_SCHEMA if changed is None else CHANGES_SCHEMA
    if changed is not None:
        columns["changed_ts"] = pa.array([t.replace(tzinfo=None) for t in changed], pa.timestamp("us"))
    return pa.table(columns, schema=schema.as_arrow())


def _current(changes: pa.Table) -> pa.Table:
    """Rows of the log as rows of the table they changed."""
    return changes.drop_columns(["changed_ts"]).cast(PROMOTIONS_SCHEMA.as_arrow())


def write_promotions(catalog: Catalog, cfg: PromotionsConfig) -> int:
    """Both tables created and written; how many changes the log holds. Every title's first
    price is in the first commit of each (changed at ``start``); then each commit changes
    ``changes_per_commit`` titles, in place in ``dims.promotions`` (an overwrite in one commit, as a
    delete and an append snapshot) and appended to the log with a time inside its ``every``."""
    rng = np.random.default_rng(cfg.seed)
    if not catalog.namespace_exists(cfg.namespace):
        catalog.create_namespace(cfg.namespace)
    table = catalog.create_table(f"{cfg.namespace}.promotions", PROMOTIONS_SCHEMA)
    log = catalog.create_table(f"{cfg.namespace}.promotion_changes", CHANGES_SCHEMA)
    everyone = np.arange(1, cfg.titles + 1, dtype=np.int64)
    first = _table(everyone, rng, [cfg.start] * cfg.titles)
    log.append(first)
    table.append(_current(first))
    written = cfg.titles
    end = cfg.start + timedelta(hours=cfg.hours)
    at = cfg.start
    while at < end:
        titles = np.sort(rng.choice(everyone, size=min(cfg.changes_per_commit, cfg.titles), replace=False))
        span_s = min(cfg.every, end - at).total_seconds()
        changed = sorted(at + timedelta(seconds=float(s)) for s in rng.uniform(0, span_s, len(titles)))
        new = _table(titles, rng, changed)
        log.append(new)
        current = table.scan().to_arrow()
        kept = current.filter(pc.invert(pc.is_in(current["title_id"], pa.array(titles))))
        with table.transaction() as tx:  # one commit: no reader sees the changed titles missing
            tx.overwrite(pa.concat_tables([kept.cast(PROMOTIONS_SCHEMA.as_arrow()), _current(new)]))
        written += len(titles)
        at += cfg.every
    return written
