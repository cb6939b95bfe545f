"""A Rewind's reads (the edge): the restore points of a job, from its snapshot manifests
(metadata, a few KB each). Restoring them and undoing the sinks is the restore application's
work (``spark_app.rewinding``), not the operator's."""

from __future__ import annotations

from datetime import UTC

from kappa_operator.models.common import instant
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.checkpoints.restore import choose
from spark_app.checkpoints.snapshots import Manifest, list_snapshots
from spark_app.errors import KappaError
from spark_app.storage import open_location


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def snapshots_of(job: StreamingJob, sink: str) -> list[Manifest]:
    ext = job.spec.checkpoints.external_location
    if ext is None:
        return []
    return list_snapshots(open_location(_join(ext, sink)))


def choose_points(rw: Rewind, job: StreamingJob) -> tuple[SinkRestore, ...] | str:
    """One restore point per sink query, or why there is none (a message for people)."""
    if job.spec.checkpoints.external_location is None:
        return f"StreamingJob {job.metadata.name} has no spec.checkpoints.externalLocation: nothing to restore from"
    target = rw.spec.target
    when = instant(target.time).astimezone(UTC) if target.time else None
    out = []
    for sink in job.spec.sinks:
        try:
            m = choose(snapshots_of(job, sink), time=when, batch_id=target.batch_id)
        except KappaError as exc:
            return f"sink {sink}: {exc}"
        committed = m.committed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out.append(SinkRestore(sink=sink, batch_id=m.batch_id, committed_at=committed, query_id=m.query_id))
    return tuple(out)
