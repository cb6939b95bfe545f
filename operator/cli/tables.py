"""What the `kappa` command prints for people: a checkpoint's batches, a location's snapshots,
and what a Rewind would do before it is applied (a dry run that changes nothing)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.observe import restore_points
from kappa_operator.reconcile.rewind import downstream_of, downstream_rewind, restored_location
from spark_app.catalogs import load_table
from spark_app.contract.checkpoints import CheckpointError, list_batches, list_snapshots, open_location
from spark_app.contract.checkpoints.snapshots import SNAPSHOTS
from spark_app.sinks.iceberg.undo import batches_after


def _t(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _wm(ms: int | None) -> str:
    return "-" if not ms or ms <= 0 else _t(datetime.fromtimestamp(ms / 1000, UTC))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def checkpoints_table(uri: str) -> Table:
    """Snapshots when ``uri`` is an external location, else the live checkpoint's batches."""
    loc = open_location(uri)
    if not loc.list_files():
        raise CheckpointError(f"{uri}: no files there: not a checkpoint or a snapshot location")
    if loc.list_files(SNAPSHOTS):
        table = Table(title=f"restorable snapshots in {uri}")
        for col in ("batch", "committed (UTC)", "watermark", "taken", "files", "size", "copied"):
            table.add_column(col, justify="right" if col in ("batch", "files", "size", "copied") else "left")
        for m in list_snapshots(loc):
            copied = f"{m.copied_files} / {_size(m.copied_bytes)}"
            table.add_row(
                str(m.batch_id),
                _t(m.committed_at),
                _wm(m.watermark_ms),
                _t(m.taken_at),
                str(len(m.files)),
                _size(m.total_bytes),
                copied,
            )
        return table
    table = Table(title=f"committed batches in {uri}")
    for col in ("batch", "committed (UTC)", "watermark", "source offsets", "state versions"):
        table.add_column(col, justify="right" if col == "batch" else "left")
    for b in list_batches(loc):
        offsets = "; ".join(
            f"{s.source}: {s.kind} snapshot {s.snapshot_id} pos {s.position}" if s.kind else f"{s.source}: {s.raw}"
            for s in b.sources
        )
        states = ", ".join(f"op {op}: {max(v)}" for op, v in sorted(b.state_versions.items()) if v) or "-"
        table.add_row(str(b.batch_id), _t(b.committed_at), _wm(b.watermark_ms), offsets, states)
    return table


def rewind_preview(rw: Rewind, job: StreamingJob, others: list[StreamingJob]) -> RenderableType:
    """What applying ``rw`` would do, read from the same snapshots and tables the operator uses."""
    chosen = restore_points.choose_points(rw, job)
    t = rw.spec.target
    target = t.time or (f"batch {t.batch_id}" if t.batch_id is not None else "reading the records it skips")
    head = Text(f"Rewind {rw.metadata.name}: {job.metadata.name} to before {target}\n", style="bold")
    if isinstance(chosen, str):
        return Group(head, Text(f"refused: no restorable point: {chosen}", style="red"))
    steps = Table(show_header=True, title="what would happen (nothing is changed by this command)")
    for col in ("sink", "restore batch", "committed (UTC)", "resumes at", "sink reset"):
        steps.add_column(col)
    for r in chosen:
        sink = job.spec.sinks[r.sink]
        reset = "off (resetSinks: false)"
        if rw.spec.reset_sinks and sink.kind == "iceberg" and sink.table:
            props = {k: str(v) for k, v in job.spec.catalogs[sink.catalog].items()}
            undone = batches_after(
                partial(load_table, sink.catalog, props, sink.table)(), "main", r.query_id, r.batch_id
            )
            files = sum(len(b.paths) for b in undone)
            ids = f"{undone[0].batch_id}..{undone[-1].batch_id}" if undone else "none"
            reset = f"{sink.table}: undo batches {ids} ({files} files) in one snapshot"
        elif rw.spec.reset_sinks and sink.kind == "kafka":
            reset = f"topic {sink.topic}: its records after the batch are skipped by the downstream jobs"
        elif rw.spec.reset_sinks:
            reset = f"{sink.kind} sink: cannot be reset (only Iceberg and Kafka sinks)"
        steps.add_row(r.sink, str(r.batch_id), r.committed_at, str(r.batch_id + 1), reset)
    lines = [
        head,
        steps,
        Text(f"restored into {restored_location(rw, job)} (the live checkpoint is only read)"),
    ]
    if rw.spec.downstream:
        down = downstream_of(job, others)
        resolved = Rewind.model_validate({**rw.model_dump(by_alias=True), "status": {"restores": list(chosen)}})
        for d in down:
            child = downstream_rewind(resolved, d)
            when = child["spec"]["target"].get("time")
            to = f"to before {when}" if when else "to before the records this one undoes in the topics it reads"
            lines.append(Text(f"downstream: Rewind {child['metadata']['name']} of {d.metadata.name} {to}"))
        if not down:
            lines.append(Text("downstream: no given StreamingJob reads this job's tables (pass them with --jobs)"))
    return Group(*lines)
