"""A Rewind's reads (the edge): the restore points of a job, from its snapshot manifests
(metadata, a few KB each). Restoring them and undoing the sinks is the restore application's
work (``spark_app.rewinding``), not the operator's."""

from __future__ import annotations

from datetime import UTC

from kappa_operator.models.common import instant
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.checkpoints.layout import parse_offsets
from spark_app.checkpoints.restore import choose
from spark_app.checkpoints.snapshots import Manifest, list_snapshots
from spark_app.errors import KappaError
from spark_app.sources.kafka_retention import Offsets, kafka_offsets, losses, refusal
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


def kafka_refusal(job: StreamingJob, points: tuple[SinkRestore, ...]) -> str | None:
    """Why the restore points cannot resume from Kafka (retention deleted what they would
    read first), or None. Reads each point's offset log entry from its snapshot and asks the
    brokers for each partition's earliest retained offset: metadata only, never a record."""
    kafka = {name: src.live for name, src in job.spec.sources.items() if src.live.kind == "kafka"}
    if not kafka or job.spec.checkpoints.external_location is None:
        return None
    topics = [live.topic for live in kafka.values() if live.topic]
    patterns = [live.topic_pattern for live in kafka.values() if live.topic_pattern]
    archives = {
        str(src.live.topic or src.live.topic_pattern): src.history.table
        for src in job.spec.sources.values()
        if src.live.kind == "kafka"
    }
    for point in points:
        external = open_location(_join(job.spec.checkpoints.external_location, point.sink))
        manifest = next((m for m in list_snapshots(external) if m.batch_id == point.batch_id), None)
        log = None if manifest is None else manifest.objects.get(f"offsets/{point.batch_id}")
        if log is None:
            continue
        stored = kafka_offsets(parse_offsets(external.read_bytes(log).decode()), topics, patterns)
        if not stored:
            continue
        servers = {str(live.bootstrap_servers) for live in kafka.values()}
        lost = losses(stored, earliest_offsets(servers, stored))
        if lost:
            return refusal(lost, point.batch_id, archives)
    return None


def earliest_offsets(servers: set[str], stored: Offsets) -> dict[tuple[str, int], int]:
    """The earliest offset each partition still has, from the first of ``servers`` that
    answers (a partition unknown to the cluster is left out: all of it is lost)."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    wanted = {TopicPartition(t, p): OffsetSpec.earliest() for t, parts in stored.items() for p in parts}
    errors = []
    for bootstrap in sorted(servers):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        out: dict[tuple[str, int], int] = {}
        try:
            for tp, future in admin.list_offsets(wanted, request_timeout=15).items():
                try:
                    out[(tp.topic, tp.partition)] = future.result(timeout=30).offset
                except KafkaException as exc:
                    if "UNKNOWN_TOPIC_OR_PART" not in str(exc):
                        raise
            return out
        except KafkaException as exc:
            errors.append(f"{bootstrap}: {exc}")
    raise KappaError(f"could not ask Kafka for the retained offsets ({'; '.join(errors)})")
