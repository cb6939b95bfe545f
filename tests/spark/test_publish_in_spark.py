"""Validation and publish as the publish application runs them (issue 16): the comparison is a
Spark job equal to the in-process reference on shapes our pipelines never produce (a
composite key with duplicates and nulls, a table without a key, a struct column, a window
edge inside files), and a publish driver killed before or after its commit is resumed by
running it again: main equals the branch over the window, nothing outside it moves, no row
twice, and the report says what the one commit did. And as a backfill's own run does them
(issue 58): ``python -m spark_app run`` of a backfill config with ``publish`` writes its branch,
validates and publishes in the same process, and leaves the report the operator ends on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType, StructType, TimestamptzType
from pyspark.sql import SparkSession

from spark_app.__main__ import main
from spark_app.apps.publish import run_publish
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.reports.publish import PublishReport, read_report, report_location
from spark_app.sinks.iceberg.publish import FAULT_ENV
from spark_app.sinks.iceberg.validation import compare_in_process, compare_snapshots
from spark_app.sinks.iceberg.window import TimeWindow
from tests.spark.conftest import Dataset, sources

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
WINDOW = TimeWindow("ts", T0, T0 + timedelta(hours=1))
SCHEMA = Schema(
    NestedField(1, "region", StringType(), required=False),
    NestedField(2, "user", LongType(), required=False),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(4, "amount", LongType(), required=False),
    NestedField(5, "note", StringType(), required=False),
    NestedField(
        6,
        "device",
        StructType(NestedField(7, "os", StringType(), required=False), NestedField(8, "v", LongType(), required=False)),
        required=False,
    ),
)
ARROW = pa.schema(
    [
        ("region", pa.string()),
        ("user", pa.int64()),
        ("ts", pa.timestamp("us", "UTC")),
        ("amount", pa.int64()),
        ("note", pa.string()),
        ("device", pa.struct([("os", pa.string()), ("v", pa.int64())])),
    ]
)


def batch(rows: list[tuple[Any, ...]]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in ARROW]
    return pa.table(
        {
            f.name: pa.array(
                [{"os": d[0], "v": d[1]} if d is not None else None for d in c] if f.name == "device" else list(c),
                f.type,
            )
            for f, c in zip(ARROW, cols, strict=True)
        },
        schema=ARROW,
    )


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    c = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    c.create_namespace("ns")
    return c


def props(c: SqlCatalog) -> dict[str, str]:
    return dict(c.properties)


def test_the_spark_comparison_equals_the_in_process_one_on_a_composite_key_with_duplicates_and_nulls(
    spark: SparkSession, catalog: SqlCatalog
) -> None:
    t = catalog.create_table("ns.keyed", SCHEMA)
    main = [
        ("eu", 1, at(1), 10, "a", ("ios", 1)),  # equal on both sides
        ("eu", 2, at(2), 20, None, None),  # equal, with nulls in non-key columns
        ("us", 1, at(3), 30, "x", ("web", 2)),  # differs in a nested field
        ("us", 2, at(4), 40, "y", None),  # only in main
        ("ap", 7, at(5), 70, "d", None),  # duplicated key in main: never matches
        ("ap", 7, at(6), 71, "d", None),
        (None, 9, at(7), 90, "n", None),  # a null in the key, on both sides
        ("eu", 3, at(-5), 1, "outside", None),  # outside the window: ignored
    ]
    branch = [
        ("eu", 1, at(1), 10, "a", ("ios", 1)),
        ("eu", 2, at(2), 20, None, None),
        ("us", 1, at(3), 30, "x", ("web", 3)),
        ("ap", 7, at(5), 70, "d", None),
        ("sa", 5, at(8), 50, "z", None),  # only in the branch
        (None, 9, at(7), 90, "n", None),
        ("eu", 4, at(61), 1, "outside", None),
    ]
    t.append(batch(main))
    t.append(batch(branch), branch="b")
    t = catalog.load_table("ns.keyed")
    m, b = t.snapshot_by_name("main").snapshot_id, t.snapshot_by_name("b").snapshot_id
    key = ["region", "user"]

    got = compare_snapshots(spark, t, props(catalog), WINDOW, m, b, key)

    assert (got.main_rows, got.branch_rows) == (7, 6)
    assert got.matched == 3, "eu/1, eu/2 and the null-keyed row; us/1 differs only inside the struct"
    assert got.match_ratio == pytest.approx(3 / 7)
    differing = {(d["region"], d["user"]) for d in got.differing}
    assert differing == {("us", 1), ("us", 2), ("ap", 7), ("sa", 5)}
    # The in-process comparison the operator ran before (pyarrow) cannot validate this table at
    # all: Arrow's hash join takes no struct column. On the flat columns it agrees with Spark,
    # except that it never matches a null key (Spark's rule: a null key equals a null key).
    with pytest.raises(pa.ArrowInvalid, match="struct"):
        compare_in_process(t, WINDOW, m, b, key)
    flat = catalog.create_table("ns.flat", pa.schema([f for f in ARROW if f.name != "device"]))
    flat.append(batch(main).drop_columns(["device"]))
    flat.append(batch(branch).drop_columns(["device"]), branch="b")
    flat = catalog.load_table("ns.flat")
    fm, fb = flat.snapshot_by_name("main").snapshot_id, flat.snapshot_by_name("b").snapshot_id
    got = compare_snapshots(spark, flat, props(catalog), WINDOW, fm, fb, key)
    ref = compare_in_process(flat, WINDOW, fm, fb, key)
    assert (got.main_rows, got.branch_rows) == (ref.main_rows, ref.branch_rows) == (7, 6)
    assert (ref.matched, got.matched) == (3, 4), "us/1 is equal once the struct is gone; plus the null key"


def test_the_spark_comparison_equals_the_in_process_one_without_a_key(spark: SparkSession, catalog: SqlCatalog) -> None:
    row = ("eu", 1, at(1), 10, "a", ("ios", 1))
    other = ("eu", 2, at(2), 20, "b", ("ios", 1))
    flat = pa.schema([f for f in ARROW if f.name != "device"])
    t = catalog.create_table("ns.bag", flat)
    t.append(batch([row, row, row, other]).drop_columns(["device"]))  # a multiset: three copies of one row
    t.append(batch([row, row, other, other, ("us", 3, at(3), 5, "c", None)]).drop_columns(["device"]), branch="b")
    t = catalog.load_table("ns.bag")
    m, b = t.snapshot_by_name("main").snapshot_id, t.snapshot_by_name("b").snapshot_id

    got = compare_snapshots(spark, t, props(catalog), WINDOW, m, b, [])

    ref = compare_in_process(t, WINDOW, m, b, [])
    assert (got.main_rows, got.branch_rows, got.matched) == (ref.main_rows, ref.branch_rows, ref.matched) == (4, 5, 3)
    assert {(d["user"], d["note"]) for d in got.differing} == {(1, "a"), (2, "b"), (3, "c")}


def test_an_empty_side_compares_without_reading_anything(spark: SparkSession, catalog: SqlCatalog) -> None:
    t = catalog.create_table("ns.empty", SCHEMA)
    t.append(batch([("eu", 1, at(-30), 1, None, None)]))  # nothing in the window
    t = catalog.load_table("ns.empty")
    got = compare_snapshots(spark, t, props(catalog), WINDOW, t.snapshot_by_name("main").snapshot_id, None, ["user"])
    assert (got.main_rows, got.branch_rows, got.match_ratio, got.differing) == (0, 0, 1.0, ())


# -- publish, killed and resumed -------------------------------------------------------------


def publish_config(tmp_path: Path, c: SqlCatalog, name: str) -> JobConfig:
    return parse_config(
        {
            "name": name,
            "pipeline": "spark_app.examples.rmi:pipeline",
            "mode": "backfill",
            "catalogs": {"default": {"type": "sql", **props(c)}},
            "sources": {"events": {"kind": "icebergBackfill", "catalog": "default", "table": "ns.events"}},
            "sinks": {"out": {"kind": "iceberg", "table": "ns.events", "key": ["region", "user"], "timeColumn": "ts"}},
            "checkpoint": {"location": str(tmp_path / "checkpoint")},
            "window": {"start": WINDOW.start.isoformat(), "end": WINDOW.end.isoformat()},
            "publish": {"minMatchRatio": 0.0, "tag": f"team-a/{name}"},
        },
        origin="(test)",
    )


def edge_table(c: SqlCatalog, branch: str) -> Table:
    """Main and branch each in files that straddle both edges of the window, plus one file
    wholly inside it: publish must rewrite the edges and move the inside file by reference."""
    t = c.create_table("ns.events", SCHEMA)
    t.append(batch([("eu", u, at(-10 + u), u, "before+in", None) for u in range(20)]))  # -10 .. +9 min
    t.append(batch([("us", u, at(50 + u), u, "in+after", None) for u in range(20)]))  # +50 .. +69 min
    t.append(batch([("ap", u, at(20 + u), u, "old", None) for u in range(5)]))  # inside
    fixed = [("eu", u, at(-10 + u), u * 100, "fixed", None) for u in range(20)]
    fixed += [("us", u, at(50 + u), u * 100, "fixed", None) for u in range(20)]
    fixed += [("ap", u, at(20 + u), u * 100, "fixed", None) for u in range(8)]
    t.append(batch(fixed), branch=branch)
    return c.load_table("ns.events")


def rows_of(t: Table, ref: str = "main") -> list[tuple[Any, ...]]:
    snap = t.snapshot_by_name(ref)
    data = t.scan(snapshot_id=snap.snapshot_id, selected_fields=("region", "user", "ts", "amount", "note")).to_arrow()
    return sorted((r["region"], r["user"], r["ts"], r["amount"], r["note"]) for r in data.to_pylist())


def in_window(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [r for r in rows if WINDOW.start <= r[2] < WINDOW.end]


def run_publish_driver(cfg: JobConfig, tmp_path: Path, fault: str | None) -> subprocess.CompletedProcess[bytes]:
    path = tmp_path / "job.json"
    path.write_text(cfg.to_json())
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    with (tmp_path / "publish.log").open("ab") as out:
        return subprocess.run(
            [sys.executable, "-m", "spark_app", "publish", "--config", str(path)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            timeout=600,
        )


def test_a_publish_killed_before_then_after_its_commit_is_resumed_by_running_it_again(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    cfg = publish_config(tmp_path, catalog, "fix-eu")
    branch = cfg.sink_branch("out")
    t = edge_table(catalog, branch)
    before, wanted = rows_of(t), in_window(rows_of(t, branch))
    window_before = set(in_window(before))
    outside = [r for r in before if r not in window_before]
    head = t.snapshot_by_name("main").snapshot_id

    def log() -> str:
        return (tmp_path / "publish.log").read_text()[-3000:]

    # killed before its commit: main untouched, no report (the operator waits for one)
    assert run_publish_driver(cfg, tmp_path, "kill-before-commit").returncode != 0, log()
    assert read_report(cfg) is None
    t = catalog.load_table("ns.events")
    assert t.snapshot_by_name("main").snapshot_id == head and rows_of(t) == before, "main untouched"

    # run again, killed right after its commit: committed once, still no report
    assert run_publish_driver(cfg, tmp_path, "kill-after-commit").returncode != 0, log()
    assert read_report(cfg) is None
    committed = catalog.load_table("ns.events").snapshot_by_name("main")
    assert committed.parent_snapshot_id == head, "one commit on top of main"

    # run again: nothing to commit, and the report says what the one commit did
    assert run_publish_driver(cfg, tmp_path, None).returncode == 0, log()
    t = catalog.load_table("ns.events")
    assert t.snapshot_by_name("main").snapshot_id == committed.snapshot_id, "no second commit"
    after = rows_of(t)
    assert in_window(after) == wanted, "main's window is the branch's"
    window_after = set(in_window(after))
    assert sorted(r for r in after if r not in window_after) == sorted(outside), "outside the window untouched"
    assert len(after) == len(set(after)) == len(outside) + len(wanted), "no row twice"
    published = [s for s in t.snapshots() if (s.summary.additional_properties or {}).get("kappa.backfill")]
    assert [s.snapshot_id for s in published] == [committed.snapshot_id], "one publish snapshot, whatever the kills"
    report = read_report(cfg)
    assert report is not None and report.state == "Published" and report.backfill == "team-a/fix-eu"
    (table,) = report.tables
    assert table.snapshot_id == committed.snapshot_id and table.earlier, "the earlier run's commit, reported"
    assert (table.rows_removed, table.rows_added) == (len(in_window(before)), len(wanted))
    assert table.main_rows == len(in_window(before)) and table.branch_rows == len(wanted), "its validation, kept"
    assert 0 < len(table.differing_keys) <= 10 and json.loads(table.differing_keys[0])


def test_a_refused_publish_reports_the_table_and_the_fix_and_changes_nothing(
    spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    cfg = publish_config(tmp_path, catalog, "fix-eu")
    cfg = cfg.model_copy(update={"publish": cfg.publish.model_copy(update={"min_match_ratio": 0.999})})  # type: ignore[union-attr]
    t = edge_table(catalog, cfg.sink_branch("out"))
    before = t.snapshot_by_name("main").snapshot_id

    report = run_publish(cfg, spark)

    assert report.state == "Refused" and report.tables == []
    assert report.error is not None and report.error.startswith("ns.events: branch 'backfill-fix-eu' matches main")
    assert "nothing was published" in report.error and "Lower the required ratio" in report.error
    assert read_report(cfg) == report, "the report the operator reads is the one returned"
    assert catalog.load_table("ns.events").snapshot_by_name("main").snapshot_id == before


def test_the_report_goes_next_to_the_checkpoint_unless_configured(catalog: SqlCatalog, tmp_path: Path) -> None:
    cfg = publish_config(tmp_path, catalog, "fix-eu")
    loc, name = report_location(cfg)
    assert loc.path(name) == f"{tmp_path}/checkpoint/_kappa/publish-report.json"
    moved = cfg.model_copy(
        update={"publish": cfg.publish.model_copy(update={"report": f"{tmp_path}/reports/fix-eu.json"})}  # type: ignore[union-attr]
    )
    loc, name = report_location(moved)
    assert loc.path(name) == f"{tmp_path}/reports/fix-eu.json"
    assert read_report(moved) is None, "nothing there yet: the operator keeps waiting"


# -- in the backfill's own run ---------------------------------------------------------------

RUN_WINDOW = {"start": at(40).isoformat(), "end": at(80).isoformat(), "warmup": "30m"}
RMI_KEY = ["playback_id", "impression_id"]


def backfill_that_publishes(
    dataset: Dataset, tmp: Path, pipeline: str = "spark_app.examples.rmi:pipeline"
) -> JobConfig:
    """rmi's backfill over 40 minutes of the generated history (bounded: one batch query) into
    the branch of a table of its own catalog, publishing at a gate an empty main fails."""
    return dataset.config(
        tmp,
        name="rmi-fix",
        mode="backfill",
        pipeline=pipeline,
        catalogs={
            "default": {"type": "sql", **dataset.props},
            "out": {"type": "sql", "uri": f"sqlite:///{tmp}/out.db", "warehouse": f"file://{tmp}/out-wh"},
        },
        sinks={
            "attributed_plays": {
                "kind": "iceberg",
                "catalog": "out",
                "table": "marts.attributed_plays",
                "key": RMI_KEY,
                "timeColumn": "playback_ts",
            }
        },
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        window=RUN_WINDOW,
        alignment={"mode": "bounded", "maxDrift": "4m"},
        publish={"minMatchRatio": 0.999, "tag": "team-a/rmi-fix"},
    )


def driver(cfg: JobConfig, tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``python -m spark_app --config`` (the ``run`` command) in this process, on its SparkSession."""
    path = tmp / f"{cfg.name}-{len(list(tmp.glob('*.json')))}.json"
    path.write_text(cfg.to_json())
    code = main(["--config", str(path)])
    return code, capsys.readouterr().out


