"""The bootstrap's record, next to the job's checkpoint (``_kappa/bootstrap.json``).

Written before the first query starts (intent first: the archive snapshots and the switch
offsets are chosen once, and a restarted driver reads them back instead of choosing again
against an archive that has grown since), and again when the archive leg has ended (the
switch). The operator reads it for ``status.bootstrap`` and the phase ``Bootstrapping``; it is
a few hundred bytes and holds no row.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from spark_app.contract.config import JobConfig
from spark_app.contract.reports import located
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.contract.storage import Location

RECORD = "bootstrap.json"

EARLIEST = -2
"""Spark's Kafka source's code for "the earliest offset" in a startingOffsets JSON."""

Offsets = dict[str, dict[int, int]]
"""topic -> partition -> the first offset read from Kafka."""


class BootstrapRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    start: datetime
    """``bootstrap.from`` as the job started with it (a later edit of the spec does not move it)."""
    archives: dict[str, IcebergBackfillSource]
    """Each source's archive, its snapshot pinned: the one the switch offsets were read from."""
    offsets: dict[str, Offsets]
    """Each source's switch offsets: where its topic takes over from its archive."""
    decided_at: datetime
    archive_end: dict[str, datetime | None] = {}
    """The newest event time each archive holds from ``start`` on (None: nothing)."""
    live_from: dict[str, int] = {}
    """Each ``icebergLive`` source's archive snapshot (a blue/green green's, pinned where blue
    had read the table whole): its appends after it are read live."""
    switched_at: datetime | None = None
    """When the archive leg ended and the topics took over (None: still reading the archives)."""

    @property
    def switched(self) -> bool:
        return self.switched_at is not None


def record_location(cfg: JobConfig) -> tuple[Location, str]:
    return located(cfg, None, RECORD)


def read_record(location: Location, name: str = RECORD) -> BootstrapRecord | None:
    if location.stat(name) is None:
        return None
    return BootstrapRecord.model_validate_json(location.read_bytes(name))


def write_record(location: Location, record: BootstrapRecord, name: str = RECORD) -> None:
    location.write_bytes(name, record.model_dump_json(indent=2, by_alias=True).encode())
