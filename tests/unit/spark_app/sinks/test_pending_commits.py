"""Issue 29, item 3: the Iceberg commit off the batch's critical path. The record a batch leaves
before it ends, and the committer that commits the records in order while Spark runs the next
batch; a failed commit fails the query at its next batch and keeps the record. The crash
windows are tested with real Spark and a real kill in tests/spark/test_iceberg_sink.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from spark_app.contract.storage import open_location
from spark_app.sinks.iceberg.pending import Committer, Pending, PendingLog, pending_location


def data_file(name: str, rows: int) -> DataFile:
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"s3://lake/t/data/{name}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=100 * rows,
    )


def entry(batch: int) -> Pending:
    props = {"kappa.query-id": "q", "kappa.batch-id": str(batch)}
    return Pending(batch, [data_file(f"b{batch}", batch + 1)], props, {"schema.name-mapping.default": "[]"})


def test_a_record_round_trips_and_lives_beside_the_checkpoint_not_in_it(tmp_path: Path) -> None:
    location = pending_location(str(tmp_path / "ckpt" / "out"), "out")
    assert location.uri.endswith("ckpt/_kappa/pending-commits/out"), "a snapshot of ckpt/out never carries it"
    log = PendingLog(location)
    for b in (10, 2, 7):
        log.put(entry(b))
    got = log.entries()
    assert [e.batch_id for e in got] == [2, 7, 10], "oldest batch first, whatever the names sort to"
    assert got[0].files[0].file_path == "s3://lake/t/data/b2.parquet" and got[0].files[0].record_count == 3
    assert got[0].properties == entry(2).properties and got[0].table_properties == entry(2).table_properties
    log.done(7)
    assert [e.batch_id for e in PendingLog(open_location(location.uri)).entries()] == [2, 10]


def test_the_committer_commits_in_order_off_the_callers_thread() -> None:
    seen: list[tuple[int, str]] = []
    gate = threading.Event()

    def commit(e: Pending) -> None:
        gate.wait(5)
        seen.append((e.batch_id, threading.current_thread().name))

    committer = Committer("out", commit)
    for b in range(5):
        committer.submit(entry(b))
    assert committer.queued(3) and seen == [], "submitted, not committed: the batch returned at once"
    gate.set()
    committer.wait()
    committer.close()
    assert [b for b, _ in seen] == [0, 1, 2, 3, 4]
    assert {t for _, t in seen} == {"kappa-commit-out"} and not committer.queued(3)


def test_a_failed_commit_fails_the_next_batch_and_commits_nothing_after_it() -> None:
    seen: list[int] = []

    def commit(e: Pending) -> None:
        if e.batch_id == 1:
            raise RuntimeError("catalog down")
        seen.append(e.batch_id)

    committer = Committer("out", commit)
    for b in range(3):
        committer.submit(entry(b))
    with pytest.raises(RuntimeError, match="catalog down"):
        committer.wait()
    with pytest.raises(RuntimeError, match="catalog down"):
        committer.raise_failure()
    committer.close()
    assert seen == [0], "batch 2 waits for the next run (its record stays), never committed before 1"
