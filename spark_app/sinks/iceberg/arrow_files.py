"""Executor side of the sink: a micro-batch's rows become Parquet data files in the table's
data location, one partition per file, and only their descriptions (pyiceberg's ``DataFile``,
pickled: path, partition, statistics) travel back to the driver. The partition must travel:
a ``bucket`` partition cannot be read back from a file's column bounds.

Runs inside ``mapInArrow``, in a Python worker: the sink uses it only for tables Spark's own
writer cannot write (``spark_files``). No row passes through the driver. A failed or speculative task
attempt leaves files nobody commits (orphans, removed by Iceberg's orphan-file cleanup)."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyiceberg.manifest import DataFile

FILES_SCHEMA = "data_file binary"


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
        written: list[bytes] = []
        pending: list[pa.RecordBatch] = []
        size = 0

        def flush() -> None:
            table = pa.Table.from_batches(pending)
            table = table.cast(utc_schema(table.schema))
            for f in _dataframe_to_data_files(metadata, table, io, write_uuid=uuid.uuid4()):
                written.append(pack(f))
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
            yield pa.RecordBatch.from_pydict({"data_file": written})

    return write


def pack(f: DataFile) -> bytes:
    """A file a task wrote, as the driver commits it. Its path alone is not enough: pyiceberg
    reads a file's partition back from its column bounds, which a ``bucket`` (non-linear)
    partition cannot be read from."""
    return pickle.dumps(f)


def unpack(packed: bytes) -> DataFile:
    return cast(DataFile, pickle.loads(packed))  # our own tasks' output, never outside input


def data_files(rows: list[Any]) -> list[DataFile]:
    """The driver's side of ``write_data_files``: the files the tasks wrote."""
    return [unpack(r.data_file) for r in rows]
