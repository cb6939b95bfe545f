"""Compaction: the small files a live sink writes (one or two per micro-batch) rewritten into
few, on the Spark side, as one ``replace`` snapshot.

Every batch adds a file per partition it touches: a day at 10 s batches is ~10k files per
table, and every reader (a downstream job, a backfill, validate and publish) plans and opens
each one. The sink's driver plans groups of small files per partition from the table's
metadata (no row read); executors read each group and write its rows as one file; the driver
commits the swap as one snapshot whose operation is ``replace`` (no data changed: live readers,
ours and Iceberg's, skip it).

Rewinds keep working. A compacted file keeps the range of batches it absorbed in its name
(``batch_tags``); only files of batches older than ``protectBatches`` are touched, so a rewind
to any restore point within that horizon still removes whole files, and one further back
that would have to split a compacted file refuses (``undo``), never silently.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyspark.sql import SparkSession

from spark_app.sinks.iceberg import batch_tags
from spark_app.sinks.iceberg.arrow_files import pack, unpack

log = logging.getLogger("kappa.sink.compaction")

COMPACTED = "kappa.compacted-files"


@dataclass(frozen=True)
class LiveFile:
    path: str
    size: int
    spec_id: int
    partition: tuple[Any, ...]
    tag: batch_tags.BatchTag | None


@dataclass(frozen=True)
class Group:
    """Files of one partition (and one writing query, or none) that become one file."""

    paths: tuple[str, ...]
    query: str | None
    first: int | None
    last: int | None


def plan(
    files: Iterable[LiveFile],
    query_id: str,
    current_batch: int,
    protect_batches: int,
    min_files: int,
    small_file_bytes: int,
    target_bytes: int,
) -> list[Group]:
    """Groups to rewrite. A file is a candidate when it is small and either untagged (another
    tool wrote it) or this query's, of a batch at least ``protect_batches`` old. Another query's
    files are its own sink's to compact: it may still need them whole for a rewind."""
    candidates: dict[tuple[Any, ...], list[LiveFile]] = defaultdict(list)
    for f in files:
        if f.size >= small_file_bytes:
            continue
        if f.tag is not None and (f.tag.query != query_id or f.tag.last > current_batch - protect_batches):
            continue
        candidates[(f.spec_id, f.partition, f.tag.query if f.tag else None)].append(f)
    groups = []
    for (_, _, query), fs in sorted(candidates.items(), key=lambda kv: repr(kv[0])):
        if len(fs) < min_files:
            continue
        fs.sort(key=lambda f: (f.tag.first if f.tag else -1, f.path))
        chunk: list[LiveFile] = []
        for f in fs:
            if chunk and sum(c.size for c in chunk) + f.size > target_bytes:
                groups.append(_group(chunk, query))
                chunk = []
            chunk.append(f)
        if len(chunk) > 1:
            groups.append(_group(chunk, query))
    return [g for g in groups if len(g.paths) > 1]


def _group(files: list[LiveFile], query: str | None) -> Group:
    tags = [f.tag for f in files if f.tag is not None]
    return Group(
        tuple(f.path for f in files),
        query,
        min(t.first for t in tags) if tags else None,
        max(t.last for t in tags) if tags else None,
    )


def live(table: Table, branch: str) -> dict[str, DataFile]:
    return {f.file_path: f for f in batch_tags.live_files(table, branch)}


def describe(files: dict[str, DataFile]) -> list[LiveFile]:
    return [
        LiveFile(p, f.file_size_in_bytes, f.spec_id, tuple(f.partition), batch_tags.parse(p)) for p, f in files.items()
    ]


@dataclass(frozen=True)
class RewriteSpec:
    """What a task needs (pickled to executors): the table's metadata and the files to read."""

    catalog_properties: dict[str, str]
    metadata_json: str
    groups: tuple[tuple[Group, tuple[DataFile, ...]], ...]


def rewrite_groups(spec: RewriteSpec) -> Callable[[Iterator[int]], Iterator[tuple[int, bytes]]]:
    def rewrite(indexes: Iterator[int]) -> Iterator[tuple[int, bytes]]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
        from pyiceberg.table import FileScanTask
        from pyiceberg.table.metadata import TableMetadataUtil

        metadata = TableMetadataUtil.parse_raw(spec.metadata_json)
        io = load_file_io(spec.catalog_properties, metadata.location)
        for i in indexes:
            group, files = spec.groups[i]
            rows = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue()).to_table([FileScanTask(f) for f in files])
            target = metadata
            if group.query is not None and group.first is not None:
                props = batch_tags.write_properties(metadata.properties, group.query, group.first, group.last)
                target = metadata.model_copy(update={"properties": props})
            for f in _dataframe_to_data_files(target, rows, io, write_uuid=uuid.uuid4()):
                yield i, pack(f)

    return rewrite


class _Replace(_OverwriteFiles):
    """pyiceberg (0.12) writes ``overwrite`` for any delete + add; a compaction changes no
    data, and Iceberg's ``replace`` is what tells incremental readers to skip it."""

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        summary = super()._summary(snapshot_properties or {})
        return Summary(Operation.REPLACE, **summary.additional_properties)


@dataclass(frozen=True)
class Compacted:
    files_before: int
    files_after: int
    groups: int
    snapshot_id: int | None


def compact(
    spark: SparkSession,
    load: Callable[[], Table],
    branch: str,
    catalog_properties: dict[str, str],
    query_id: str,
    current_batch: int,
    protect_batches: int,
    min_files: int,
    small_file_bytes: int,
    target_bytes: int,
) -> Compacted | None:
    """Plan, rewrite on the executors, commit once. Maintenance: a conflict with another
    writer leaves the table as it was (the rewritten files are orphans) and returns None."""
    table = load()
    files = live(table, branch)
    groups = plan(describe(files), query_id, current_batch, protect_batches, min_files, small_file_bytes, target_bytes)
    if not groups:
        return Compacted(0, 0, 0, None)
    spec = RewriteSpec(
        catalog_properties,
        table.metadata.model_dump_json(),
        tuple((g, tuple(files[p] for p in g.paths)) for g in groups),
    )
    written = spark.sparkContext.parallelize(range(len(groups)), len(groups)).mapPartitions(rewrite_groups(spec))
    new = [unpack(packed) for _, packed in written.collect()]
    old = [files[p] for g in groups for p in g.paths]
    if sum(f.record_count for f in old) != sum(f.record_count for f in new):
        log.error("%s: compaction rewrote %d files into a different row count; not committed", table.name(), len(old))
        return None
    tx = table.transaction()
    with _Replace(
        operation=Operation.OVERWRITE,
        transaction=tx,
        io=table.io,
        branch=branch,
        snapshot_properties={COMPACTED: str(len(old))},
    ) as replace:
        for f in old:
            replace.delete_data_file(f)
        for f in new:
            replace.append_data_file(f)
    try:
        committed = tx.commit_transaction()
    except (CommitFailedException, ValidationException) as exc:
        log.info("%s: compaction conflicted with another writer (%s); next round", table.name(), exc)
        return None
    head = committed.snapshot_by_name(branch)
    log.info("%s@%s: compacted %d files into %d", table.name(), branch, len(old), len(new))
    return Compacted(len(old), len(new), len(groups), head.snapshot_id if head else None)
