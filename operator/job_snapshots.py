"""A StreamingJob's externalized checkpoints (the I/O edge shared by the operator's timer and
`kappa run`): copy each sink's query to ``spec.checkpoints.externalLocation``, apply retention,
and list the restore points ``reconcile.checkpoints`` turns into status."""

from __future__ import annotations

from datetime import datetime

from kappa_operator.checkpoints import layout
from kappa_operator.checkpoints.errors import IncompleteCheckpointError
from kappa_operator.checkpoints.snapshots import apply_retention, externalize, list_snapshots
from kappa_operator.models.common import as_timedelta
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.checkpoints import Point
from kappa_operator.render.jobconfig import live_checkpoint
from spark_app.storage import Location, open_location


def _not_yet_copied(live: Location, external: Location) -> list[int | None]:
    """Every committed batch not externalized yet, after the newest one both hold (re-checked:
    same offsets, or TimelineConflictError)."""
    listing = live.list_files()
    committed = layout.committed_batches(listing) if layout.METADATA in listing else []
    have = {m.batch_id for m in list_snapshots(external, verify=False)}
    check = [n for n in committed if n in have][-1:]
    return [*check, *(n for n in committed if n > max(have, default=-1))]


def externalize_job(
    job: StreamingJob, now: datetime, every_batch: bool = False
) -> tuple[dict[str, list[int]], list[Point]]:
    """Per sink, the batches copied now; and the restore points kept after retention.

    The operator copies the newest committed batch each ``interval``; ``every_batch`` (a local
    run of a minute) copies each committed batch, so the run leaves more than one point."""
    spec = job.spec.checkpoints
    assert spec.external_location is not None
    max_age = as_timedelta(spec.retention.max_age) if spec.retention.max_age else None
    taken: dict[str, list[int]] = {}
    points: list[Point] = []
    for sink in job.spec.sinks:
        live = open_location(f"{live_checkpoint(job).rstrip('/')}/{sink}")
        external = open_location(f"{spec.external_location.rstrip('/')}/{sink}")
        taken[sink] = []
        for n in _not_yet_copied(live, external) if every_batch else [None]:
            try:
                manifest = externalize(live, external, batch_id=n, now=now)
            except IncompleteCheckpointError:
                if n is None:
                    raise
                continue  # Spark purged it (beyond minBatchesToRetain)
            if manifest is not None:  # None: that very batch is there already
                taken[sink].append(manifest.batch_id)
        apply_retention(external, spec.retention.count, max_age, now)
        points += [Point(sink, m.batch_id, m.committed_at, m.watermark_ms) for m in list_snapshots(external)]
    return taken, points
