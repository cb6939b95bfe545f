"""Spark-format checkpoints and sink tables written by tests: a checkpoint's offsets, commits,
metadata and state files as Spark lays them out, and an Iceberg table whose snapshots carry
each batch's query and batch id as the exactly-once sink writes them."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog

from spark_app.contract.offsets import LiveOffset
from spark_app.sinks.iceberg.commit import BATCH_ID, JOB, QUERY_ID, commit_batch, data_files

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


def write_checkpoint(root: Path, query_id: str, batches: int, minute: int) -> None:
    """A Spark checkpoint of ``batches`` committed batches: batch i committed at T0 + 10 i + minute."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    for i in range(batches):
        when = T0 + timedelta(minutes=10 * i + minute)
        offset = LiveOffset(snapshot_id=1000 + i, position=0, complete=True).to_dict()
        meta = {"batchWatermarkMs": int((when - timedelta(minutes=30)).timestamp() * 1000), "batchTimestampMs": 0}
        (root / "offsets" / str(i)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offset)}")
        (root / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        state = root / "state" / "0" / "0"
        state.mkdir(parents=True, exist_ok=True)
        (state / f"{i + 1}.delta").write_bytes(f"state after batch {i}".encode())
        ts = when.timestamp()
        os.utime(root / "commits" / str(i), (ts, ts))


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def sink_batches(catalog: SqlCatalog, table: str, query_id: str, batches: int) -> None:
    t = catalog.create_table(table, pa.schema([("id", pa.string())]))
    mapping = t.schema().name_mapping.model_dump_json()  # the files below are plain Parquet
    t = t.transaction().set_properties({"schema.name-mapping.default": mapping}).commit_transaction()
    for b in range(batches):
        path = f"{t.location()}/data/{query_id}-{b}.parquet"
        with t.io.new_output(path).create() as f:
            pq.write_table(pa.table({"id": [f"{query_id}-{b}"]}), f)
        files = data_files(t, [path])
        commit_batch(
            lambda: catalog.load_table(table), "main", files, {QUERY_ID: query_id, BATCH_ID: str(b), JOB: "j"}, 3
        )


def live_ids(catalog: SqlCatalog, table: str) -> list[str]:
    return sorted(catalog.load_table(table).scan().to_arrow()["id"].to_pylist())
