"""Externalized checkpoints of StreamingJobs: every ``interval`` the operator copies each
query's newest committed batch to ``spec.checkpoints.externalLocation`` (incrementally),
applies retention, and lists the restorable points in status for a Rewind to pick from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers.context import counted, log, parse
from kappa_operator.job_snapshots import externalize_job
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.checkpoints import checkpoint_status, snapshot_due

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
@counted("StreamingJob")
def externalize_checkpoints(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    job = parse(StreamingJob, body)
    now = datetime.now(UTC)
    if not snapshot_due(job, now):
        return
    patch.status.update(snapshot_job(job, now))


def snapshot_job(job: StreamingJob, now: datetime) -> dict[str, Any]:
    """Externalize every sink's query, apply retention; the status fields to record."""
    taken, points = externalize_job(job, now)
    for sink, batches in taken.items():
        for b in batches:
            log.info("%s/%s: externalized %s batch %d", job.metadata.namespace, job.metadata.name, sink, b)
    return checkpoint_status(points, now)
