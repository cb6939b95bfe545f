"""The report a publish application leaves for the operator (a few KB: counts, the match
ratio, a sample of differing keys, the snapshot it committed), and where it lives. Light on
purpose: the operator reads it without importing Spark, pyarrow or pyiceberg."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spark_app.contract.config import JobConfig
from spark_app.contract.reports import located, read_located
from spark_app.contract.storage import Location

REPORT_NAME = "publish-report.json"


class TableReport(BaseModel):
    """One sink table's validation and publish."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    table: str
    branch: str
    match_ratio: float
    main_rows: int
    branch_rows: int
    matched: int
    rows_removed: int = 0
    rows_added: int = 0
    snapshot_id: int | None = None
    """The one snapshot that replaced main's window (None: nothing changed in this run)."""
    earlier: bool = False
    """The snapshot is an earlier run's: this run found main already equal to the branch."""
    differing_keys: list[str] = []
    """Up to 10 keys (JSON) not matched on one side or the other."""
    not_final: list[str] = []
    new_columns: list[str] = []
    """A blue/green comparison: the columns the new version added (not compared)."""


class PublishReport(BaseModel):
    """What a publish application did: the operator copies it into the Backfill's status."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backfill: str | None
    state: Literal["Published", "Refused", "Failed"]
    """Refused: a table's validation failed (main unchanged for it, later tables untouched)."""
    tables: list[TableReport]
    error: str | None = None
    """Refused or Failed: what and where (the table, the reason, the fix)."""
    started_at: datetime
    finished_at: datetime


def report_location(cfg: JobConfig) -> tuple[Location, str]:
    """Where the report of ``cfg``'s publish goes: next to its checkpoint unless configured."""
    return located(cfg, cfg.publish.report if cfg.publish is not None else None, REPORT_NAME)


def read_report(cfg: JobConfig) -> PublishReport | None:
    """The report of the last finished publish run of ``cfg`` (None: none finished yet)."""
    return read_located(PublishReport, report_location(cfg))
