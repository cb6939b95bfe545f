"""Choosing a bootstrap's archive snapshots and switch offsets, once, before its first query
(the edge: it reads the archives' files and asks the brokers for their partitions).

Where each archive ends is read from the archive itself, not assumed: the newest offset of
every (topic, partition) in the pinned snapshot, aggregated by Spark over the snapshot's
files (two columns of ``__metadata__``, vectorized in the JVM, one row per partition back to
the driver). That is a scan of the archive's offset column, paid once per bootstrap.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from pyiceberg.table import Table
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_app.bootstrap.seam import Offsets, describe, switch_offsets
from spark_app.catalogs import load_table
from spark_app.contract.checkpoints.kafka_offsets import partitions_of, topics_matching
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.bootstrap import BootstrapRecord
from spark_app.contract.sources import IcebergBackfillSource, KafkaSource
from spark_app.sources.iceberg.frame import read_data_files

log = logging.getLogger("kappa.bootstrap")

METADATA = "__metadata__"
NEEDED = ("partition", "offset")


def decide(spark: SparkSession, cfg: JobConfig) -> BootstrapRecord:
    """The record a new bootstrapped job starts with: each archive's snapshot pinned, where
    each topic takes over, and how far each archive goes in event time."""
    boot = cfg.bootstrap
    assert boot is not None
    archives: dict[str, IcebergBackfillSource] = {}
    offsets: dict[str, Offsets] = {}
    ends: dict[str, datetime | None] = {}
    live_from: dict[str, int] = {}
    for name, archive in boot.archives.items():
        src = cfg.sources[name]
        table = load_table(archive.catalog, cfg.catalogs[archive.catalog].properties(), archive.table)
        if not isinstance(src, KafkaSource):  # a green's icebergLive source: the table is its own archive
            from spark_app.bluegreen.live_start import archive_snapshot

            live_from[name] = archive_snapshot(cfg, name, table)
            archives[name] = archive.model_copy(update={"snapshot_id": live_from[name]})
            log.info("bootstrap of %s: %s to snapshot %s, then its appends", name, archive.table, live_from[name])
            continue
        sid = archive.snapshot_id or (table.current_snapshot().snapshot_id if table.current_snapshot() else None)
        ordering = archive.ordering_column or cfg.alignment.ordering_column
        has_topic = _check_layout(name, archive, table, src)
        newest, end = (
            archived_ends(spark, cfg, archive, table, sid, ordering, src.topic, has_topic) if sid else ({}, None)
        )
        refusal = from_past_the_end(name, archive.table, boot.start, end)
        if refusal is not None:
            raise ConfigError(refusal)
        pattern = str(src.topic_pattern)
        if src.topic is not None:
            topics = {str(src.topic)}
        else:
            topics = topics_matching(src.bootstrap_servers, pattern, src.security)
        found = partitions_of(src.bootstrap_servers, topics, src.security)
        try:
            offsets[name] = switch_offsets(newest, found)
        except ValueError as exc:
            raise ConfigError(f"bootstrap.archives.{name}: {exc}") from None
        archives[name] = archive.model_copy(update={"snapshot_id": sid})
        ends[name] = end
        log.info(
            "bootstrap of %s: archive %s (snapshot %s) from %s to %s, then Kafka at %s",
            name, archive.table, sid, boot.start.isoformat(), end, describe(offsets[name]),
        )  # fmt: skip
    return BootstrapRecord(
        start=boot.start,
        archives=archives,
        offsets=offsets,
        decided_at=datetime.now(UTC),
        archive_end=ends,
        live_from=live_from,
    )


def from_past_the_end(name: str, table: str, start: datetime, end: datetime | None) -> str | None:
    """The refusal of a ``bootstrap.from`` after the newest event the archive holds (None: it
    is not). Such a job would read nothing of the archive, then take the topic over at the
    archive's end offsets, whose records are older than ``from``: the output would hold the
    records before ``from`` it was told to skip and miss the ones after it the archive lacks."""
    if end is None or start <= end:
        return None
    return (
        f"bootstrap.from {start.isoformat()} is after the end of the archive of source {name} ({table}), whose "
        f"newest event is {end.isoformat()}: nothing of the archive would be read, and the topic would take over "
        "where the archive ends, with records older than bootstrap.from. Set bootstrap.from to at most "
        f"{end.isoformat()}, or leave bootstrap out and start the job on the topic alone (startingOffsets)"
    )


def _check_layout(name: str, archive: IcebergBackfillSource, table: Table, src: KafkaSource) -> bool:
    """Whether the archive names each record's topic; refused when it cannot say where a
    partition's records end (no partition or offset), or which topic they are of."""
    where = f"bootstrap.archives.{name} ({archive.table})"
    try:
        meta = table.schema().find_field(METADATA)
    except ValueError:
        meta = None
    fields = {f.name for f in getattr(meta.field_type, "fields", ())} if meta is not None else set()
    missing = [f"{METADATA}.{f}" for f in NEEDED if f not in fields]
    if missing:
        raise ConfigError(
            f"{where} has no {', '.join(missing)}: a bootstrap finds where the archive ends in the topic from each "
            f"record's partition and offset; archive the topic with them (examples/kafka-archive-streamingjob.yaml "
            f"declares {METADATA} STRUCT<ingestion_ts, topic, partition, offset>)"
        )
    if src.topic is None and "topic" not in fields:
        raise ConfigError(
            f"{where} has no {METADATA}.topic, and sources.{name} reads a topicPattern: the archive must say which "
            "topic each record came from"
        )
    return "topic" in fields


def archived_ends(
    spark: SparkSession,
    cfg: JobConfig,
    archive: IcebergBackfillSource,
    table: Table,
    snapshot_id: int,
    ordering: str,
    topic: str | None,
    has_topic: bool,
) -> tuple[dict[tuple[str, int], int], datetime | None]:
    """(topic, partition) -> the newest archived offset, and the newest event time, in the
    snapshot (Spark's aggregate over the snapshot's data files)."""
    paths = [task.file.file_path for task in table.scan(snapshot_id=snapshot_id).plan_files()]
    if not paths:
        return {}, None
    files = read_data_files(spark, table, cfg.catalogs[archive.catalog].properties(), paths)
    topic_col = F.col(f"{METADATA}.topic") if has_topic else F.lit(topic)
    rows = (
        files.select(
            topic_col.alias("topic"),
            F.col(f"{METADATA}.partition").alias("partition"),
            F.col(f"{METADATA}.offset").alias("offset"),
            F.col(ordering).alias("ordering"),
        )
        .groupBy("topic", "partition")
        .agg(F.max("offset").alias("newest"), F.unix_micros(F.max("ordering")).alias("end"))
        .collect()
    )
    newest = {(str(r["topic"]), int(r["partition"])): int(r["newest"]) for r in rows if r["newest"] is not None}
    ends = [int(r["end"]) for r in rows if r["end"] is not None]  # µs: no session or host time zone on the way
    return newest, datetime.fromtimestamp(max(ends) / 1e6, tz=UTC) if ends else None
