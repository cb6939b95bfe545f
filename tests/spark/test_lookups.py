"""Lookups as of event time with real local Spark and a real SQLite Iceberg catalog.

A dimension (``dims.promotions``: a title's campaign and CPM) changes while impressions arrive.
The live job prices each impression with the promotion of the moment it processes it; a
backfill of the same window, later, must price it the same way, not with today's promotion:

- solution 1 (``spark_app.examples.enrich:pipeline``, versions from the table's snapshots):
  live runs processing the impressions as they are committed, the promotions changing in
  between; then a backfill over the whole window equals the live output row for row, and a
  plain join with today's table differs in exactly the rows priced before a change;
- the same lookup over a validity-interval table and by an effective-time column (static
  facts: the helper works on a batch frame too), and overlapping versions refused;
- solution 2 (``changes_pipeline``, the change log as an aligned source joined with state):
  live (both tables' appends) and an aligned backfill from their history equal each other and
  the version valid at each event time; today's version differs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType
from pyspark.sql import SparkSession

from spark_app.apps.run import run
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import ConfigError
from spark_app.lookups import as_of, checked, snapshot_versions, validity_versions
from spark_app.lookups import history as lookup_history

pytestmark = pytest.mark.spark

TS = pa.timestamp("us")
IMPRESSIONS = Schema(
    NestedField(1, "impression_id", StringType(), required=True),
    NestedField(2, "title_id", LongType(), required=True),
    NestedField(3, "event_ts", TimestampType(), required=True),
)
PROMOTIONS = Schema(
    NestedField(1, "title_id", LongType(), required=True),
    NestedField(2, "campaign", StringType(), required=False),
    NestedField(3, "cpm", DoubleType(), required=False),
)
CHANGES = Schema(*PROMOTIONS.fields, NestedField(4, "changed_ts", TimestampType(), required=True))
COLUMNS = ["impression_id", "title_id", "event_ts", "campaign", "cpm"]
TITLES = (1, 2, 3, 4)
SCHEDULE = {0: TITLES, 1: (1, 2), 2: (2, 3)}


@pytest.fixture(autouse=True)
def _uncached(spark: SparkSession) -> Iterator[None]:
    """The lookups persist their versions for a query's life; a test's die with it."""
    yield
    spark.catalog.clearCache()


def catalog(root: Path) -> tuple[SqlCatalog, dict[str, str]]:
    root.mkdir(parents=True, exist_ok=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    cat = SqlCatalog("default", **props)
    for ns in ("ingest", "dims"):
        cat.create_namespace(ns)
    return cat, props


def promotions(rows: list[tuple[int, str, float]]) -> pa.Table:
    return pa.table(
        {"title_id": [r[0] for r in rows], "campaign": [r[1] for r in rows], "cpm": [r[2] for r in rows]},
        schema=pa.schema([("title_id", pa.int64(), False), ("campaign", pa.string()), ("cpm", pa.float64())]),
    )


def impressions(rows: list[tuple[str, int, datetime]]) -> pa.Table:
    return pa.table(
        {
            "impression_id": [r[0] for r in rows],
            "title_id": [r[1] for r in rows],
            "event_ts": [r[2].replace(tzinfo=None) for r in rows],
        },
        schema=pa.schema(
            [("impression_id", pa.string(), False), ("title_id", pa.int64(), False), ("event_ts", TS, False)]
        ),
    )


def job(props: dict[str, str], tmp: Path, name: str, mode: str, **fields: Any) -> JobConfig:
    return parse_config(
        {
            "name": name,
            "mode": mode,
            "pipeline": "spark_app.examples.enrich:pipeline",
            "catalogs": {"default": {"type": "sql", **props}},
            "sinks": {"priced_impressions": {"kind": "parquet", "path": str(tmp / "out"), "timeColumn": "event_ts"}},
            "checkpoint": {"location": str(tmp / "ckpt")},
            "tracePath": str(tmp / "trace.jsonl"),
            "trigger": {"kind": "availableNow"},
            **fields,
        }
    )


def output(spark: SparkSession, tmp: Path) -> list[tuple[Any, ...]]:
    df = spark.read.parquet(str(tmp / "out"))
    return [tuple(r) for r in df.select(*COLUMNS).orderBy("impression_id").collect()]


def test_snapshot_lookup_backfill_equals_live_while_todays_table_differs(spark: SparkSession, tmp_path: Path) -> None:
    cat, props = catalog(tmp_path / "data")
    facts = cat.create_table("ingest.impressions", IMPRESSIONS)
    dims = cat.create_table("dims.promotions", PROMOTIONS)
    dims.append(promotions([(t, "launch", 1.0) for t in TITLES]))
    # The promotion changes after the 2nd and the 4th commit of impressions; (titles, new price).
    changes = {1: ((1, 2), 2.0), 3: ((2, 3), 3.0)}
    live_cfg = job(
        props,
        tmp_path / "live",
        "enrich-live",
        "live",
        sources={"impressions": {"kind": "icebergLive", "table": "ingest.impressions", "startingPosition": "earliest"}},
    )
    priced_at: dict[str, float] = {}  # what each impression cost when it happened: the expectation
    price = dict.fromkeys(TITLES, 1.0)
    n = 0
    for step in range(5):
        rows = []
        for t in TITLES * 2:
            rows.append((f"i{n:03d}", t, datetime.now(UTC)))
            priced_at[f"i{n:03d}"] = price[t]
            n += 1
        facts.append(impressions(rows))
        run(live_cfg, spark)  # the live job processes what just arrived
        if step in changes:
            time.sleep(0.01)  # commit times are in ms: keep the change off the facts' millisecond
            titles, cpm = changes[step]
            dims.overwrite(promotions([(t, f"promo-{step}", cpm) for t in titles]), In("title_id", list(titles)))
            for t in titles:
                price[t] = cpm
            time.sleep(0.01)
    live = output(spark, tmp_path / "live")
    assert len(live) == n == 40
    assert {r[0]: r[4] for r in live} == priced_at  # live: the price of the moment

    first = min(r[2] for r in live)
    last = max(r[2] for r in live)

    def backfill(name: str, **fields: Any) -> Any:
        return job(
            props,
            tmp_path / name,
            f"enrich-{name}",
            "backfill",
            sources={"impressions": {"kind": "icebergBackfill", "table": "ingest.impressions"}},
            window={
                "start": (first - timedelta(seconds=1)).isoformat(),
                "end": (last + timedelta(seconds=1)).isoformat(),
            },
            **fields,
        )

    report = run(backfill("bf"), spark)
    backfilled = output(spark, tmp_path / "bf")
    assert backfilled == live
    # auto ran the lookup as one batch query (no state, no watermark); aligned writes the same rows
    assert report.mode_choice is not None and report.mode_choice.mode == "bounded", report.mode_choice
    assert run(backfill("bf-aligned", alignment={"mode": "aligned"}), spark).mode_choice.mode == "aligned"  # type: ignore[union-attr]
    assert output(spark, tmp_path / "bf-aligned") == backfilled

    # Today's code: a plain join with the table as it is now prices every impression at today's CPM.
    today = spark.read.parquet(*[t.file.file_path for t in dims.refresh().scan().plan_files()])
    naive = spark.read.parquet(str(tmp_path / "bf" / "out")).drop("campaign", "cpm").join(today, "title_id")
    naive_rows = {r["impression_id"]: r["cpm"] for r in naive.collect()}
    differ = sorted(i for i, cpm in naive_rows.items() if cpm != priced_at[i])
    # Today: title 1 at 2.0, titles 2-3 at 3.0, title 4 at 1.0. Before the first change titles 1-3
    # cost 1.0 (2 commits x 2 rows x 3 titles); between the changes title 2 cost 2.0 and title 3
    # 1.0 (2 commits x 2 rows x 2 titles). The backfill has the price of the time in all 20.
    assert len(differ) == 12 + 8
    assert len(naive_rows) == n


def test_validity_table_and_effective_time_lookups_on_static_facts(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat, props = catalog(tmp_path / "data dir")  # a space: Spark reports the files' paths quoted
    t0 = datetime(2026, 11, 1, 10)
    scd = cat.create_table(
        "dims.promotions_scd",
        Schema(
            *PROMOTIONS.fields,
            NestedField(4, "valid_from", TimestampType(), required=True),
            NestedField(5, "valid_to", TimestampType(), required=False),
        ),
    )
    scd.append(
        pa.table(
            {
                "title_id": [1, 1, 2],
                "campaign": ["a", "b", "c"],
                "cpm": [1.0, 2.0, 5.0],
                "valid_from": [t0, t0 + timedelta(hours=1), t0],
                "valid_to": [t0 + timedelta(hours=1), None, None],
            },
            schema=pa.schema(
                [
                    ("title_id", pa.int64(), False),
                    ("campaign", pa.string()),
                    ("cpm", pa.float64()),
                    ("valid_from", TS, False),
                    ("valid_to", TS),
                ]
            ),
        )
    )
    facts = spark.createDataFrame(
        [
            ("x", 1, t0 - timedelta(minutes=1)),
            ("y", 1, t0 + timedelta(minutes=59)),
            ("z", 1, t0 + timedelta(hours=1)),
            ("w", 2, t0 + timedelta(days=3)),
            ("v", 9, t0),
        ],
        "impression_id string, title_id long, event_ts timestamp",
    )
    versions = checked(validity_versions(spark, "dims.promotions_scd", "title_id", catalog_props=props))
    got = {
        r["impression_id"]: r["cpm"] for r in as_of(facts, versions, key="title_id", event_time="event_ts").collect()
    }
    assert got == {"x": None, "y": 1.0, "z": 2.0, "w": 5.0, "v": None}
    inner = as_of(facts, versions, key="title_id", event_time="event_ts", how="inner", columns=["campaign"])
    assert sorted(r["campaign"] for r in inner.collect()) == ["a", "b", "c"]

    # Effective time: a change entered at 10:30 takes effect from 10:00; a correction of the
    # 10:00 version committed later wins; the commit times do not matter.
    eff = cat.create_table("dims.promotions_eff", CHANGES)

    def change(rows: list[tuple[int, str, float, datetime]]) -> pa.Table:
        tbl = promotions([r[:3] for r in rows])
        return tbl.append_column(pa.field("changed_ts", TS, False), pa.array([r[3] for r in rows], TS))

    eff.append(change([(1, "a", 1.0, t0 - timedelta(hours=1))]))
    eff.append(change([(1, "b", 2.0, t0)]))
    eff.append(change([(1, "b-fixed", 2.5, t0)]))  # the same version, corrected
    v_eff = checked(
        snapshot_versions(spark, "dims.promotions_eff", "title_id", effective_column="changed_ts", catalog_props=props)
    )
    got = {
        r["impression_id"]: r["campaign"] for r in as_of(facts, v_eff, key="title_id", event_time="event_ts").collect()
    }
    assert got == {"x": "a", "y": "b-fixed", "z": "b-fixed", "w": None, "v": None}

    # A file Spark reports under a path the history does not know fails the query, never drops rows.
    monkeypatch.setattr(lookup_history, "normalized_path", lambda path: f"elsewhere/{path}")
    with pytest.raises(Exception, match="matches none of the history's"):
        snapshot_versions(spark, "dims.promotions_eff", "title_id", catalog_props=props).frame.count()
    monkeypatch.undo()

    # Two versions of a key that overlap would price a fact twice: refused, with an example.
    scd.append(
        pa.table(
            {
                "title_id": [2],
                "campaign": ["d"],
                "cpm": [6.0],
                "valid_from": [t0 + timedelta(hours=2)],
                "valid_to": [None],
            },
            schema=scd.schema().as_arrow(),
        )
    )
    with pytest.raises(ConfigError, match=r"1 version\(s\) of the dimension overlap"):
        checked(validity_versions(spark, "dims.promotions_scd", "title_id", catalog_props=props))


def test_changes_as_an_aligned_source_backfill_equals_live_and_the_version_of_the_time(
    spark: SparkSession, tmp_path: Path
) -> None:
    cat, props = catalog(tmp_path / "data")
    facts = cat.create_table("ingest.impressions", IMPRESSIONS)
    log = cat.create_table("dims.promotion_changes", CHANGES)
    t0 = datetime(2026, 11, 1, 10, tzinfo=UTC)

    def change(rows: list[tuple[int, str, float, datetime]]) -> pa.Table:
        tbl = promotions([r[:3] for r in rows])
        return tbl.append_column(
            pa.field("changed_ts", TS, False), pa.array([r[3].replace(tzinfo=None) for r in rows], TS)
        )

    # Six 10-minute commits of each table. Title t's price becomes 10*k + t at minute 10*k + 3*t
    # of the commits k in SCHEDULE; after them only title 9 (no impressions) changes, so that both
    # tables keep a commit per 10 minutes and the live job reads them side by side.
    expected: dict[str, float | None] = {}
    n = 0
    for k in range(6):
        base = t0 + timedelta(minutes=10 * k)
        titles = SCHEDULE.get(k, ())
        ch = [(t, f"c{k}", 10.0 * k + t, base + timedelta(minutes=3 * t)) for t in titles]
        log.append(change(ch or [(9, f"c{k}", 0.0, base + timedelta(minutes=1))]))
        rows = []
        for m in range(0, 10, 2):
            for t in TITLES:
                rows.append((f"i{n:03d}", t, base + timedelta(minutes=m, seconds=t)))
                n += 1
        facts.append(impressions(rows))
    # A last commit of each, far later: moves the live watermark past every impression above.
    log.append(change([(9, "later", 0.0, t0 + timedelta(hours=3))]))
    facts.append(impressions([("z999", 9, t0 + timedelta(hours=3))]))

    history = {}  # title -> [(from, cpm)] from the change log: the version valid at each time
    for r in log.scan().to_arrow().to_pylist():
        history.setdefault(r["title_id"], []).append((r["changed_ts"], r["cpm"]))
    for r in facts.scan().to_arrow().to_pylist():
        valid = [cpm for since, cpm in sorted(history[r["title_id"]]) if since <= r["event_ts"]]
        expected[r["impression_id"]] = valid[-1] if valid else None

    def cfg(name: str, mode: str, kind: str, **fields: Any) -> JobConfig:
        extra = {"startingPosition": "earliest", "readLimit": {"maxSnapshots": 3}} if kind == "icebergLive" else {}
        return job(
            props,
            tmp_path / name,
            name,
            mode,
            pipeline="spark_app.examples.enrich:changes_pipeline",
            pipelineArgs={"lateness": "15 minutes"},
            sources={
                "impressions": {"kind": kind, "table": "ingest.impressions", **extra},
                "promotion_changes": {
                    "kind": kind,
                    "table": "dims.promotion_changes",
                    "orderingColumn": "changed_ts",
                    **extra,
                },
            },
            **fields,
        )

    live_report = run(cfg("live", "live", "icebergLive"), spark)
    assert live_report.dropped_by_watermark == 0
    everything = output(spark, tmp_path / "live")
    # z999 waits in state for a watermark past it: live output lags by the lateness.
    assert len(everything) == n == 120
    assert {r[0]: r[4] for r in everything} == {i: cpm for i, cpm in expected.items() if i != "z999"}
    # The backfill reads to end + its drain (the 15-minute watermark delay): to minute 55, whose
    # last impression (54:04) takes its watermark to 39:04, past every impression before 40.
    end = t0 + timedelta(minutes=40)
    live = [r for r in everything if r[2] < end.replace(tzinfo=None)]
    assert len(live) == 80

    window = {"start": t0.isoformat(), "end": end.isoformat(), "warmup": "0s"}
    bf_report = run(
        cfg("bf", "backfill", "icebergBackfill", window=window, alignment={"mode": "aligned", "maxDrift": "5m"}),
        spark,
    )
    assert bf_report.dropped_by_watermark == 0
    assert output(spark, tmp_path / "bf") == live

    # Today's code: each impression with the latest version of its title.
    latest = {t: max(h)[1] for t, h in history.items()}
    differ = [r for r in live if r[4] != latest[r[1]]]
    # Today: titles 1-4 at 11, 22, 23 and 4 (from minutes 13, 26, 29, 12). Before those, the
    # impressions of title 1 (7), 2 (13), 3 (15) and 4 (6) had an older price, or none yet (16
    # impressions before their title's first promotion).
    assert len(differ) == 7 + 13 + 15 + 6
    assert sum(1 for r in live if r[4] is None) == 16
