"""Whether the history covers a Backfill's window, per source, before anything is read or
written (issue 44): one implementation for ``kappa plan``, ``kappa run`` and the drivers the
operator renders.

A window no source's history reaches is refused: the run would end ``Succeeded`` at 100 % with
nothing written, which a person repairing a day of output reads as "repaired". A window the
history covers in part runs, with a notice that names each source, where its history starts and
ends, and which part of the window it lacks: the output there is missing or partial, and the
publish gate's match ratio is the only other word a user would get (too late, and not at all
with a lowered ``minMatchRatio``).

A source's history is the range of its ordering column over the data files of the snapshot the
backfill reads, from Iceberg's column statistics (manifests only, no row read). Its first and
last rows are points, the window an interval: a history ending at 01:59:58 covers a window
ending at 02:00. So a gap shorter than ``tolerance`` (1 % of the window, at least a minute) is
not one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from spark_app.contract.config import Window

MIN_TOLERANCE = timedelta(minutes=1)


@dataclass(frozen=True)
class Extent:
    """Where one source's history starts and ends (None: it holds no row, or no statistics)."""

    source: str
    table: str
    first: datetime | None
    last: datetime | None
    files: int = 0
    """Data files in the snapshot read: files without statistics leave the extent unknown."""

    @property
    def unknown(self) -> bool:
        return self.files > 0 and (self.first is None or self.last is None)

    def describe(self) -> str:
        if self.first is None or self.last is None:
            return f"source {self.source} ({self.table}) holds no rows"
        return f"source {self.source} ({self.table}) holds {_t(self.first)} to {_t(self.last)}"


@dataclass(frozen=True)
class Coverage:
    refusal: str | None
    """Why the run is refused (no source's history reaches the window), or None."""
    notices: tuple[str, ...]
    """One per source whose history lacks part of the window."""


def _t(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tolerance(window: Window) -> timedelta:
    return max(MIN_TOLERANCE, (window.end - window.start) / 100)


def assess(window: Window, extents: Sequence[Extent]) -> Coverage:
    """The verdict on ``window`` for the sources' ``extents`` (pure)."""
    if not extents:
        return Coverage(None, ())
    span = f"[{_t(window.start)}, {_t(window.end)})"
    inside = [
        e
        for e in extents
        if e.unknown  # no statistics: not known to miss anything (the plan warns of the statistics)
        or (e.first is not None and e.last is not None and e.last >= window.start and e.first < window.end)
    ]
    if not inside:
        held = "; ".join(e.describe() for e in extents)
        return Coverage(
            f"spec.window {span} holds no history: {held}. Nothing would be read or written; set the window "
            "within the history, or run it once the history holds it",
            (),
        )
    slack, notices = tolerance(window), []
    for e in extents:
        if e not in inside:
            notices.append(
                f"not yet final: {e.describe()}, none of spec.window {span}: what this source contributes "
                "is missing from the output; run the backfill again once its history holds the window"
            )
            continue
        if e.first is None or e.last is None:
            continue
        gaps = []
        if e.first - window.start > slack:
            gaps.append(f"[{_t(window.start)}, {_t(e.first)})")
        if window.end - e.last > slack:
            gaps.append(f"[{_t(e.last)}, {_t(window.end)})")
        if gaps:
            notices.append(
                f"not yet final: {e.describe()}: {' and '.join(gaps)} of spec.window {span} is not in its "
                "history, so the output there is missing or partial; run the backfill again once the history "
                "holds it, or narrow the window"
            )
    return Coverage(None, tuple(notices))
