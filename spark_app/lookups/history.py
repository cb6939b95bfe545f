"""A dimension's versions, each with the interval it was valid in, as a Spark DataFrame.

Two places the history can come from:

- ``snapshot_versions``: an ordinary Iceberg table, changed in place (overwrite, delete,
  append). Its snapshot history is the history: a row is valid while the file holding it is in
  the table (``intervals.file_intervals``), or, with an ``effective_column``, from the time that
  column says to the next version of the same key.
- ``validity_versions``: a validity-interval table (slowly changing dimension, type 2), whose
  rows carry their own ``valid_from``/``valid_to``.

Both are built once, when the pipeline is built (once per query): the driver reads Iceberg
metadata only (snapshots and manifests: file paths, never rows), and Spark's Parquet reader
reads the files in the JVM. The result is persisted, so micro-batches reuse it instead of
re-reading the history. It reflects the table as it was when the query started; see
docs/lookups.md for what that means for a live job.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as st

from spark_app.catalogs import load_table
from spark_app.contract.errors import ConfigError
from spark_app.lookups.context import catalog_properties
from spark_app.lookups.intervals import FileInterval, SnapshotFiles, file_intervals, history_start_ms
from spark_app.sources.iceberg.frame import SLICE_PREFIX, read_data_files, read_schema

log = logging.getLogger("kappa.lookups")

VALID_FROM = "valid_from"
VALID_TO = "valid_to"
_FILE = "_kappa_file"


@dataclass(frozen=True)
class Versions:
    """A dimension's versions: its columns plus ``valid_from`` (inclusive) and ``valid_to``
    (exclusive; null: still valid). ``history_start``: before it nothing is known (the oldest
    kept snapshot; None for a validity table, whose rows say it themselves)."""

    frame: DataFrame
    key: tuple[str, ...]
    history_start: datetime | None = None

    @property
    def columns(self) -> list[str]:
        """The dimension's own columns (key included), without the validity interval."""
        return [c for c in self.frame.columns if c not in (VALID_FROM, VALID_TO)]


# --- metadata (driver) ---------------------------------------------------------------------


def ancestry(table: Table, branch: str = "main") -> list[Snapshot]:
    """The branch's snapshots, oldest first (what a reader of the branch saw, in order)."""
    head = table.snapshot_by_name(branch)
    if head is None:
        return []
    return list(reversed(list(ancestors_of(head, table.metadata))))


def snapshot_files(table: Table, snapshots: Sequence[Snapshot]) -> list[SnapshotFiles]:
    """Each snapshot's data files, from its manifests. A manifest is shared by many snapshots
    and read once. Delete files (merge-on-read) are refused: which rows they remove is only
    known by reading them, and the interval of a row would no longer be its file's."""
    io = table.io
    entries: dict[str, frozenset[str]] = {}
    out = []
    for snap in snapshots:
        files: set[str] = set()
        for manifest in snap.manifests(io):
            files |= _manifest_files(manifest, io, entries, table, snap)
        out.append(SnapshotFiles(snap.snapshot_id, snap.timestamp_ms, frozenset(files)))
    return out


def _manifest_files(
    manifest: ManifestFile, io: object, cache: dict[str, frozenset[str]], table: Table, snap: Snapshot
) -> frozenset[str]:
    if manifest.content != ManifestContent.DATA:
        raise ConfigError(
            f"table {'.'.join(table.name())}: snapshot {snap.snapshot_id} has delete files (merge-on-read); a "
            "lookup reads the history file by file: compact the table, or write it copy-on-write"
        )
    if manifest.manifest_path not in cache:
        cache[manifest.manifest_path] = frozenset(
            e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True)
        )
    return cache[manifest.manifest_path]


# --- reading (Spark) -----------------------------------------------------------------------


def _norm(path: F.Column) -> F.Column:
    """A file's path without its scheme and leading slashes: Iceberg writes ``file:///x``, Spark
    reports ``file:/x``; ``s3://b/k`` is read as ``s3a://b/k``."""
    return F.regexp_replace(path, r"^[A-Za-z][A-Za-z0-9+.-]*:/*", "")


_URI_QUOTED = {c: f"%{ord(c):02X}" for c in '%" <>\\^`{|}'} | {chr(c): f"%{c:02X}" for c in range(32)}


