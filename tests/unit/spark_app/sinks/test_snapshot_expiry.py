"""Snapshot expiry keeps commits flat without losing what a rewind or a replay needs.

The sink's batches are found by the tag in their files' names once their snapshots are
gone: an undo after expiry removes exactly the batches it should, a replayed batch is still
skipped, and a rewound batch id is still committed again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.types import LongType, NestedField, StringType

from spark_app.contract.config import parse_config
from spark_app.contract.errors import ConfigError
from spark_app.sinks.iceberg import batch_tags
from spark_app.sinks.iceberg.commit import BATCH_ID, JOB, QUERY_ID, commit_batch, find_batch
from spark_app.sinks.iceberg.compaction import LiveFile, plan
from spark_app.sinks.iceberg.history import SnapshotInfo, expirable, expire
from spark_app.sinks.iceberg.undo import UndoIncompleteError, undo

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
Q = "3f1c2b9e-0d1a-4c7e-9a55-1b2c3d4e5f60"


def _info(i: int, minutes_ago: float) -> SnapshotInfo:
    return SnapshotInfo(i, int((NOW - timedelta(minutes=minutes_ago)).timestamp() * 1000))


def test_expirable_keeps_the_newest_the_young_and_the_heads() -> None:
    snaps = [_info(i, 100 - i) for i in range(10)]  # 0 is the oldest
    assert expirable(snaps, set(), keep_last=3, min_age=timedelta(0), now=NOW) == [0, 1, 2, 3, 4, 5, 6]
    assert expirable(snaps, {2, 9}, keep_last=3, min_age=timedelta(0), now=NOW) == [0, 1, 3, 4, 5, 6]
    # younger than min_age: kept whatever the count (a reader may be that far behind)
    assert expirable(snaps, set(), keep_last=3, min_age=timedelta(minutes=95), now=NOW) == [0, 1, 2, 3, 4]
    assert expirable(snaps, set(), keep_last=50, min_age=timedelta(0), now=NOW) == []
    assert expirable(snaps[:1], set(), keep_last=1, min_age=timedelta(0), now=NOW) == []


def test_batch_tags_round_trip_and_leave_other_files_alone() -> None:
    name = f"s3://b/t/data/ts_hour=2026-11-23-10/{batch_tags.tag(Q, 12)}_00000-0-{Q}.parquet"
    assert batch_tags.parse(name) == batch_tags.BatchTag(Q, 12, 12)
    assert batch_tags.parse("s3://b/t/data/ts_hour=1/00000-0-abc.parquet") is None
    # Spark's writer names its files itself: the tag names the batch's directory instead
    spark = f"s3://b/t/data/{batch_tags.tag(Q, 3)}_9f2c/ts_hour=1/part-00000-{Q}.c000.zstd.parquet"
    assert batch_tags.parse(spark) == batch_tags.BatchTag(Q, 3, 3)
    inner = f"s3://b/{batch_tags.tag(Q, 3)}_dir/{batch_tags.tag(Q, 4, 6)}_00000-0-abc.parquet"
    assert batch_tags.parse(inner) == batch_tags.BatchTag(Q, 4, 6), "the nearest tag to the file"
    assert batch_tags.parse(f"s3://b/t/data/x=q{Q}_b3_/part-0.parquet") is None, "a partition value is no tag"


@pytest.fixture
def table(tmp_path: Path) -> tuple[SqlCatalog, Table]:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(NestedField(1, "id", StringType()), NestedField(2, "n", LongType()))
    t = catalog.create_table("ns.t", schema)
    t = t.transaction().set_properties({"schema.name-mapping.default": t.schema().name_mapping.model_dump_json()})
    return catalog, t.commit_transaction()


def _write(t: Table, query: str, batch: int, rows: int) -> list[DataFile]:
    """Files written the way the sink's executors write them: the table's metadata with the
    batch tag's location provider."""
    meta = t.metadata.model_copy(
        update={"properties": batch_tags.write_properties(t.metadata.properties, query, batch)}
    )
    data = pa.table({"id": [f"{query[:4]}-{batch}"] * rows, "n": list(range(rows))})
    return list(_dataframe_to_data_files(meta, data, t.io))


def _commit(catalog: SqlCatalog, query: str, batch: int, rows: int = 2) -> bool:
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    files = _write(load(), query, batch, rows)
    return not commit_batch(load, "main", files, {QUERY_ID: query, BATCH_ID: str(batch), JOB: "j"}, 3).skipped


def _expire_all_but_head(catalog: SqlCatalog) -> None:
    out = expire(lambda: catalog.load_table("ns.t"), keep_last=1, min_age=timedelta(0))
    assert out is not None and out.kept == 1
    assert len(catalog.load_table("ns.t").snapshots()) == 1


def _ids(catalog: SqlCatalog) -> list[str]:
    return sorted(catalog.load_table("ns.t").scan().to_arrow()["id"].to_pylist())


