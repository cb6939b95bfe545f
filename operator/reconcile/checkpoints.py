"""When to externalize a job's checkpoint, and what `kubectl describe sj` shows of its
restorable points (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kappa_operator.models.common import as_timedelta, instant, rfc3339
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import RestorePointStatus
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION
from spark_app.contract.config import RestorePoint

SHOWN = 5
"""Restore points listed in status (the newest)."""


def snapshot_due(job: StreamingJob, now: datetime) -> bool:
    """Externalize when the job has an external location, is not being rewound, and the
    interval passed since the last snapshot."""
    spec = job.spec.checkpoints
    if spec.external_location is None or job.metadata.annotations.get(PAUSED_ANNOTATION):
        return False
    last = job.status.last_snapshot_at if job.status else None
    if last is None:
        return True
    return now - instant(last) >= as_timedelta(spec.interval)


def surely_not_due(body: Mapping[str, Any], now: datetime) -> bool:
    """Whether the job's manifest as the server holds it (its interval defaulted there) alone
    shows that its snapshot interval has not passed since the last snapshot. The timer asks this
    every 15 s of every job, and most answers are "not yet": at 1,000 settled objects, validating
    the whole job for them was a tenth of the operator's CPU. Any doubt (a field missing or
    unreadable) answers False, and ``snapshot_due`` on the validated job decides."""
    try:
        interval = body["spec"]["checkpoints"]["interval"]
        last = body["status"]["lastSnapshotAt"]
        return now - instant(last) < as_timedelta(interval)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def checkpoint_status(points: list[RestorePoint], now: datetime, failures: list[str] | None = None) -> dict[str, Any]:
    """``failures``: the driver's notes of snapshot copies failing now (None clears the field)."""
    newest = sorted(points, key=lambda p: p.committed_at or datetime.min.replace(tzinfo=UTC), reverse=True)[:SHOWN]
    return {
        "snapshotError": "; ".join(failures) if failures else None,
        "lastSnapshotAt": rfc3339(now),
        "lastCheckpoint": rfc3339(newest[0].committed_at) if newest and newest[0].committed_at else None,
        "checkpoints": [
            RestorePointStatus.of(p).model_dump(by_alias=True, exclude_none=True) for p in newest if p.committed_at
        ],
    }