def normalized_path(path: str) -> str:
    """An Iceberg file path as ``_norm`` makes Spark's: without its scheme and leading slashes,
    and quoted as Hadoop's ``Path.toUri`` quotes (space, ``%`` and the other characters a URI
    may not hold; non-ASCII stays). Pure."""
    head, sep, rest = path.partition(":")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", head):
        path = rest
    return "".join(_URI_QUOTED.get(c, c) for c in path.lstrip("/"))


def _read_files(
    spark: SparkSession, table: Table, props: Mapping[str, str], paths: Sequence[str], columns: Sequence[str]
) -> DataFrame:
    """``columns`` of the files at ``paths``, read by Spark, with each row's file (normalized).
    Columns are matched by name (Spark matches Parquet field ids only under a session-wide
    setting): a column renamed during the history reads as null in the files before it."""
    schema = read_schema(table.schema(), list(columns), by_id=False)
    schema = st.StructType([f for f in schema.fields if not f.name.startswith(SLICE_PREFIX)])
    return read_data_files(spark, table, props, paths, schema).withColumn(_FILE, _norm(F.col("_metadata.file_path")))


def _columns(table: Table, wanted: Sequence[str] | None, required: Sequence[str]) -> list[str]:
    names = [f.name for f in table.schema().fields]
    chosen = list(wanted) if wanted is not None else names
    missing = [c for c in [*chosen, *required] if c not in names]
    if missing:
        raise ConfigError(f"table {'.'.join(table.name())} has no column(s) {missing}; it has {names}")
    return list(dict.fromkeys([*required, *chosen]))


def _empty(spark: SparkSession, table: Table, columns: Sequence[str]) -> DataFrame:
    schema = read_schema(table.schema(), list(columns), by_id=False)
    fields = [f for f in schema.fields if not f.name.startswith(SLICE_PREFIX)]
    fields += [st.StructField(VALID_FROM, st.TimestampType()), st.StructField(VALID_TO, st.TimestampType())]
    return spark.createDataFrame([], st.StructType(fields))


def snapshot_versions(
    spark: SparkSession,
    table: str,
    key: str | Sequence[str],
    *,
    catalog: str = "default",
    columns: Sequence[str] | None = None,
    effective_column: str | None = None,
    branch: str = "main",
    catalog_props: Mapping[str, str] | None = None,
) -> Versions:
    """The versions of ``table`` over its snapshot history (the branch's ancestry).

    Without ``effective_column`` a row is valid from the commit of the snapshot that added its
    file to the commit of the one that removed it. With it, a version of a key is valid from its
    ``effective_column`` to the next version's (the last one until the key's file left the
    table without a successor, or open); a version corrected later (same key and effective
    time, committed again) is taken as last committed. Files are read once each, whatever the
    number of snapshots they stayed in."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    props = catalog_properties(catalog, catalog_props)
    tbl = load_table(catalog, props, table)
    cols = _columns(tbl, columns, [*keys, *([effective_column] if effective_column else [])])
    history = snapshot_files(tbl, ancestry(tbl, branch))
    intervals = file_intervals(history)
    start_ms = history_start_ms(history)
    start = None if start_ms is None else datetime.fromtimestamp(start_ms / 1000, tz=UTC)
    log.info(
        "lookup %s: %d snapshot(s) since %s, %d file interval(s) over %d file(s)",
        table,
        len(history),
        start,
        len(intervals),
        len({i.path for i in intervals}),
    )
    if not intervals:
        return Versions(_empty(spark, tbl, cols), keys, start)
    rows = _read_files(spark, tbl, props, sorted({i.path for i in intervals}), cols)
    known = F.broadcast(_interval_frame(spark, intervals).withColumn("_kappa_known", F.lit(True)))
    unmatched = F.raise_error(
        F.concat(F.lit(f"lookup {table}: Spark read a file whose path matches none of the history's: "), F.col(_FILE))
    )
    joined = (
        rows.join(known, _FILE, "left")  # a path the two sides spell differently fails, never loses rows
        .withColumn(VALID_FROM, F.when(F.col("_kappa_known").isNull(), unmatched).otherwise(F.col(VALID_FROM)))
        .drop(_FILE, "_kappa_known")
    )
    if effective_column is None:
        frame = joined.select(*cols, VALID_FROM, VALID_TO)
    else:
        frame = _effective(joined, keys, effective_column, cols)
    return Versions(_persisted(frame), keys, start)


def _interval_frame(spark: SparkSession, intervals: Sequence[FileInterval]) -> DataFrame:
    """File intervals as a small frame (metadata: one row per file interval)."""
    schema = st.StructType(
        [
            st.StructField(_FILE, st.StringType(), False),
            st.StructField("_from_ms", st.LongType(), False),
            st.StructField("_to_ms", st.LongType(), True),
        ]
    )
    data = [(normalized_path(i.path), i.valid_from_ms, i.valid_to_ms) for i in intervals]
    return spark.createDataFrame(data, schema).select(
        _FILE,
        F.timestamp_millis("_from_ms").alias(VALID_FROM),
        F.timestamp_millis("_to_ms").alias(VALID_TO),
    )


def _effective(joined: DataFrame, keys: Sequence[str], effective: str, cols: Sequence[str]) -> DataFrame:
    """Versions by effective time: one per (key, effective time), the last committed copy; valid
    to the key's next effective time, else to when its last file left the table (or open)."""
    version = [*keys, effective]
    newest = Window.partitionBy(*version).orderBy(F.col(VALID_FROM).desc())
    whole = Window.partitionBy(*version)
    per_version = (
        joined.withColumn("_n", F.row_number().over(newest))
        .withColumn("_open", F.max(F.col(VALID_TO).isNull().cast("int")).over(whole))
        .withColumn("_gone", F.max(VALID_TO).over(whole))
        .where("_n = 1")
    )
    by_key = Window.partitionBy(*keys).orderBy(effective)
    return per_version.select(
        *cols,
        F.col(effective).alias(VALID_FROM),
        F.coalesce(
            F.lead(effective).over(by_key),
            F.when(F.col("_open") == 1, F.lit(None).cast("timestamp")).otherwise(F.col("_gone")),
        ).alias(VALID_TO),
    )


