"""The exactly-once Iceberg sink with real local Spark and a real SqlCatalog: snapshots per
batch, a kill between our commit and Spark's, branches, publish and undo.

Module-scoped: one live rmi run writes ``out.plays`` (main); one backfill of a window writes
``backfill-rmi-bf``. Tests that change the table work on their own copy (a fresh table).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig
from spark_app.contract.trace import read_trace
from spark_app.sinks.iceberg import batch_tags
from spark_app.sinks.iceberg.commit import BATCH_ID, QUERY_ID, batch_of, find_batch
from spark_app.sinks.iceberg.history import expire
from spark_app.sinks.iceberg.publish import ValidationFailedError, publish
from spark_app.sinks.iceberg.undo import UndoIncompleteError, batches_after, undo
from spark_app.sinks.iceberg.window import TimeWindow
from spark_app.sinks.iceberg.writer import FAULT_ENV, checkpoint_query_id
from tests.spark.conftest import T0, Dataset, Driver, sources

pytestmark = pytest.mark.spark

KEY = ["playback_id", "impression_id"]
START, END = T0 + timedelta(minutes=40), T0 + timedelta(minutes=80)
WINDOW = TimeWindow("playback_ts", START, END)


LIVE = sources("icebergLive", readLimit={"maxSnapshots": 3})
"""The live runs' sources: three of each table's snapshots per batch, eight batches over the
dataset's two hours: enough to kill one at batch 3 and replay it, a third of the batches (and of
their fixed cost: the suite's time) one snapshot per batch would take."""


def sink(table: str, **extra: Any) -> dict[str, Any]:
    return {"attributed_plays": {"kind": "iceberg", "table": table, "timeColumn": "playback_ts", **extra}}


def live_config(dataset: Dataset, tmp: Path, table: str, name: str = "rmi-live", **extra: Any) -> JobConfig:
    return dataset.config(
        tmp,
        name=name,
        mode="live",
        trigger={"kind": "availableNow"},
        sources=LIVE,
        sinks=sink(table, partitionBy=["hour(playback_ts)"], key=KEY),
        **extra,
    )


def backfill_config(dataset: Dataset, tmp: Path, table: str, name: str = "rmi-bf") -> JobConfig:
    return dataset.config(
        tmp,
        name=name,
        mode="backfill",
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        sinks=sink(table),
        window={"start": START.isoformat(), "end": END.isoformat(), "warmup": "30m"},
        alignment={"maxDrift": "4m"},
    )


def table_rows(table: Table, ref: str = "main") -> list[tuple[Any, ...]]:
    snap = table.snapshot_by_name(ref)
    assert snap is not None, f"no {ref}"
    t = table.scan(snapshot_id=snap.snapshot_id).to_arrow().sort_by([(k, "ascending") for k in KEY])
    return [tuple(r.values()) for r in t.select(sorted(t.column_names)).to_pylist()]


def in_window(rows: list[tuple[Any, ...]], table: Table) -> list[tuple[Any, ...]]:
    i = sorted(table.schema().column_names).index("playback_ts")
    return [r for r in rows if START <= r[i] < END]


@pytest.fixture(scope="module")
def written(
    spark: SparkSession, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, RunResult, RunResult]:
    tmp = tmp_path_factory.mktemp("iceberg-sink")
    live = run(live_config(dataset, tmp / "live", "out.plays"), spark)
    bf = run(backfill_config(dataset, tmp / "bf", "out.plays"), spark)
    return tmp, live, bf


