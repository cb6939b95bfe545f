"""The two legs of a bootstrapped query, as the sources' DataFrames.

Both legs build the same plan (Spark maps a checkpoint's offsets to sources by their place in
the query), each source the union of its archive and its topic, in that order:

* ``archive``: the archive read by the aligned backfill planner (``BackfillReader``) over
  ``[from, ∞)`` of its pinned snapshot, the topic behind a closed gate at the switch offsets.
* ``live``: the archive spent (``SpentArchive``: its offsets stay where the first leg left
  them, nothing is planned and the snapshot may have expired since), the gate open.

An ``icebergLive`` source (only a blue/green upgrade's green bootstraps one) is the same with
the table in both places: its archive is the table pinned at the snapshot blue had read whole,
and its "topic" the table's appends after that snapshot (``TrailedLiveReader``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession

from spark_app.bootstrap.seam import starting_offsets
from spark_app.contract.blue_green import live_trail_rel, trail_file
from spark_app.contract.config import JobConfig, TriggerConfig, Window
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.bootstrap import BootstrapRecord
from spark_app.contract.sources import KafkaSource
from spark_app.contract.storage import open_location
from spark_app.sources.iceberg.backfill_reader import BackfillReader
from spark_app.sources.iceberg.spec import SourceSpec

BootstrapLeg = Literal["archive", "live"]

NO_END = datetime(9999, 1, 1, tzinfo=UTC)
"""The archive leg's window has no end: the archive is read to its pinned snapshot's newest row."""


def archive_config(cfg: JobConfig, record: BootstrapRecord) -> JobConfig:
    """The archives as a backfill of ``[from, ∞)`` reads them: the job's alignment (group,
    maxDrift, rounds), its checkpoint and sinks, the archive snapshots of the record. Used for
    the archive leg's sources, its members and its lateness guard; never rendered or run as
    a backfill (no window restriction, no branch: the sinks write as the live job does)."""
    return cfg.model_copy(
        update={
            "mode": "backfill",
            "sources": dict(record.archives),
            "window": Window(start=record.start, end=NO_END),
            "bootstrap": None,
            "trigger": TriggerConfig(kind="availableNow"),
        }
    )


class SpentArchive(BackfillReader):
    """An archive the first leg read to its end: its offset never moves again and it plans
    nothing, so the second leg (and every restart after) needs neither the archive's snapshot
    nor its manifests."""

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return start

    def tasks(self, start: dict, end: dict) -> list[list[dict[str, Any]]]:
        if start != end:
            raise KappaError(
                f"source {self.spec.name}: a batch reads the archive again after the switch ({start} -> {end}); "
                "the bootstrap record says the archive leg ended: start the job from a new checkpoint"
            )
        return []


def hybrid_frames(
    spark: SparkSession,
    cfg: JobConfig,
    sink: str,
    record: BootstrapRecord,
    leg: BootstrapLeg,
    spec_of: Callable[[JobConfig, str, str], SourceSpec],
) -> dict[str, DataFrame]:
    """Each source of ``sink``'s query: its archive, then its topic from the switch offsets."""
    from spark_app.sources.iceberg.frame import iceberg_frame
    from spark_app.sources.iceberg.trailed import TrailedLiveReader
    from spark_app.sources.kafka import kafka_frame

    archives = archive_config(cfg, record)
    gate: Literal["closed", "open"] = "closed" if leg == "archive" else "open"
    frames = {}
    for name, src in cfg.sources.items():
        spec = spec_of(archives, sink, name)
        planner = BackfillReader(spec) if leg == "archive" else SpentArchive(spec)
        history = iceberg_frame(spark, spec, planner)
        if not isinstance(src, KafkaSource):
            trail = (open_location(cfg.checkpoint.location), live_trail_rel(sink)) if cfg.green is not None else None
            live_spec = spec_of(cfg, sink, name)
            appends = TrailedLiveReader(live_spec, record.live_from[name], gate, trail)
            frames[name] = history.unionByName(iceberg_frame(spark, live_spec, appends).select(*history.columns))
            continue
        topic = kafka_frame(
            spark, cfg, name, src, gate=gate,
            starting_offsets=starting_offsets(record.offsets[name]),
            trail=trail_file(cfg.checkpoint.location, sink) if cfg.green is not None else None,
        )  # fmt: skip
        frames[name] = history.unionByName(topic.select(*history.columns))  # a projection applies to both
    return frames
