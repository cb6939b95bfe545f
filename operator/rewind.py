"""A Rewind's I/O (the edge): choose restore points from a job's externalized snapshots,
materialize them into a fresh checkpoint, undo what the sinks wrote after them.

Every step is safe to repeat after a crash: a restore marks its directory complete last and a
partial one is cleared and redone; undo is idempotent per query (``spark_app.sinks.iceberg.undo``)."""

from __future__ import annotations

from datetime import UTC
from functools import partial

from kappa_operator.models.common import instant
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.catalogs import load_table
from spark_app.checkpoints.restore import choose, restore
from spark_app.checkpoints.snapshots import Manifest, discard_after, list_snapshots
from spark_app.errors import KappaError
from spark_app.storage import open_location

DONE_MARKER = "_kappa_restored"


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


def restore_points(job: StreamingJob, restores: tuple[SinkRestore, ...], location: str) -> None:
    """Each query's snapshot into ``location/<sink>``, the same query resumed (its sink treats
    the undo of batches > N as a cut, so batch N+1 is written again, not skipped as a replay).
    The snapshots of batches after N describe an abandoned timeline and are dropped."""
    base = open_location(location)
    for r in restores:
        external = open_location(_join(job.spec.checkpoints.external_location or "", r.sink))
        marker = f"{DONE_MARKER}/{r.sink}"  # beside the checkpoint, not in it: Spark sees only its files
        if base.stat(marker) is None:
            target = base.child(r.sink)
            # a restore cut short by a crash: ours, fresh, never the live checkpoint
            target.fs.delete_dir_contents(target.root, missing_dir_ok=True)
            manifest = next((m for m in list_snapshots(external) if m.batch_id == r.batch_id), None)
            if manifest is None:
                raise KappaError(
                    f"sink {r.sink}: the snapshot of batch {r.batch_id} is gone (retention?); rewind again"
                )
            restore(external, manifest, target)
            base.write_bytes(marker, f"{r.query_id} batch {r.batch_id}\n".encode())
        discard_after(external, r.batch_id)


def reset_sinks(job: StreamingJob, restores: tuple[SinkRestore, ...]) -> dict[str, tuple[str | None, int]]:
    """Per sink: the table and how many data files the undo removed (parquet sinks: none)."""
    out: dict[str, tuple[str | None, int]] = {}
    for r in restores:
        sink = job.spec.sinks[r.sink]
        if sink.kind != "iceberg" or sink.table is None:
            out[r.sink] = (None, 0)
            continue
        props = {k: str(v) for k, v in job.spec.catalogs[sink.catalog].items()}
        from spark_app.sinks.iceberg.undo import undo  # pyiceberg's Arrow I/O: loaded when a Rewind resets a sink

        done = undo(partial(load_table, sink.catalog, props, sink.table), "main", r.query_id, r.batch_id)
        out[r.sink] = (sink.table, done.files_removed)
    return out
