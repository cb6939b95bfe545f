"""The report a restore application leaves for the operator (a few hundred bytes per sink:
the batch restored, the table reset and how many files the undo removed), and where it lives.
Light on purpose, like ``reports.publish``: the operator reads it without Spark or pyiceberg."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spark_app.contract.config import JobConfig
from spark_app.contract.reports import located, read_located
from spark_app.contract.sources import OffsetRange
from spark_app.contract.storage import Location

REPORT_NAME = "restore-report.json"


class SinkRestored(BaseModel):
    """One sink query: restored into the fresh checkpoint, and its table reset."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sink: str
    batch_id: int
    query_id: str
    table: str | None = None
    """The Iceberg table reset (None: not an Iceberg sink, or resetSinks off)."""
    batches: list[int] = []
    """The query's batches the undo removed (those after batch_id it had written)."""
    files_removed: int = 0
    rows_removed: int = 0
    snapshot_id: int | None = None
    """The snapshot that removed them (None: nothing to remove, or an earlier run did)."""
    discarded: list[int] = []
    """Snapshots of later batches dropped (an abandoned timeline)."""
    undone_records: list[OffsetRange] = []
    """A Kafka sink: the records of its topic written after batch_id (the output a downstream
    job must skip; the job re-emits from each range's end)."""
    bootstrap_servers: str | None = None
    """A Kafka sink: the cluster of that topic."""


class RestoreReport(BaseModel):
    """What a restore application did: the operator copies it into the Rewind's status."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rewind: str | None
    state: Literal["Restored", "Failed"]
    sinks: list[SinkRestored]
    """The sinks done, in order (a failure stops at the sink it names)."""
    error: str | None = None
    """Failed: which sink, what, and what to do."""
    started_at: datetime
    finished_at: datetime


def report_location(cfg: JobConfig) -> tuple[Location, str]:
    return located(cfg, cfg.restore.report if cfg.restore is not None else None, REPORT_NAME)


def read_report(cfg: JobConfig) -> RestoreReport | None:
    """The report of the last finished restore run of ``cfg`` (None: none finished yet)."""
    return read_located(RestoreReport, report_location(cfg))
