"""The coordinator's wire format: JSON bodies validated with pydantic (camelCase).

Watermarks travel as integers (microseconds since the epoch, UTC), durations as strings
("5m", "90s") or microseconds, so a curl user and the Spark source read the same thing.
Member ids and watermarks are checked by the rules of names.py, so a bad one is a 400 that
names the field before anything reaches the core.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kappa_operator.coordinator.core import Answer
from kappa_operator.coordinator.messages import MAX_COUNT
from kappa_operator.coordinator.names import MemberId, WatermarkUs
from spark_app.contract.alignment import HELD
from spark_app.contract.base import Duration

MAX_BODY_BYTES = 64 * 1024


class Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


def duration_micros(d: timedelta) -> int:
    """A duration in whole microseconds, as the coordinator's state keeps every time (``micros`` is an
    instant's, ``spark_app.sources.iceberg.spec``)."""
    return d // timedelta(microseconds=1)


class GroupBody(Wire):
    """PUT /v1/groups/{name}: declare (or re-declare) a group."""

    members: list[MemberId] = Field(default=[], max_length=100_000)
    """Source ids; each holds the group until it reports. Empty with selfRegister: members join by reporting."""
    max_drift: Duration
    """How far ahead of the global watermark a member may admit (> 0)."""
    idle_timeout: Duration | None = None
    """A member whose watermark has not advanced for this long stops holding the group (None: never)."""
    self_register: bool = False
    """Accept reports from undeclared members (local runs)."""


class ReportBody(Wire):
    """POST /v1/groups/{name}/reports: a member's progress after an admission decision."""

    member: MemberId
    watermark: WatermarkUs | None = None
    """Lower bound of the member's next split (microseconds); null with finished."""
    finished: bool = False
    reset: bool = False
    """Accept a lower watermark than before (a rewind restarts the member)."""
    throttled: bool = False
    """The member's last admission was cut by the drift bound (for metrics)."""
    read_bytes: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    """Cumulative bytes the reads of the member's admitted splits open (optional: the read rate)."""
    read_files: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    """Cumulative file opens of the member's admitted splits; sent together with readBytes."""


class AnswerBody(Wire):
    group: str
    global_watermark: int | None
    bound: int | None
    held: bool
    missing: list[str]
    idle: list[str]
    finished: bool
    holders: list[str]
    outside_watermark: int | None = None
    """Min over the members outside the reporter's query (None: none, or held): what its
    admission rounds cannot move. Absent from coordinators older than admission rounds."""

    @classmethod
    def of(cls, a: Answer) -> AnswerBody:
        """``outsideWatermark`` is set only in a reporter's answer (``model_dump(exclude_unset=True)``
        is then the wire shape)."""
        known = {} if a.held or a.outside == HELD else {"outside_watermark": a.outside}
        return cls(
            group=a.group,
            global_watermark=a.global_watermark if not a.held else None,
            bound=a.bound if not a.held else None,
            held=a.held,
            missing=list(a.missing),
            idle=list(a.idle),
            finished=a.finished,
            holders=list(a.holders),
            **known,
        )