def test_one_snapshot_per_batch_with_query_and_batch_ids(
    written: tuple[Path, RunResult, RunResult], dataset: Dataset
) -> None:
    tmp, _, _ = written
    table = dataset.catalog().load_table("out.plays")
    query_id = checkpoint_query_id(str(tmp / "live" / "ckpt" / "attributed_plays"))
    commits = [e for e in read_trace(tmp / "live" / "trace.jsonl") if e["event"] == "commit" and e["files"]]
    ours = [s for s in table.snapshots() if s.summary and s.summary.additional_properties.get(QUERY_ID) == query_id]
    assert len(ours) == len(commits) >= 6
    assert sorted(batch_of(s, query_id) for s in ours) == sorted(e["batch"] for e in commits)
    assert all(s.summary.additional_properties[BATCH_ID].isdigit() for s in ours if s.summary)
    assert sum(e["rows"] for e in commits) == len(table_rows(table)) > 500
    # partitioned by hour(playback_ts): every file lies in one hour partition
    hours = {}
    for task in table.scan().plan_files():
        hours[task.file.file_path] = task.file.partition[0]
    assert len(set(hours.values())) >= 2


def test_live_output_equals_the_file_sink_output(
    spark: SparkSession, written: tuple[Path, RunResult, RunResult], dataset: Dataset, tmp_path: Path
) -> None:
    table = dataset.catalog().load_table("out.plays")
    cfg = dataset.config(tmp_path, name="rmi-live", mode="live", trigger={"kind": "availableNow"}, sources=LIVE)
    run(cfg, spark)
    cols = sorted(table.schema().column_names)
    expected = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).select(*cols).collect())
    got = sorted(tuple(v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in r) for r in table_rows(table))
    assert got == expected


def test_backfill_writes_its_branch_and_leaves_main_untouched(
    written: tuple[Path, RunResult, RunResult], dataset: Dataset
) -> None:
    tmp, _, bf = written
    table = dataset.catalog().load_table("out.plays")
    main_query = checkpoint_query_id(str(tmp / "live" / "ckpt" / "attributed_plays"))
    head = table.snapshot_by_name("main")
    assert head is not None and head.summary is not None
    assert head.summary.additional_properties[QUERY_ID] == main_query, "main's head is still the live job's"
    branch = table_rows(table, "backfill-rmi-bf")
    assert branch and all(START <= r[sorted(table.schema().column_names).index("playback_ts")] < END for r in branch)
    assert branch == in_window(table_rows(table), table), "aligned backfill == live output over the window"
    assert bf.dropped_by_watermark == 0


def _copy(dataset: Dataset, name: str) -> Table:
    """A fresh table with main = the live output and backfill-rmi-bf = the backfill's."""
    catalog = dataset.catalog()
    src = catalog.load_table("out.plays")
    dst = catalog.create_table(f"out.{name}", schema=src.schema(), partition_spec=src.spec())
    main = src.scan(snapshot_id=src.snapshot_by_name("main").snapshot_id).to_arrow()  # type: ignore[union-attr]
    branch = src.scan(snapshot_id=src.snapshot_by_name("backfill-rmi-bf").snapshot_id).to_arrow()  # type: ignore[union-attr]
    # two appends to main, so files straddle nothing but partitions; the branch as its own history
    dst.append(main)
    dst.append(branch, branch="backfill-rmi-bf")
    return dst


