"""Where sources learn the global watermark of their alignment group.

Spark runs every streaming Python source in its own process on the driver, so even the
sources of one query need a shared place. ``WatermarkProvider`` is that place's interface:
a member reports its watermark (None once finished) and gets the group's view back. The
local implementation (``LocalWatermarkProvider``) is a state file with a lock and atomic
replace: zero set-up on one driver. The coordinator service implements the same interface
over HTTP for groups that span queries and jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from spark_app.planning.admission import HELD, drift_bound


@dataclass(frozen=True, slots=True)
class GroupView:
    global_watermark: int | None
    """Min over unfinished members; ``HELD`` while a declared member has not reported;
    None when every member finished."""
    missing: tuple[str, ...] = ()

    def bound(self, drift_us: int) -> int | None:
        return drift_bound(self.global_watermark, drift_us)


class WatermarkProvider(Protocol):
    def report(self, member: str, watermark: int | None) -> GroupView:
        """Record ``member``'s watermark (None: finished) and return the group's view."""
        ...


def global_view(members: tuple[str, ...], reported: dict[str, int | None]) -> GroupView:
    """The alignment rule in one place: min over unfinished members, held by missing ones."""
    missing = tuple(m for m in members if m not in reported)
    if missing:
        return GroupView(HELD, missing)
    live = [w for m in members if (w := reported[m]) is not None]
    return GroupView(min(live) if live else None)
