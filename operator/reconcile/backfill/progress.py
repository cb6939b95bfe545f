"""What a person watches of a running Backfill (pure): where its group's global watermark is in the
window, the ETA, the alignment lag and what its sources read, from the coordinator's view;
written only when it changed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import instant
from kappa_operator.reconcile.events import Event

if TYPE_CHECKING:  # a view of the coordinator's answer; the decisions here import no service
    from kappa_operator.coordinator.groups import GroupProgress


@dataclass(frozen=True)
class WindowProgress:
    """Where the group's global watermark is in the window, and when it will reach the end."""

    ratio: float
    eta: timedelta | None

    @property
    def percent(self) -> str:
        return f"{self.ratio * 100:.0f}%"


def progress(
    start: datetime,
    end: datetime,
    global_watermark: datetime | None,
    previous: tuple[datetime, float] | None,
    now: datetime,
) -> WindowProgress:
    """``previous``: (when, ratio) of the last observation, for the rate behind the ETA."""
    if global_watermark is None:
        return WindowProgress(0.0, None)
    span = (end - start).total_seconds()
    ratio = min(1.0, max(0.0, (global_watermark - start).total_seconds() / span))
    eta = None
    if previous is not None and ratio > previous[1] and now > previous[0]:
        rate = (ratio - previous[1]) / (now - previous[0]).total_seconds()
        eta = timedelta(seconds=round((1.0 - ratio) / rate))
    return WindowProgress(ratio, eta)


def read_fields(seen: GroupProgress | None) -> dict[str, Any]:
    """What the backfill's sources have read and how fast now (``readLimit`` caps the rate);
    nothing when its members do not report reads (a Spark side older than the read cap)."""
    if seen is None or seen.read_bytes is None:
        return {}
    rate = seen.read_bytes_per_s
    files = seen.read_files_per_s
    return {
        "readBytes": seen.read_bytes,
        "readFiles": seen.read_files,
        "readRate": None if rate is None else f"{byte_rate(rate)}, {files or 0:.2f} files/s",
        "readBytesPerSecond": None if rate is None else round(rate, 1),
    }


def byte_rate(per_s: float) -> str:
    """``12.3 MB/s``: decimal units, as object stores bill and throttle."""
    for unit in ("B", "kB", "MB", "GB"):
        if per_s < 1000 or unit == "GB":
            return f"{per_s:.0f} {unit}/s" if unit == "B" else f"{per_s:.1f} {unit}/s"
        per_s /= 1000
    return f"{per_s:.1f} GB/s"


def progress_status(
    bf: Backfill,
    global_watermark_us: int | None,
    lag_us: int | None,
    now: datetime,
    seen: GroupProgress | None = None,
) -> dict[str, Any]:
    """The status fields a person watches in `kubectl get bf` (from the coordinator's view;
    ``seen`` adds what the sources read)."""
    start, end = instant(bf.spec.window.start), instant(bf.spec.window.end)
    gw = (
        None
        if global_watermark_us is None or global_watermark_us < 0
        else datetime.fromtimestamp(global_watermark_us / 1e6, UTC)
    )
    prev = None
    extra = bf.status.model_extra if bf.status is not None and bf.status.model_extra else {}
    if extra.get("progressAt") and extra.get("progressRatio") is not None:
        prev = (datetime.fromisoformat(str(extra["progressAt"])), float(extra["progressRatio"]))
    p = progress(start, end, gw, prev, now)
    return {
        "progress": p.percent,
        "progressRatio": round(p.ratio, 6),
        "progressAt": now.isoformat(),
        "globalWatermark": gw.strftime("%Y-%m-%dT%H:%M:%SZ") if gw else None,
        "alignmentLag": None if lag_us is None else f"{lag_us / 1e6:.0f}s",
        "eta": None if p.eta is None else str(p.eta),
        **read_fields(seen),
    }


def held_for(seen: GroupProgress | None) -> str | None:
    """Why the group admits nothing now, in ``status.alignmentHeld`` (None: it is not held for
    a member's report)."""
    if seen is None or not seen.waiting_for:
        return None
    names = ", ".join(seen.waiting_for)
    return (
        f"waiting for {len(seen.waiting_for)} member(s) to report ({names}): every source holds at its "
        "last bound until all have reported (after a coordinator restart or an operator failover)"
    )


def group_declared_again(replica: str | None) -> Event:
    """A running Backfill's group declared in a coordinator that did not have it: the one that
    did is gone (the operator's leader deleted, killed or upgraded, or the process restarted)."""
    who = f"operator replica {replica}" if replica else "the operator"
    return Event(
        "Normal",
        "AlignmentGroupDeclaredAgain",
        f"{who} leads now and declared the alignment group again: its sources hold at their last bound "
        "until each has reported again, then go on",
    )


def progress_update(
    bf: Backfill, global_watermark_us: int | None, lag_us: int | None, now: datetime, seen: GroupProgress | None = None
) -> dict[str, Any] | None:
    """The progress fields to write, or None: nothing new. Nothing reported (yet, or since an
    operator restart emptied the coordinator's memory) keeps the last values shown instead of
    dropping to 0%; an unchanged ratio and lag are not written again (a thousand backfills
    must not patch every few seconds)."""
    current = bf.status.model_dump(by_alias=True) if bf.status else {}
    held = {"alignmentHeld": held_for(seen)}
    if global_watermark_us is None or global_watermark_us < 0:
        reads = {**read_fields(seen), **held}  # held or all finished: no progress to show, but what was read
        changed = any(k in reads and reads[k] != current.get(k) for k in ("readBytes", "readRate", "alignmentHeld"))
        return reads if changed else None
    fields = {**progress_status(bf, global_watermark_us, lag_us, now, seen), **held}
    watched = ("progressRatio", "alignmentLag", "readRate", "alignmentHeld")
    if all(fields.get(k) == current.get(k) for k in watched):
        return None
    return fields
