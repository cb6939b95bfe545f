"""Externalized checkpoints of StreamingJobs: the job's driver copies each query's newest
committed batch to ``spec.checkpoints.externalLocation`` every ``interval`` and applies
retention (``spark_app.checkpoints.driver``); every ``interval`` the operator lists the
manifests there and shows the restorable points in status, for a Rewind to pick from."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers import followers
from kappa_operator.handlers.context import log, parse, post_event, record, reported, until_stopped
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.observe.restore_points import restore_points, snapshot_failures
from kappa_operator.reconcile.checkpoints import checkpoint_status, snapshot_due, surely_not_due

TICK = 15.0
"""Seconds between checks whether a job's snapshot interval has passed."""


def _externalized(body: Mapping[str, Any]) -> bool:
    return bool(((body.get("spec") or {}).get("checkpoints") or {}).get("externalLocation"))


@followers.every("streamingjobs", TICK, initial_delay=TICK, when=_externalized)
@reported("StreamingJob")
async def follow_checkpoints(body: kopf.Body, stopped: followers.Stopped, **_: Any) -> None:
    """The listing runs in a thread, and the look ends without it once the job is being
    deleted (``stopped``): storage I/O can block, and the job's deletion handler waits for the
    looks in flight (``followers.wait_idle``)."""
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
