"""The Iceberg sink's pure parts and its commit protocol on a real SqlCatalog (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, HourTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from spark_app.contract.config import parse_config
from spark_app.contract.errors import ConfigError
from spark_app.sinks.iceberg.commit import BATCH_ID, JOB, QUERY_ID, commit_batch, data_files, find_batch
from spark_app.sinks.iceberg.table import parse_transform, partition_spec
from spark_app.sinks.iceberg.undo import undo
from spark_app.sinks.iceberg.validation import matched_rows
from spark_app.sinks.iceberg.window import TimeWindow

BASE: dict[str, Any] = {
    "name": "job",
    "pipeline": "m:f",
    "mode": "live",
    "catalogs": {"default": {"type": "sql", "uri": "sqlite:///:memory:"}},
    "sources": {"a": {"kind": "icebergLive", "table": "ns.a"}},
    "checkpoint": {"location": "/tmp/ck"},
}


def cfg(sink: dict[str, Any], **extra: Any):  # type: ignore[no-untyped-def]
    return parse_config({**BASE, "sinks": {"out": {"kind": "iceberg", "table": "ns.out", **sink}}, **extra})


def test_sink_branch_defaults_to_main_live_and_backfill_name_in_a_backfill() -> None:
    assert cfg({}).sink_branch("out") == "main"
    assert cfg({"branch": "audit"}).sink_branch("out") == "audit"
    bf = cfg(
        {},
        mode="backfill",
        sources={"a": {"kind": "icebergBackfill", "table": "ns.a"}},
        window={"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"},
    )
    assert bf.sink_branch("out") == "backfill-job"


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ({"outputMode": "update"}, "sinks.out.outputMode: an iceberg sink appends"),
        ({"partitionBy": ["hours(ts)"]}, "partitionBy[0] 'hours(ts)': use col, hour(col)"),
        ({"catalog": "prod"}, "sinks.out.catalog 'prod' is not in catalogs (default)"),
        ({"table": "out"}, "sinks.out.table: String should match pattern"),
        ({"commitRetries": -1}, "sinks.out.commitRetries"),
    ],
)
def test_bad_sink_configs_name_the_field(sink: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        cfg(sink)
    assert message.split(": ")[0] in str(err.value) and message.split(": ", 1)[-1] in str(err.value)


def test_partition_transforms() -> None:
    assert parse_transform("hour(ts)") == ("ts", HourTransform(), "ts_hour")
    assert parse_transform("bucket(16, id)") == ("id", BucketTransform(16), "id_bucket")
    assert parse_transform("country") == ("country", IdentityTransform(), "country")
    schema = Schema(NestedField(1, "ts", TimestamptzType()), NestedField(2, "id", LongType()))
    spec = partition_spec(schema, ["hour(ts)", "bucket(4, id)"])
    assert [(f.source_id, f.name) for f in spec.fields] == [(1, "ts_hour"), (2, "id_bucket")]
    with pytest.raises(ConfigError, match="'nope' is not an output column"):
        partition_spec(schema, ["day(nope)"])


def test_matched_rows_on_a_key_and_as_whole_rows() -> None:
    a = pa.table({"k": [1, 2, 3, 4, 4], "v": ["x", "y", "z", "w", "w"]})
    b = pa.table({"k": [1, 2, 3, 5], "v": ["x", "Y", "z", "q"]})
    assert matched_rows(a, b, ["k"]) == 2  # 2 differs, 4 is not unique in a, 5 only in b
    assert matched_rows(a, b, []) == 2
    assert matched_rows(a, a, []) == 5
    nulls = pa.table({"k": [1], "v": pa.array([None], pa.string())})
    assert matched_rows(nulls, nulls, ["k"]) == 1


def test_time_window_mask_is_half_open_in_utc() -> None:
    start = datetime(2026, 1, 1, 10, tzinfo=UTC)
    w = TimeWindow("ts", start, start + timedelta(hours=1))
    ts = [start - timedelta(microseconds=1), start, start + timedelta(minutes=59), start + timedelta(hours=1)]
    rows = pa.table({"ts": pa.array(ts, pa.timestamp("us", "UTC"))})
    assert w.mask(rows).to_pylist() == [False, True, True, False]


@pytest.fixture
def table(tmp_path: Path) -> tuple[SqlCatalog, Table]:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(NestedField(1, "id", StringType()), NestedField(2, "n", LongType()))
    t = catalog.create_table("ns.t", schema)
    t = t.transaction().set_properties({"schema.name-mapping.default": t.schema().name_mapping.model_dump_json()})
    return catalog, t.commit_transaction()


def _file(t: Table, name: str, n: int) -> DataFile:
    path = f"{t.location()}/data/{name}.parquet"
    with t.io.new_output(path).create() as f:
        pq.write_table(pa.table({"id": [name] * n, "n": list(range(n))}), f)
    return data_files(t, [path])[0]


def test_a_replayed_batch_is_skipped_and_adds_nothing(table: tuple[SqlCatalog, Table]) -> None:
    catalog, t = table
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    for b in range(3):
        out = commit_batch(load, "main", [_file(t, f"q-{b}", 2)], {QUERY_ID: "q", BATCH_ID: str(b), JOB: "j"}, 3)
        assert not out.skipped
    commit_batch(load, "main", [_file(t, "other", 1)], {QUERY_ID: "other", BATCH_ID: "0", JOB: "j"}, 3)
    before = load().current_snapshot()
    replay = commit_batch(load, "main", [_file(t, "q-2-again", 2)], {QUERY_ID: "q", BATCH_ID: "2", JOB: "j"}, 3)
    assert replay.skipped and load().current_snapshot() == before
    assert len(load().scan().to_arrow()) == 7
    assert find_batch(load(), "main", "q", 1) is not None
    assert find_batch(load(), "main", "q", 3) is None
    assert find_batch(load(), "audit", "q", 1) is None, "another branch has its own history"


def test_a_branch_commit_leaves_main_alone(table: tuple[SqlCatalog, Table]) -> None:
    catalog, t = table
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    commit_batch(load, "main", [_file(t, "live", 3)], {QUERY_ID: "live", BATCH_ID: "0", JOB: "j"}, 3)
    main = load().current_snapshot()
    commit_batch(load, "backfill-x", [_file(t, "bf", 5)], {QUERY_ID: "bf", BATCH_ID: "0", JOB: "x"}, 3)
    t = load()
    assert t.current_snapshot() == main
    branch = t.snapshot_by_name("backfill-x")
    assert branch is not None and len(t.scan(snapshot_id=branch.snapshot_id).to_arrow()) == 5
    # the live job keeps committing to main meanwhile; the branch does not move
    commit_batch(load, "main", [_file(t, "live-1", 4)], {QUERY_ID: "live", BATCH_ID: "1", JOB: "j"}, 3)
    t = load()
    assert len(t.scan().to_arrow()) == 7
    assert t.snapshot_by_name("backfill-x") == branch


def test_a_rewound_query_commits_its_batch_ids_again_after_an_undo(table: tuple[SqlCatalog, Table]) -> None:
    """A query restored to batch 1 under the same id runs batch 2 again with new contents: the
    undo of batches > 1 is a cut, so the new batch 2 is not skipped as a replay."""
    catalog, t = table
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    for b in range(4):
        commit_batch(load, "main", [_file(t, f"old-{b}", 1)], {QUERY_ID: "q", BATCH_ID: str(b), JOB: "j"}, 3)
    assert undo(load, "main", "q", 1).batches == (2, 3)
    assert find_batch(load(), "main", "q", 2) is None and find_batch(load(), "main", "q", 1) is not None
    again = commit_batch(load, "main", [_file(t, "new-2", 1)], {QUERY_ID: "q", BATCH_ID: "2", JOB: "j"}, 3)
    assert not again.skipped
    assert find_batch(load(), "main", "q", 2) is not None, "and a replay of the new batch 2 is skipped again"
    assert sorted(load().scan().to_arrow()["id"].to_pylist()) == ["new-2", "old-0", "old-1"]