def validity_versions(
    spark: SparkSession,
    table: str,
    key: str | Sequence[str],
    *,
    valid_from: str = VALID_FROM,
    valid_to: str = VALID_TO,
    catalog: str = "default",
    columns: Sequence[str] | None = None,
    branch: str = "main",
    catalog_props: Mapping[str, str] | None = None,
) -> Versions:
    """The versions of a validity-interval table (SCD type 2), as its branch holds it now: each
    row is valid from ``valid_from`` to ``valid_to`` (null: open). Its current files only: the
    table itself is the history."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    props = catalog_properties(catalog, catalog_props)
    tbl = load_table(catalog, props, table)
    cols = _columns(tbl, columns, [*keys, valid_from, valid_to])
    head = tbl.snapshot_by_name(branch)
    if head is None:
        return Versions(_empty(spark, tbl, [c for c in cols if c not in (valid_from, valid_to)]), keys)
    (files,) = snapshot_files(tbl, [head])
    if not files.files:
        return Versions(_empty(spark, tbl, [c for c in cols if c not in (valid_from, valid_to)]), keys)
    frame = _read_files(spark, tbl, props, sorted(files.files), cols).drop(_FILE)
    return Versions(_persisted(interval_columns(frame, valid_from, valid_to)), keys)


def interval_columns(frame: DataFrame, valid_from: str, valid_to: str) -> DataFrame:
    """``frame`` with its interval columns named ``valid_from``/``valid_to`` and as timestamps."""
    others = [c for c in frame.columns if c not in (valid_from, valid_to)]
    clash = [c for c in others if c in (VALID_FROM, VALID_TO)]
    if clash:
        raise ConfigError(f"column(s) {clash} would clash with the validity interval; leave them out with columns=")
    return frame.select(
        *others,
        F.col(valid_from).cast("timestamp").alias(VALID_FROM),
        F.col(valid_to).cast("timestamp").alias(VALID_TO),
    )


def _persisted(frame: DataFrame) -> DataFrame:
    """Kept for the query's life: every micro-batch joins with it, and reading the history's
    files again per batch would cost what the history costs, every batch."""
    return frame.persist(StorageLevel.MEMORY_AND_DISK)
