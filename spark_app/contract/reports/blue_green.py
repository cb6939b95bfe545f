"""The report each step application of a blue/green upgrade leaves in green's ``_kappa/``
(``contract.blue_green.STEP_REPORTS``): what the comparison found, where the switch cut and
what it committed, what a discard removed. The operator reads it once the step's application
ended and copies it into ``status.upgrade``; a few KB, never a row."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spark_app.contract.blue_green import step_report_rel
from spark_app.contract.reports.publish import TableReport
from spark_app.contract.storage import REPORT_DIR, Location, open_location

StepState = Literal["Matched", "Refused", "Switched", "NotAtSeam", "Discarded", "Failed"]


class SwitchedTable(BaseModel):
    """What the switch did to one sink's table: blue's rows from ``B`` on removed, green's
    added, in one snapshot (None with ``earlier``: an earlier run of the step committed it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sink: str
    table: str
    rows_removed: int
    rows_added: int
    snapshot_id: int | None
    earlier: bool = False


class StepReport(BaseModel):
    """One step's outcome. ``Matched``/``Refused``: the comparison (Refused: below
    ``minMatchRatio``, ``error`` names each table, ratio and keys). ``Switched``/``NotAtSeam``:
    the switch (NotAtSeam: green did not end where blue did; nothing was written).
    ``Discarded``: green's branches removed. ``Failed``: the step raised (``error``); it may run
    again, every step being safe to repeat."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: Literal["compare", "switch", "discard"]
    state: StepState
    tables: list[TableReport] = []
    """The comparison, per table."""
    switched: list[SwitchedTable] = []
    removed: list[str] = []
    """The discard: the branches it removed (``<table>@<branch>``)."""
    window_start: datetime | None = None
    window_end: datetime | None = None
    boundary: datetime | None = None
    """The switch's event-time boundary ``B``: blue's rows before it stay, green's from it on."""
    notices: list[str] = []
    error: str | None = None
    started_at: datetime
    finished_at: datetime


SEAM_REL = f"{REPORT_DIR}/seam.json"
"""Green's driver's last look at the seam, in green's ``_kappa/``: written every look of its
Trailer, so its time says the look came after blue stopped."""


class SinkSeam(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    blue_batch: int | None
    green_batch: int | None
    at_seam: bool
    """Green's newest durable batch read exactly blue's newest durable batch's Kafka offsets."""


class SeamReport(BaseModel):
    """Where each sink query of green stands against blue's, as green's driver last looked: the
    operator switches once every sink is at the seam in a look after blue's driver was gone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    sinks: dict[str, SinkSeam]

    def all_at_seam(self) -> bool:
        return bool(self.sinks) and all(s.at_seam for s in self.sinks.values())


def read_seam(location: Location) -> SeamReport | None:
    """Green's seam report under its checkpoint ``location`` (None: green has not looked yet)."""
    if location.stat(SEAM_REL) is None:
        return None
    return SeamReport.model_validate_json(location.read_bytes(SEAM_REL))


def write_step_report(green_checkpoint: str, report: StepReport) -> None:
    open_location(green_checkpoint).write_bytes(step_report_rel(report.step), report.model_dump_json(indent=2).encode())


def clear_step_report(green_checkpoint: str, step: str) -> None:
    open_location(green_checkpoint).delete(step_report_rel(step))


def read_step_report(location: Location, step: str) -> StepReport | None:
    """The step's report under green's checkpoint ``location`` (None: the step has not ended)."""
    rel = step_report_rel(step)
    if location.stat(rel) is None:
        return None
    return StepReport.model_validate_json(location.read_bytes(rel))
