"""A job's restore points, as the operator reads them: the snapshot manifests its driver wrote
to ``spec.checkpoints.externalLocation`` (``spark_app.checkpoints.driver`` copies, the operator
only lists them: a few KB per snapshot, never a checkpoint file); the point each sink starts
from, for a StreamingJob's ``initialSnapshot`` or a Rewind's target; and whether Kafka still
holds what a point would read first. Restoring them and undoing the sinks is the restore
application's work (``spark_app.apps.restore``), not the operator's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TypeVar

from kappa_operator.models.common import instant
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import RestorePointStatus
from kappa_operator.render.kafka_security import operator_settings
from spark_app.contract.checkpoints import kafka_offsets as kafka
from spark_app.contract.checkpoints.failure_note import read_failure
from spark_app.contract.checkpoints.kafka_retention import Offsets, kafka_offsets, losses, read_none_of, refusal
from spark_app.contract.checkpoints.layout import OffsetLogEntry, parse_offsets
from spark_app.contract.checkpoints.restore import choose
from spark_app.contract.checkpoints.snapshots import Manifest, list_snapshots
from spark_app.contract.config import RestorePoint
from spark_app.contract.errors import KappaError
from spark_app.contract.storage import open_location

P = TypeVar("P", bound=RestorePointStatus)


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def snapshots_of(job: StreamingJob, sink: str) -> list[Manifest]:
    """The restorable snapshots of ``sink``'s query (manifest present, its pool objects listed)."""
    ext = job.spec.checkpoints.external_location
    if ext is None:
        return []
    return list_snapshots(open_location(_join(ext, sink)))


def snapshot_failures(job: StreamingJob) -> list[str]:
    """The driver's notes of copies failing now, per sink (a few hundred bytes each)."""
    ext = job.spec.checkpoints.external_location
    assert ext is not None
    out = []
    for sink in job.spec.sinks:
        note = read_failure(open_location(_join(ext, sink)))
        if note is not None:
            out.append(f"sink {sink}: {note.get('error')} (since {note.get('at')})")
    return out


def restore_point(sink: str, m: Manifest) -> RestorePoint:
    """The snapshot ``m`` of ``sink``'s query, as the point a restore would resume after."""
    return RestorePoint(
        sink=sink, batch_id=m.batch_id, query_id=m.query_id, committed_at=m.committed_at, watermark_ms=m.watermark_ms
    )


def restore_points(job: StreamingJob) -> list[RestorePoint]:
    """Every sink's restorable snapshots, for the job's status and the snapshots' pruning."""
    return [restore_point(sink, m) for sink in job.spec.sinks for m in snapshots_of(job, sink)]


def start_point(kind: type[P], sink: str, m: Manifest) -> P:
    """The point ``sink``'s query starts from at snapshot ``m``, in status."""
    return kind.of(restore_point(sink, m))


def _when(time: str | None) -> datetime | None:
    return instant(time).astimezone(UTC) if time else None


def initial_points(job: StreamingJob) -> list[RestorePointStatus] | str:
    """The snapshot each sink starts from (``spec.initialSnapshot``, another job's snapshots), or
    why there is none (a message for people). Manifests only: a few KB each."""
    initial = job.spec.initial_snapshot
    assert initial is not None
    out = []
    for sink in job.spec.sinks:
        where = _join(initial.location, sink)
        try:
            m = choose(list_snapshots(open_location(where)), time=_when(initial.time), batch_id=initial.batch_id)
        except KappaError as exc:
            return f"initialSnapshot: sink {sink} at {where}: {exc}"
        out.append(start_point(RestorePointStatus, sink, m))
    return out


def choose_points(rw: Rewind, job: StreamingJob) -> tuple[SinkRestore, ...] | str:
    """One restore point per sink query, or why there is none (a message for people)."""
    if job.spec.checkpoints.external_location is None:
        return f"StreamingJob {job.metadata.name} has no spec.checkpoints.externalLocation: nothing to restore from"
    target = rw.spec.target
    out = []
    for sink in job.spec.sinks:
        try:
            if target.before_skipped_offsets:
                m = before_skipped(job, sink, rw)
            else:
                m = choose(snapshots_of(job, sink), time=_when(target.time), batch_id=target.batch_id)
        except KappaError as exc:
            return f"sink {sink}: {exc}"
        out.append(start_point(SinkRestore, sink, m))
    return tuple(out)


