"""``python -m spark_app restore --config job.json``: a Rewind's data work, done where the
job's credentials are (a driver-only application the operator renders, or ``kappa run``
in-process), then a small report for the operator.

Per restore point: the snapshot's files are copied from the external location into a fresh
checkpoint directory (``<checkpoint.location>/<sink>``), the snapshots of later batches are
dropped (an abandoned timeline), and with ``resetSinks`` what the sink's query wrote after the
batch is undone in one snapshot. No SparkSession: copies go through pyarrow.fs in parallel
threads and the undo is a metadata commit.

Safe to run again after a crash at any point: a restore marks its directory complete last
(a partial one is cleared and redone; the live checkpoint is never the target), undo is
idempotent per query and cut, and a second run reports what the first one removed. The report
is written last, atomically, also on a failure (naming the sink and the fix)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from functools import partial
from typing import Any

from spark_app.catalogs import load_table
from spark_app.contract.checkpoints.kafka_offsets import end_offsets
from spark_app.contract.checkpoints.restore import restore
from spark_app.contract.checkpoints.snapshots import discard_after, list_snapshots
from spark_app.contract.config import JobConfig, RestorePoint
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.restore import RestoreReport, SinkRestored, report_location
from spark_app.contract.sinks import IcebergSink, KafkaSink
from spark_app.contract.sources import OffsetRange
from spark_app.contract.storage import Location, open_location
from spark_app.sinks.kafka import read_produced

log = logging.getLogger("kappa.rewinding")

DONE_MARKER = "_kappa_restored"
"""``<location>/_kappa_restored/<sink>``: beside the checkpoints, so Spark sees only its files."""


def _external(cfg: JobConfig, sink: str) -> Location:
    assert cfg.checkpoint.external is not None
    return open_location(f"{cfg.checkpoint.external.location.rstrip('/')}/{sink}")


def restore_point(cfg: JobConfig, point: RestorePoint, discard_later: bool = True) -> list[int]:
    """``point``'s snapshot into ``<checkpoint.location>/<sink>`` (the same query resumed: its
    sink treats the undo of batches > N as a cut, so batch N+1 is written again, not skipped);
    the batches of the snapshots dropped after it (``discard_later``: a rewind's abandoned
    timeline; never another job's snapshots a new job starts from)."""
    base, external = open_location(cfg.checkpoint.location), _external(cfg, point.sink)
    marker = f"{DONE_MARKER}/{point.sink}"
    if base.stat(marker) is None:
        target = base.child(point.sink)
        # a restore cut short by a crash: ours, fresh, never the live checkpoint
        target.fs.delete_dir_contents(target.root, missing_dir_ok=True)
        manifest = next((m for m in list_snapshots(external) if m.batch_id == point.batch_id), None)
        if manifest is None:
            raise KappaError(
                f"the snapshot of batch {point.batch_id} is gone from {external.uri} "
                "(retention?); create a new Rewind to choose another point"
            )
        restore(external, manifest, target)
        base.write_bytes(marker, f"{point.query_id} batch {point.batch_id}\n".encode())
    return discard_after(external, point.batch_id) if discard_later else []


def kafka_cut(cfg: JobConfig, point: RestorePoint, needed: bool) -> dict[str, Any]:
    """A Kafka sink's records written after the restored batch (report fields): from the end
    of the batch's output (its produced record, restored with the checkpoint) to the topic's
    end now (the job is stopped). A topic cannot be undone: a downstream job skips them. When
    the batch has no complete record (a checkpoint older than the record), a cascade
    (``needed``) is refused; a plain rewind goes on without the ranges."""
    sink = cfg.sinks[point.sink]
    if not isinstance(sink, KafkaSink):
        return {}
    restored = open_location(cfg.checkpoint.location).child(point.sink)
    produced = read_produced(restored, point.batch_id)
    if produced is None or produced.end is None:
        if not needed:
            log.warning(
                "batch %d of %s has no produced record: its later records are not reported", point.batch_id, point.sink
            )
            return {}
        raise KappaError(
            f"batch {point.batch_id} has no complete record of what it wrote to topic {sink.topic} "
            f"({restored.uri}/kafka-produced/{point.batch_id}), so the records written after it cannot be told "
            "apart; rewind to a later batch, or rewind the downstream jobs by hand"
        )
    now = end_offsets(sink.bootstrap_servers, sink.topic, sink.security)
    ranges = [
        OffsetRange(topic=sink.topic, partition=p, start=produced.end.get(p, 0), end=end)
        for p, end in sorted(now.items())
        if end > produced.end.get(p, 0)
    ]
    return {"undone_records": ranges, "bootstrap_servers": sink.bootstrap_servers}


def reset_sink(cfg: JobConfig, point: RestorePoint) -> dict[str, Any]:
    """Undo what ``point``'s query wrote to its Iceberg table after the batch (report fields)."""
    sink = cfg.sinks[point.sink]
    if not isinstance(sink, IcebergSink):
        return {}
    from spark_app.sinks.iceberg.undo import earlier_undo, undo

    load = partial(load_table, sink.catalog, cfg.catalogs[sink.catalog].properties(), sink.table)
    branch = cfg.sink_branch(point.sink)
    done = undo(load, branch, point.query_id, point.batch_id)
    if done.snapshot_id is None:
        done = earlier_undo(load(), branch, point.query_id, point.batch_id) or done
    return {
        "table": sink.table,
        "batches": list(done.batches),
        "files_removed": done.files_removed,
        "rows_removed": done.rows_removed,
        "snapshot_id": done.snapshot_id,
    }


def _write(cfg: JobConfig, report: RestoreReport) -> None:
    loc, name = report_location(cfg)
    loc.write_bytes(name, report.model_dump_json(indent=2).encode())


def run_restore(cfg: JobConfig) -> RestoreReport:
    """The restore application: clear the last report, restore (and reset) each point in turn,
    write the report. A refusal (a snapshot gone, an undo that would be partial) is a Failed
    report naming the sink; anything else is also reported, then re-raised."""
    if cfg.restore is None:
        raise KappaError(f"job {cfg.name}: restore needs a restore section (the points a Rewind chose)")
    settings = cfg.restore
    loc, name = report_location(cfg)
    loc.delete(name)  # a report on storage is always this run's
    started = datetime.now(UTC)
    done: list[SinkRestored] = []

    def report(error: str | None = None) -> RestoreReport:
        r = RestoreReport(
            rewind=settings.tag,
            state="Failed" if error else "Restored",
            sinks=done,
            error=error,
            started_at=started,
            finished_at=datetime.now(UTC),
        )
        _write(cfg, r)
        return r

    for point in settings.points:
        try:
            discarded = restore_point(cfg, point, discard_later=not settings.copy_only)
            fields = reset_sink(cfg, point) if settings.reset_sinks else {}
            if not settings.copy_only:
                fields.update(kafka_cut(cfg, point, needed=settings.downstream))
        except KappaError as exc:
            return report(f"sink {point.sink}: {exc}")
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0][:500]
            report(f"sink {point.sink}: {type(exc).__name__}: {first}")
            raise
        done.append(
            SinkRestored(
                sink=point.sink, batch_id=point.batch_id, query_id=point.query_id, discarded=discarded, **fields
            )
        )
        log.info("restored %s at batch %d into %s", point.sink, point.batch_id, cfg.checkpoint.location)
    return report()