def test_files_carry_their_batch_in_the_tables_usual_location(table: tuple[SqlCatalog, Table]) -> None:
    catalog, t = table
    paths = [f.file_path for f in _write(t, Q, 7, 3)]
    assert [batch_tags.parse(p) for p in paths] == [batch_tags.BatchTag(Q, 7, 7)]
    assert paths[0].startswith(f"{t.location()}/data/")
    # a table with the object-store layout keeps it: the tag only renames the file
    t = t.transaction().set_properties({TableProperties.OBJECT_STORE_ENABLED: "true"}).commit_transaction()
    (hashed,) = [f.file_path for f in _write(t, Q, 8, 1)]
    assert batch_tags.parse(hashed) == batch_tags.BatchTag(Q, 8, 8) and hashed.count("/") > paths[0].count("/")
    assert batch_tags.WRITE_TAG not in catalog.load_table("ns.t").properties, "never set on the table"


def test_undo_after_every_batch_snapshot_expired_removes_exactly_the_later_batches(
    table: tuple[SqlCatalog, Table],
) -> None:
    catalog, _ = table
    for b in range(6):
        assert _commit(catalog, Q, b)
    assert _commit(catalog, "other-writer", 0, rows=5)
    _expire_all_but_head(catalog)
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    done = undo(load, "main", Q, after_batch=2)
    assert done.batches == (3, 4, 5) and done.rows_removed == 6
    assert _ids(catalog) == sorted(["3f1c-0"] * 2 + ["3f1c-1"] * 2 + ["3f1c-2"] * 2 + ["othe-0"] * 5)
    assert undo(load, "main", Q, after_batch=2).snapshot_id is None, "idempotent: nothing left to remove"


def test_replay_check_after_expiry_skips_a_committed_batch_and_commits_a_rewound_one(
    table: tuple[SqlCatalog, Table],
) -> None:
    catalog, _ = table
    for b in range(4):
        _commit(catalog, Q, b)
    # another writer commits on: the query's own snapshots leave the retained history
    for b in range(3):
        _commit(catalog, "other-writer", b)
    _expire_all_but_head(catalog)
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    found = find_batch(load(), "main", Q, 3)
    assert found is not None and found.snapshot_id is None, "found by its files"
    assert not _commit(catalog, Q, 3), "a replay of batch 3 after a restart adds nothing"
    assert find_batch(load(), "main", Q, 4) is None
    # rewind to batch 1: batches 2 and 3 undone, the undo's snapshot expired too, then rerun
    undo(load, "main", Q, after_batch=1)
    _commit(catalog, "other-writer", 3)
    _expire_all_but_head(catalog)
    assert find_batch(load(), "main", Q, 2) is None, "undone: the rerun of batch 2 must commit"
    assert _commit(catalog, Q, 2, rows=1)
    assert _ids(catalog).count("3f1c-2") == 1 and "3f1c-3" not in _ids(catalog)


def test_expiry_never_takes_a_branch_head(table: tuple[SqlCatalog, Table]) -> None:
    catalog, _ = table
    _commit(catalog, Q, 0)
    load = lambda: catalog.load_table("ns.t")  # noqa: E731
    commit_batch(load, "backfill-x", _write(load(), "bf", 0, 4), {QUERY_ID: "bf", BATCH_ID: "0", JOB: "x"}, 3)
    for b in range(1, 5):
        _commit(catalog, Q, b)
    branch = load().snapshot_by_name("backfill-x")
    expire(load, keep_last=1, min_age=timedelta(0))
    assert load().snapshot_by_name("backfill-x") == branch
    assert {s.snapshot_id for s in load().snapshots()} == {branch.snapshot_id, load().current_snapshot().snapshot_id}


