"""Externalized checkpoints of StreamingJobs: the job's driver copies each query's newest
committed batch to ``spec.checkpoints.externalLocation`` every ``interval`` and applies
retention (``spark_app.checkpoints.driver``); every ``interval`` the operator lists the
manifests there and shows the restorable points in status, for a Rewind to pick from."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers.context import log, parse, post_event, record, reported, until_stopped
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.observe.restore_points import restore_points, snapshot_failures
from kappa_operator.reconcile.checkpoints import checkpoint_status, snapshot_due, surely_not_due

TICK = 15.0
"""Seconds between checks whether a job's snapshot interval has passed."""


@kopf.timer(
    GROUP,
    VERSION,
    "streamingjobs",
    interval=TICK,
    initial_delay=TICK,
    when=lambda spec, **_: bool((spec.get("checkpoints") or {}).get("externalLocation")),
)
@reported("StreamingJob")
async def follow_checkpoints(body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any) -> None:
    """The listing runs in a thread; a deletion (or an operator stop) does not wait for it:
    kopf waits for a timer before it runs the delete handler, and storage I/O can block."""
    now = datetime.now(UTC)
    if surely_not_due(body, now):
        return
    job = parse(StreamingJob, body)
    if not snapshot_due(job, now):
        return
    halted, fields = await until_stopped(stopped, lambda: list_points(job, now))
    if halted or fields is None:
        log.info("StreamingJob %s/%s: stopping; the listing of its snapshots is left", *_where(job))
        return
    error = fields.get("snapshotError")
    if error and error != (body.get("status") or {}).get("snapshotError"):
        post_event(body, "Warning", "SnapshotFailing", f"checkpoint snapshots failing: {error}")
    await asyncio.to_thread(record, "StreamingJob", body, fields)


def _where(job: StreamingJob) -> tuple[str, str]:
    return job.metadata.namespace, job.metadata.name


def list_points(job: StreamingJob, now: datetime) -> dict[str, Any]:
    """The status fields of the job's restore points (what its driver externalized), and of
    the driver's copies failing now."""
    return checkpoint_status(restore_points(job), now, snapshot_failures(job))
