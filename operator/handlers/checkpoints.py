"""Externalized checkpoints of StreamingJobs: every ``interval`` the operator copies each
query's newest committed batch to ``spec.checkpoints.externalLocation`` (incrementally),
applies retention, and lists the restorable points in status for a Rewind to pick from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.checkpoints.snapshots import apply_retention, externalize, list_snapshots
from kappa_operator.checkpoints.storage import open_location
from kappa_operator.handlers.context import counted, log, parse
from kappa_operator.models.common import GROUP, VERSION, as_timedelta
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.checkpoints import Point, checkpoint_status, snapshot_due
from kappa_operator.render.jobconfig import live_checkpoint

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
    spec = job.spec.checkpoints
    assert spec.external_location is not None
    max_age = as_timedelta(spec.retention.max_age) if spec.retention.max_age else None
    points: list[Point] = []
    for sink in job.spec.sinks:
        live = open_location(f"{live_checkpoint(job).rstrip('/')}/{sink}")
        external = open_location(f"{spec.external_location.rstrip('/')}/{sink}")
        taken = externalize(live, external, now=now)
        if taken is not None:
            log.info("%s/%s: externalized %s batch %d", job.metadata.namespace, job.metadata.name, sink, taken.batch_id)
        apply_retention(external, spec.retention.count, max_age, now)
        points += [Point(sink, m.batch_id, m.committed_at, m.watermark_ms) for m in list_snapshots(external)]
    return checkpoint_status(points, now)