def test_publish_replaces_the_window_in_one_snapshot(
    spark: SparkSession, written: tuple[Path, RunResult, RunResult], dataset: Dataset
) -> None:
    table = _copy(dataset, "published")
    # make main's window wrong, as an outage would: drop a third of its window rows
    main = table.scan().to_arrow()
    window_rows = main.filter(WINDOW.mask(main))
    outage = window_rows.slice(0, window_rows.num_rows // 3)
    table.delete(f"playback_id in ({', '.join(repr(p) for p in outage['playback_id'].to_pylist())})")
    before = table.refresh().snapshot_by_name("main")
    rows_before = table_rows(table)
    window_before = set(in_window(rows_before, table))
    expected_outside = [r for r in rows_before if r not in window_before]
    branch_rows = table_rows(table, "backfill-rmi-bf")

    load = lambda: dataset.catalog().load_table("out.published")  # noqa: E731
    with pytest.raises(ValidationFailedError, match="nothing was published"):
        publish(
            spark, load, dataset.props, "backfill-rmi-bf", WINDOW, key=KEY
        )  # the default gate: main's window is a third short
    assert table.refresh().snapshot_by_name("main") == before, "a refused publish changes nothing"
    # main is known wrong over the window here: opt out of the gate, explicitly
    result = publish(spark, load, dataset.props, "backfill-rmi-bf", WINDOW, key=KEY, min_match_ratio=0.0)
    assert result.comparison.main_rows == window_rows.num_rows - outage.num_rows
    assert result.comparison.branch_rows == window_rows.num_rows
    assert result.comparison.match_ratio == pytest.approx(
        (window_rows.num_rows - outage.num_rows) / window_rows.num_rows
    )
    assert result.rows_removed == result.comparison.main_rows and result.rows_added == len(branch_rows)

    table = load()
    after = table.snapshot_by_name("main")
    assert after is not None and before is not None and after.parent_snapshot_id == before.snapshot_id, "one snapshot"
    assert after.summary is not None and after.summary.operation.value == "overwrite"
    rows = table_rows(table)
    assert in_window(rows, table) == branch_rows
    branch_set = set(branch_rows)
    assert sorted(r for r in rows if r not in branch_set) == sorted(expected_outside)
    again = publish(spark, load, dataset.props, "backfill-rmi-bf", WINDOW, key=KEY)
    assert again.comparison.match_ratio == 1.0


def test_publish_is_atomic_when_its_commit_fails(
    spark: SparkSession, written: tuple[Path, RunResult, RunResult], dataset: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _copy(dataset, "atomic")
    main = table.scan().to_arrow()
    lost = main.filter(WINDOW.mask(main)).slice(0, 3)["playback_id"].to_pylist()
    table.delete(f"playback_id in ({', '.join(repr(p) for p in lost)})")  # main differs: publish must commit
    table = table.refresh()
    before, rows = table.snapshot_by_name("main"), table_rows(table)
    from pyiceberg.table import Transaction

    def fail(self: Transaction) -> Table:
        raise OSError("injected: catalog unreachable")

    monkeypatch.setattr(Transaction, "commit_transaction", fail)
    with pytest.raises(OSError, match="injected"):
        publish(
            spark,
            lambda: dataset.catalog().load_table("out.atomic"),
            dataset.props,
            "backfill-rmi-bf",
            WINDOW,
            key=KEY,
            min_match_ratio=0.0,
        )
    monkeypatch.undo()
    table = dataset.catalog().load_table("out.atomic")
    assert table.snapshot_by_name("main") == before
    assert table_rows(table) == rows


def test_undo_removes_exactly_the_batches_after_n_and_keeps_another_writers_rows(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    cfg = live_config(dataset, tmp_path, "out.undo", name="rmi-undo")
    run(cfg, spark)
    catalog = dataset.catalog()
    table = catalog.load_table("out.undo")
    query_id = checkpoint_query_id(str(tmp_path / "ckpt" / "attributed_plays"))
    commits = {
        e["batch"]: e["rows"] for e in read_trace(tmp_path / "trace.jsonl") if e["event"] == "commit" and e["files"]
    }
    n = sorted(commits)[len(commits) // 2]
    kept_by_us = sum(r for b, r in commits.items() if b <= n)

    other = table.scan().to_arrow().slice(0, 7)
    other = other.set_column(0, "playback_id", pa.array([f"other-{i}" for i in range(7)]))
    table.append(other)  # another writer commits after our batches

    load = lambda: catalog.load_table("out.undo")  # noqa: E731
    assert [b.batch_id for b in batches_after(load(), "main", query_id, n)] == [b for b in sorted(commits) if b > n]
    result = undo(load, "main", query_id, n)
    assert result.rows_removed == sum(r for b, r in commits.items() if b > n)
    table = load()
    rows = table.scan().to_arrow()
    assert rows.num_rows == kept_by_us + 7
    assert pc.sum(pc.starts_with(rows["playback_id"], "other-")).as_py() == 7
    assert undo(load, "main", query_id, n).snapshot_id is None, "nothing left to undo"


def test_kill_between_iceberg_commit_and_spark_commit_duplicates_nothing(
    written: tuple[Path, RunResult, RunResult], dataset: Dataset, tmp_path: Path
) -> None:
    cfg = live_config(
        dataset,
        tmp_path,
        "out.killed",
        name="rmi-kill",
        master="local[2]",
        sparkConf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    driver = Driver(cfg, tmp_path)
    killed = driver.run(**{FAULT_ENV: "kill-after-commit:3"})
    assert killed.returncode == -9, driver.tail()
    ckpt = tmp_path / "ckpt" / "attributed_plays"
    assert (ckpt / "offsets" / "3").exists() and not (ckpt / "commits" / "3").exists(), (
        "killed after ours, before Spark's"
    )

    restarted = driver.run()
    assert restarted.returncode == 0, driver.tail()
    replays = [e for e in read_trace(tmp_path / "trace.jsonl") if e["event"] == "commit" and e["batch"] == 3]
    assert [e["skipped"] for e in replays] == [False, True], "batch 3 replayed and skipped"

    table = dataset.catalog().load_table("out.killed")
    ids = Counter(zip(*(table.scan().to_arrow()[k].to_pylist() for k in KEY), strict=True))
    assert max(ids.values()) == 1, "no duplicate rows"
    reference = dataset.catalog().load_table("out.plays")  # the uninterrupted live run
    assert sorted(ids) == sorted(zip(*(reference.scan().to_arrow()[k].to_pylist() for k in KEY), strict=True))


def test_kill_between_sparks_commit_and_the_pipelined_iceberg_commit_loses_nothing(
    written: tuple[Path, RunResult, RunResult], dataset: Dataset, tmp_path: Path
) -> None:
    """The window the pipelined commit opens (issue 29): Spark logged batch 3 as done, our
    Iceberg commit of it had not started. The batch's record (``sinks.iceberg.pending``) is
    committed by the restarted run before its first batch: nothing lost, nothing twice."""
    cfg = live_config(
        dataset,
        tmp_path,
        "out.pipelined",
        name="rmi-pipelined",
        master="local[2]",
        sparkConf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    driver = Driver(cfg, tmp_path)
    killed = driver.run(**{FAULT_ENV: "kill-before-commit:3"})
    assert killed.returncode == -9, driver.tail()
    ckpt = tmp_path / "ckpt" / "attributed_plays"
    assert (ckpt / "commits" / "3").exists(), "Spark logged batch 3 as done"
    query_id = checkpoint_query_id(str(ckpt))
    table = dataset.catalog().load_table("out.pipelined")
    assert find_batch(table, "main", query_id, 3) is None, "killed before our commit of it"
    recorded = list((tmp_path / "ckpt" / "_kappa" / "pending-commits" / "attributed_plays").iterdir())
    assert [int(p.stem) for p in recorded if int(p.stem) == 3], "its files recorded"

    restarted = driver.run()
    assert restarted.returncode == 0, driver.tail()
    commits = [e for e in read_trace(tmp_path / "trace.jsonl") if e["event"] == "commit" and e["batch"] == 3]
    outcomes = [(e["skipped"], e.get("recovered", False)) for e in commits]
    assert outcomes == [(False, True)], "committed once, by the restarted run's recovery"
    assert not any((tmp_path / "ckpt" / "_kappa" / "pending-commits" / "attributed_plays").iterdir())

    table = dataset.catalog().load_table("out.pipelined")
    ids = Counter(zip(*(table.scan().to_arrow()[k].to_pylist() for k in KEY), strict=True))
    assert max(ids.values()) == 1, "no duplicate rows"
    reference = dataset.catalog().load_table("out.plays")  # the uninterrupted live run
    assert sorted(ids) == sorted(zip(*(reference.scan().to_arrow()[k].to_pylist() for k in KEY), strict=True))


def test_a_kill_then_expired_history_still_replays_nothing_and_undoes_exactly(
    written: tuple[Path, RunResult, RunResult], dataset: Dataset, tmp_path: Path
) -> None:
    """The table a long-running job writes: its history expired by the sink as it goes, and
    by another writer while the job is down. Neither the restarted query's replay check nor
    a later undo has a single snapshot of the query's batches left to go by."""
    history = {"keepLast": 2, "minAge": "0s", "expireEvery": 1}
    cfg = dataset.config(
        tmp_path,
        name="rmi-expiring",
        mode="live",
        trigger={"kind": "availableNow"},
        sources=LIVE,
        sinks=sink("out.expiring", partitionBy=["hour(playback_ts)"], key=KEY, history=history),
        master="local[2]",
        sparkConf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    driver = Driver(cfg, tmp_path)
    assert driver.run(**{FAULT_ENV: "kill-after-commit:3"}).returncode == -9, driver.tail()
    catalog = dataset.catalog()
    load = lambda: catalog.load_table("out.expiring")  # noqa: E731
    query_id = checkpoint_query_id(str(tmp_path / "ckpt" / "attributed_plays"))
    expiring = [e for e in read_trace(tmp_path / "trace.jsonl") if e["event"] == "commit" and "expired" in e]
    assert expiring and max(e["kept"] for e in expiring) <= 3, "the sink kept its history to keepLast (+ a head)"

    # while the job is down, another writer commits and expires everything but its own head
    for i in range(3):
        other = load().scan().to_arrow().slice(0, 1)
        load().append(other.set_column(0, "playback_id", pa.array([f"other-{i}"])))
    expire(load, keep_last=1, min_age=timedelta(0))
    assert not any(batch_of(s, query_id) is not None for s in load().snapshots()), "no batch snapshot left"

    assert driver.run().returncode == 0, driver.tail()
    replays = [e for e in read_trace(tmp_path / "trace.jsonl") if e["event"] == "commit" and e["batch"] == 3]
    assert [e["skipped"] for e in replays] == [False, True], "batch 3 replayed and skipped, found by its files"
    rows = load().scan().to_arrow()
    ids = Counter(zip(*(rows[k].to_pylist() for k in KEY), strict=True))
    assert max(ids.values()) == 1, "no duplicate rows"
    reference = catalog.load_table("out.plays")  # the uninterrupted live run
    ours = sorted(i for i in ids if not str(i[0]).startswith("other-"))
    assert ours == sorted(zip(*(reference.scan().to_arrow()[k].to_pylist() for k in KEY), strict=True))

    # every file the query wrote names its batch; an undo goes by those names alone
    files = {f.file_path: f.record_count for f in batch_tags.live_files(load(), "main")}
    tags = {p: batch_tags.parse(p) for p in files}
    assert sum(1 for t in tags.values() if t is None) == 3, "only the other writer's files are untagged"
    assert {t.query for t in tags.values() if t is not None} == {query_id}
    batches = sorted({t.first for t in tags.values() if t is not None})
    n = batches[len(batches) // 2]
    later = sum(files[p] for p, t in tags.items() if t is not None and t.first > n)
    assert len(load().snapshots()) <= 3 and later > 0
    done = undo(load, "main", query_id, n)
    assert done.rows_removed == later and done.batches == tuple(b for b in batches if b > n)
    assert load().scan().to_arrow().num_rows == len(ids) - later
    assert pc.sum(pc.starts_with(load().scan().to_arrow()["playback_id"], "other-")).as_py() == 3


def test_a_compacting_sink_keeps_every_row_and_rewinds_within_its_horizon(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """A dedup pipeline (another shape than rmi) whose sink compacts its small files and
    expires its history as it runs: the same rows as a sink that does neither, far fewer files,
    and an undo into the protected horizon is exact while one into a compacted range refuses."""

    def dedup(name: str, **maintenance: Any) -> JobConfig:
        return dataset.config(
            tmp_path / name,
            name=f"dedup-{name}",
            mode="live",
            pipeline="spark_app.examples.dedup:pipeline",
            pipelineArgs={"source": "playbacks", "key": "playback_id", "time_column": "event_ts"},
            trigger={"kind": "availableNow"},
            sources=sources("icebergLive", ("playbacks",)),
            sinks={
                "deduplicated": {
                    "kind": "iceberg",
                    "table": f"out.dedup_{name}",
                    "timeColumn": "event_ts",
                    "partitionBy": ["hour(event_ts)"],
                    **maintenance,
                }
            },
        )

    run(dedup("plain", compaction={"every": 0}, history={"expireEvery": 0}), spark)
    compacting = dedup(
        "compacting",
        compaction={"every": 4, "minFiles": 3, "protectBatches": 3},
        history={"keepLast": 4, "minAge": "0s", "expireEvery": 4},
    )
    run(compacting, spark)
    catalog = dataset.catalog()
    plain, table = catalog.load_table("out.dedup_plain"), catalog.load_table("out.dedup_compacting")

    def rows(t: Table) -> list[tuple[Any, ...]]:
        a = t.scan().to_arrow()
        return sorted(zip(*(a[c].to_pylist() for c in sorted(a.column_names)), strict=True), key=repr)

    assert rows(table) == rows(plain) and len(rows(plain)) > 100
    compactions = [e for e in read_trace(tmp_path / "compacting" / "trace.jsonl") if "compacted_files" in e]
    assert sum(e["compacted_files"] for e in compactions) > 0
    files = {f.file_path: f.record_count for f in batch_tags.live_files(table, "main")}
    assert len(files) < len(list(plain.scan().plan_files())) / 2
    assert len(table.snapshots()) <= 4 + 3, "keepLast, plus the commits since the last expiry"
    tags = {p: batch_tags.parse(p) for p in files}
    assert all(t is not None for t in tags.values()), "every file names its batch(es)"
    last = max(t.last for t in tags.values() if t)
    merged = [t for t in tags.values() if t and t.first < t.last]
    assert merged and all(t.last <= last - 3 for t in merged), "the newest 3 batches' files stay whole"

    query_id = checkpoint_query_id(str(tmp_path / "compacting" / "ckpt" / "deduplicated"))
    load = lambda: catalog.load_table("out.dedup_compacting")  # noqa: E731
    inside = merged[0]
    with pytest.raises(UndoIncompleteError, match="compaction merged batches"):
        undo(load, "main", query_id, inside.first)
    n = last - 2
    later = sum(files[p] for p, t in tags.items() if t and t.first > n)
    assert undo(load, "main", query_id, n).rows_removed == later > 0
    assert len(rows(load())) == len(rows(plain)) - later


def test_two_writers_on_one_table_both_land(dataset: Dataset, tmp_path: Path) -> None:
    """Two processes' worth of commits racing on one table: every batch of both is there."""
    from concurrent.futures import ThreadPoolExecutor

    from spark_app.sinks.iceberg.commit import JOB, commit_batch, data_files

    catalog = dataset.catalog()
    schema = pa.schema([pa.field("writer", pa.string()), pa.field("n", pa.int64())])
    catalog.create_namespace_if_not_exists("out")
    table = catalog.create_table("out.racing", schema=schema)
    mapping = table.schema().name_mapping.model_dump_json()  # plain Parquet files carry no field ids
    table = table.transaction().set_properties({"schema.name-mapping.default": mapping}).commit_transaction()

    def writer(name: str) -> list[int]:
        own = SqlCatalog("default", **dataset.props)  # its own connection, like another process
        attempts = []
        for b in range(8):
            t = own.load_table("out.racing")
            path = f"{t.location()}/data/{name}-{b}.parquet"
            import pyarrow.parquet as pq

            with t.io.new_output(path).create() as f:
                pq.write_table(pa.table({"writer": [name] * 3, "n": [b] * 3}, schema=schema), f)
            props = {QUERY_ID: name, BATCH_ID: str(b), JOB: name}
            files = data_files(t, [path])
            attempts.append(commit_batch(lambda: own.load_table("out.racing"), "main", files, props, 20).attempts)
        return attempts

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(writer, ["a", "b"]))
    rows = table.refresh().scan().to_arrow()
    assert Counter(zip(rows["writer"].to_pylist(), rows["n"].to_pylist(), strict=True)) == {
        (w, b): 3 for w in "ab" for b in range(8)
    }