def _offset_entry(job: StreamingJob, sink: str, manifest: Manifest | None) -> OffsetLogEntry | None:
    """A snapshot's offset log entry (where its batch ended, per source), or None."""
    assert job.spec.checkpoints.external_location is not None
    log = None if manifest is None else manifest.objects.get(f"offsets/{manifest.batch_id}")
    if log is None:
        return None
    external = open_location(_join(job.spec.checkpoints.external_location, sink))
    return parse_offsets(external.read_bytes(log).decode())


def before_skipped(job: StreamingJob, sink: str, rw: Rewind) -> Manifest:
    """The newest snapshot of ``sink``'s query that had read none of ``rw``'s skipped records."""
    starts = {(t.topic, r.partition): r.start for t in rw.spec.skip_offsets for r in t.partitions}
    snapshots = sorted(snapshots_of(job, sink), key=lambda m: m.batch_id, reverse=True)
    for m in snapshots:
        entry = _offset_entry(job, sink, m)
        if entry is not None and read_none_of(kafka_offsets(entry, patterns=[".*"]), starts):
            return m
    oldest = f" (the oldest of {len(snapshots)} retained, batch {snapshots[-1].batch_id}, had read past them)"
    raise KappaError(
        "no snapshot had read none of the records to skip"
        + (oldest if snapshots else ": there is no restorable snapshot")
        + "; the job cannot be rewound to before its upstream job's undone output"
    )


def kafka_refusal(
    job: StreamingJob,
    points: tuple[SinkRestore, ...],
    secret_values: Callable[[str], Mapping[str, str]] | None = None,
) -> str | None:
    """Why the restore points cannot resume from Kafka (retention deleted what they would
    read first, or the topic is gone), or None. Reads each point's offset log entry from its
    snapshot and asks each source's brokers for its partitions' earliest retained offsets:
    metadata only, never a record. ``secret_values``: a Secret's data in the job's namespace,
    for a source whose listener is secured (``render.kafka_security.operator_settings``)."""
    kafka = [(name, src) for name, src in job.spec.sources.items() if src.live.kind == "kafka"]
    if not kafka or job.spec.checkpoints.external_location is None:
        return None
    archives = {str(src.live.topic or src.live.topic_pattern): src.history.table for _, src in kafka}
    for point in points:
        manifest = next((m for m in snapshots_of(job, point.sink) if m.batch_id == point.batch_id), None)
        entry = _offset_entry(job, point.sink, manifest)
        if entry is None:
            continue
        lost = []
        for name, src in kafka:  # each source's topics on its own brokers
            live = src.live
            topics = [live.topic] if live.topic else []
            patterns = [live.topic_pattern] if live.topic_pattern else []
            stored = kafka_offsets(entry, topics, patterns)
            if stored:
                spec = job.spec.security_of(live.security)
                settings = None
                if spec is not None:
                    if secret_values is None:
                        raise KappaError(f"source {name} reads a secured listener: its Secrets are needed to ask it")
                    settings = operator_settings(spec, secret_values)
                lost += losses(stored, earliest_offsets(str(live.bootstrap_servers), stored, settings))
        if lost:
            return refusal(lost, point.batch_id, archives)
    return None


def earliest_offsets(
    bootstrap: str, stored: Offsets, settings: Mapping[str, str] | None = None
) -> dict[tuple[str, int], int]:
    """The earliest offset each stored partition still has; a partition the cluster no longer
    has (its topic deleted) is left out: everything after the stored offset is lost."""
    wanted = [(t, p) for t, parts in stored.items() for p in parts]
    return kafka.offsets(bootstrap, wanted, "earliest", settings)