def keys(t: Table, ref: str) -> list[tuple[Any, ...]]:
    snap = t.snapshot_by_name(ref)
    assert snap is not None, ref
    data = t.scan(snapshot_id=snap.snapshot_id, selected_fields=(*RMI_KEY, "playback_ts")).to_arrow()
    return sorted((r["playback_id"], r["impression_id"], r["playback_ts"]) for r in data.to_pylist())


def test_a_backfills_run_validates_and_publishes_in_the_same_process(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusing = backfill_that_publishes(dataset, tmp_path)
    loc, name = report_location(refusing)
    earlier = PublishReport(backfill="team-a/rmi-fix", state="Published", tables=[], started_at=T0, finished_at=T0)

    # a report on storage is always this run's: cleared when the run starts, even if it fails
    loc.write_bytes(name, earlier.model_dump_json().encode())
    broken = backfill_that_publishes(dataset, tmp_path, pipeline="no_such_module:pipeline")
    code, _ = driver(broken, tmp_path, capsys)
    assert code != 0 and read_report(refusing) is None, "an earlier attempt's report is gone"

    # refused: the branch is written, main unchanged, the application completes (exit 0)
    loc.write_bytes(name, earlier.model_dump_json().encode())
    code, out = driver(refusing, tmp_path, capsys)
    assert code == 0, out
    assert '"state": "Refused"' in out
    refused = read_report(refusing)
    assert refused is not None and refused.state == "Refused" and refused.started_at > T0, "this run's report"
    assert refused.error is not None and "nothing was published" in refused.error
    table = SqlCatalog("out", **refusing.catalogs["out"].properties()).load_table("marts.attributed_plays")
    branch = keys(table, "backfill-rmi-fix")
    assert len(branch) > 50 and keys(table, "main") == [], "main unchanged"
    branch_head = table.snapshot_by_name("backfill-rmi-fix").snapshot_id  # type: ignore[union-attr]

    # run again with the gate at 0 (a new attempt): it resumes, has nothing to write, publishes
    publishing = refusing.model_copy(update={"publish": refusing.publish.model_copy(update={"min_match_ratio": 0.0})})  # type: ignore[union-attr]
    code, out = driver(publishing, tmp_path, capsys)
    assert code == 0, out
    assert '"state": "Published"' in out
    report = read_report(publishing)
    assert report is not None and report.state == "Published" and report.backfill == "team-a/rmi-fix"
    (published,) = report.tables
    table = table.refresh()
    assert table.snapshot_by_name("backfill-rmi-fix").snapshot_id == branch_head, "the branch not written again"  # type: ignore[union-attr]
    assert keys(table, "main") == branch, "main's window is the branch's"
    assert (published.rows_removed, published.rows_added, published.branch_rows) == (0, len(branch), len(branch))
    assert published.snapshot_id == table.snapshot_by_name("main").snapshot_id  # type: ignore[union-attr]
