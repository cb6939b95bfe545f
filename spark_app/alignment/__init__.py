"""Where sources learn the global watermark of their alignment group.

Spark runs every streaming Python source in its own process on the driver, so even the
sources of one query need a shared place. ``WatermarkProvider`` is that place's interface:
a member reports its watermark (None once finished) and gets the group's view back. The
local implementation (``LocalWatermarkProvider``) is a state file with a lock and atomic
replace: zero set-up on one driver. The coordinator service implements the same interface
over HTTP for groups that span queries and jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from spark_app.planning.admission import HELD, drift_bound


@dataclass(frozen=True, slots=True)
class GroupView:
    global_watermark: int | None
    """Min over unfinished members; ``HELD`` while a declared member has not reported;
    None when every member finished."""
    missing: tuple[str, ...] = ()
    holders: tuple[str, ...] = field(default=(), compare=False)
    """Members that set the global watermark (the missing ones while held); advisory, so two
    views with the same watermark and missing members are equal whoever holds them."""

    def bound(self, drift_us: int) -> int | None:
        return drift_bound(self.global_watermark, drift_us)


class ReadCount(NamedTuple):
    """What a member has admitted so far: bytes and files of its window's splits up to its
    position (a function of the offset, so a restart from the checkpoint continues it)."""

    bytes: int
    files: int


class WatermarkProvider(Protocol):
    def report(
        self,
        member: str,
        watermark: int | None,
        throttled: bool = False,
        reset: bool = False,
        read: ReadCount | None = None,
    ) -> GroupView:
        """Record ``member``'s watermark (None: finished) and return the group's view.

        ``throttled``: the member's last admission was cut by the bound (metrics);
        ``reset``: accept a lower watermark than before (a restart from a checkpoint);
        ``read``: the member's cumulative admitted bytes and files (metrics, the read rate)."""
        ...


def global_view(members: tuple[str, ...], reported: dict[str, int | None]) -> GroupView:
    """The alignment rule in one place: min over unfinished members, held by missing ones."""
    missing = tuple(m for m in members if m not in reported)
    if missing:
        return GroupView(HELD, missing, missing)
    live = {m: w for m in members if (w := reported[m]) is not None}
    if not live:
        return GroupView(None)
    low = min(live.values())
    return GroupView(low, (), tuple(m for m, w in live.items() if w == low))
