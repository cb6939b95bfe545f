"""A StreamingJob's restore points, as the operator sees them: the manifests its driver wrote
to ``spec.checkpoints.externalLocation`` (``spark_app.checkpoints.driver`` copies, the
operator only lists them: a few KB per snapshot, never a checkpoint file)."""

from __future__ import annotations

from datetime import UTC

from kappa_operator.models.common import instant
from kappa_operator.models.streaming_job import StartPoint, StreamingJob
from kappa_operator.reconcile.checkpoints import Point
from spark_app.checkpoints.failure_note import read_failure
from spark_app.checkpoints.restore import choose
from spark_app.checkpoints.snapshots import list_snapshots
from spark_app.errors import KappaError
from spark_app.storage import open_location


def _sink_location(job: StreamingJob, sink: str) -> str:
    external = job.spec.checkpoints.external_location
    assert external is not None
    return f"{external.rstrip('/')}/{sink}"


def snapshot_failures(job: StreamingJob) -> list[str]:
    """The driver's notes of copies failing now, per sink (a few hundred bytes each)."""
    out = []
    for sink in job.spec.sinks:
        note = read_failure(open_location(_sink_location(job, sink)))
        if note is not None:
            out.append(f"sink {sink}: {note.get('error')} (since {note.get('at')})")
    return out


def restore_points(job: StreamingJob) -> list[Point]:
    """Every sink's restorable snapshots (manifest present, its pool objects listed)."""
    points: list[Point] = []
    for sink in job.spec.sinks:
        loc = open_location(_sink_location(job, sink))
        points += [Point(sink, m.batch_id, m.committed_at, m.watermark_ms) for m in list_snapshots(loc)]
    return points


def initial_points(job: StreamingJob) -> list[StartPoint] | str:
    """The snapshot each sink starts from (``spec.initialSnapshot``), or why there is none (a
    message for people). Manifests only: a few KB each."""
    initial = job.spec.initial_snapshot
    assert initial is not None
    when = instant(initial.time).astimezone(UTC) if initial.time else None
    out = []
    for sink in job.spec.sinks:
        where = f"{initial.location.rstrip('/')}/{sink}"
        try:
            m = choose(list_snapshots(open_location(where)), time=when, batch_id=initial.batch_id)
        except KappaError as exc:
            return f"initialSnapshot: sink {sink} at {where}: {exc}"
        committed = m.committed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out.append(StartPoint(sink=sink, batch_id=m.batch_id, committed_at=committed, query_id=m.query_id))
    return out
