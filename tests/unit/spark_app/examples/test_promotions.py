"""The enrich examples' dimension: the table is, after every commit, the latest version of each
title in the change log, and the log keeps moving to the end of the events (the changes
pipeline's watermark needs it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from spark_app.examples.promotions import PromotionsConfig, write_promotions

START = datetime(2026, 11, 1, 12, tzinfo=UTC)


def test_the_table_holds_each_titles_latest_change_and_the_log_spans_the_events(tmp_path: Path) -> None:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    cfg = PromotionsConfig(START, hours=1, titles=30, changes_per_commit=5)
    written = write_promotions(catalog, cfg)
    log = catalog.load_table("dims.promotion_changes").scan().to_arrow().to_pylist()
    table = catalog.load_table("dims.promotions")
    assert written == len(log) == 30 + 6 * 5
    assert len(table.snapshots()) == 1 + 2 * 6, "each commit of changes an overwrite: a delete and an append"
    times = sorted(r["changed_ts"] for r in log)
    naive = START.replace(tzinfo=None)
    assert times[0] == naive and naive + timedelta(minutes=50) <= times[-1] < naive + timedelta(hours=1)
    latest = {r["title_id"]: (r["campaign"], r["cpm"]) for r in sorted(log, key=lambda r: r["changed_ts"])}
    current = {r["title_id"]: (r["campaign"], r["cpm"]) for r in table.scan().to_arrow().to_pylist()}
    assert current == latest and sorted(current) == list(range(1, 31))


def test_the_same_config_writes_the_same_rows(tmp_path: Path) -> None:
    rows = []
    for name in ("a", "b"):
        catalog = SqlCatalog(name, uri=f"sqlite:///{tmp_path}/{name}.db", warehouse=f"file://{tmp_path}/{name}")
        write_promotions(catalog, PromotionsConfig(START, hours=0.5, titles=10))
        rows.append(catalog.load_table("dims.promotion_changes").scan().to_arrow().to_pylist())
    assert rows[0] == rows[1]
