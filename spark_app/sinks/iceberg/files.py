"""Executor side of the sink: a micro-batch's rows become Parquet data files in the table's
data location, one partition per file, and only their paths travel back to the driver.

Runs inside ``mapInArrow``: no row passes through the driver. A failed or speculative task
attempt leaves files nobody commits (orphans, removed by Iceberg's orphan-file cleanup)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

FILES_SCHEMA = "path string, rows long, bytes long"


@dataclass(frozen=True)
class FileWriteSpec:
    """What a task needs to write files the driver can commit (pickled to executors)."""

    catalog_properties: dict[str, str]
    metadata_json: str
    """The table's metadata when the batch started: schema, partition spec, location."""
    target_bytes: int


def write_data_files(spec: FileWriteSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import _dataframe_to_data_files
        from pyiceberg.table.metadata import TableMetadataUtil

        from spark_app.sinks.iceberg.table import utc_schema

        metadata = TableMetadataUtil.parse_raw(spec.metadata_json)
        io = load_file_io(spec.catalog_properties, metadata.location)
        written: list[tuple[str, int, int]] = []
        pending: list[pa.RecordBatch] = []
        size = 0

        def flush() -> None:
            table = pa.Table.from_batches(pending)
            table = table.cast(utc_schema(table.schema))
            for f in _dataframe_to_data_files(metadata, table, io, write_uuid=uuid.uuid4()):
                written.append((f.file_path, f.record_count, f.file_size_in_bytes))
            pending.clear()

        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            size += batch.nbytes
            if size >= spec.target_bytes:
                flush()
                size = 0
        if pending:
            flush()
        if written:
            paths, rows, sizes = zip(*written, strict=True)
            yield pa.RecordBatch.from_pydict({"path": list(paths), "rows": list(rows), "bytes": list(sizes)})

    return write