def test_a_bad_history_policy_names_the_field() -> None:
    base = {
        "name": "job",
        "pipeline": "m:f",
        "mode": "live",
        "catalogs": {"default": {"type": "sql", "uri": "sqlite:///:memory:"}},
        "sources": {"a": {"kind": "icebergLive", "table": "ns.a"}},
        "checkpoint": {"location": "/tmp/ck"},
    }
    for bad, field in (
        ({"keepLast": 0}, "keepLast"),
        ({"minAge": "-1m"}, "minAge"),
        ({"expireEvery": -1}, "expireEvery"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_config({**base, "sinks": {"out": {"kind": "iceberg", "table": "ns.out", "history": bad}}})
        assert f"sinks.out.history.{field}" in str(err.value)


def test_plain_parquet_files_are_not_mistaken_for_batches(tmp_path: Path) -> None:
    path = tmp_path / "q_b1_x.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    assert batch_tags.parse(str(path)) is None, "a tag needs q<query id>_b<batch>_"


# --- compaction: what it may touch, and what an undo does with its files ----------------------


def _live(path: str, size: int = 1000, partition: tuple[int, ...] = (1,)) -> LiveFile:
    return LiveFile(path, size, 0, partition, batch_tags.parse(path))


def _ours(batch: int, partition: int = 1, size: int = 1000) -> LiveFile:
    return _live(f"wh/data/p={partition}/{batch_tags.tag(Q, batch)}_00000-0-x.parquet", size, (partition,))


def test_compaction_plans_old_small_files_of_this_query_per_partition() -> None:
    files = [_ours(b) for b in range(20)] + [_ours(b, partition=2) for b in range(5)]
    files += [_ours(3, size=10**9)]  # big: left alone
    files += [_live(f"wh/data/p=1/{batch_tags.tag('other-query', b)}_x.parquet") for b in range(12)]
    files += [_live(f"wh/data/p=1/00000-{i}-untagged.parquet") for i in range(3)]
    groups = plan(
        files, Q, current_batch=19, protect_batches=5, min_files=3, small_file_bytes=10**6, target_bytes=10**8
    )
    ours = sorted((g.first, g.last, len(g.paths)) for g in groups if g.query == Q)
    assert ours == [(0, 4, 5), (0, 14, 15)], "partition 2 and partition 1, each one file"
    assert all(t.last <= 14 for g in groups if g.query == Q for t in map(batch_tags.parse, g.paths) if t), (
        "the newest 5 batches stay whole"
    )
    assert [len(g.paths) for g in groups if g.query is None] == [3], "files no query of ours wrote"
    assert not any("other-query" in p for g in groups for p in g.paths), "another query's files are its own"
    # too few files, or a byte budget per output file
    assert plan(files[:2], Q, 19, 0, 3, 10**6, 10**8) == []
    chunks = plan([_ours(b) for b in range(10)], Q, 100, 0, 2, 10**6, target_bytes=3500)
    assert [len(g.paths) for g in chunks] == [3, 3, 3] and (chunks[0].first, chunks[0].last) == (0, 2)


def test_the_rewind_horizon_comes_from_the_checkpoint_retention() -> None:
    import yaml

    from kappa_operator.models.streaming_job import StreamingJob
    from kappa_operator.render.jobconfig import rewind_horizon_batches, streaming_job_config

    data = yaml.safe_load((Path(__file__).resolve().parents[4] / "examples" / "rmi-streamingjob.yaml").read_text())
    spec = data["spec"]

    def horizon(**checkpoints: object) -> int:
        job = StreamingJob.model_validate(
            {
                **data,
                "metadata": {"name": "rmi"},
                "spec": {**spec, "triggerInterval": "10s", "checkpoints": {"location": "s3a://lake/ck", **checkpoints}},
            }
        )
        return rewind_horizon_batches(job.spec)

    assert horizon() == 0, "no restore points: nothing to protect"
    assert horizon(externalLocation="s3://b/x", interval="10m", retention={"count": 24}) == 25 * 60
    assert horizon(externalLocation="s3://b/x", interval="10m", retention={"count": 24, "maxAge": "1h"}) == 70 * 6
    job = StreamingJob.model_validate({**data, "metadata": {"name": "rmi"}})
    sink = next(iter(streaming_job_config(job).sinks.values()))
    assert sink.compaction.protect_batches == rewind_horizon_batches(job.spec)  # type: ignore[union-attr]


def test_undo_refuses_to_split_a_compacted_file_and_removes_whole_ones(table: tuple[SqlCatalog, Table]) -> None:
    catalog, _ = table
    load = lambda: catalog.load_table("ns.t")  # noqa: E731

    def commit_range(first: int, last: int, rows: int) -> None:
        t = load()
        meta = t.metadata.model_copy(
            update={"properties": batch_tags.write_properties(t.metadata.properties, Q, first, last)}
        )
        data = pa.table({"id": [f"{first}-{last}"] * rows, "n": list(range(rows))})
        files = list(_dataframe_to_data_files(meta, data, t.io))
        commit_batch(load, "main", files, {QUERY_ID: Q, BATCH_ID: str(last), JOB: "j"}, 3)

    commit_range(0, 9, 10)  # what a compaction of batches 0..9 leaves
    for b in range(10, 13):
        commit_range(b, b, 1)
    _expire_all_but_head(catalog)
    found = find_batch(load(), "main", Q, 4)
    assert found is not None and found.snapshot_id is None, "a batch inside a compacted range is committed"
    before = _ids(catalog)
    with pytest.raises(UndoIncompleteError, match="compaction merged batches on both sides of 5"):
        undo(load, "main", Q, after_batch=5)
    assert _ids(catalog) == before, "nothing changed"
    assert undo(load, "main", Q, after_batch=10).batches == (11, 12)
    assert undo(load, "main", Q, after_batch=9).rows_removed == 1
    assert _ids(catalog) == ["0-9"] * 10
