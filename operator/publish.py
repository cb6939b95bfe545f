"""Validate and publish a finished Backfill (the I/O edge): for each Iceberg sink of its
pipeline, compare the backfill branch with main over the window and replace main's window
with the branch's rows in one snapshot (``spark_app.sinks.iceberg.publish``).

Each table's publish is atomic; a second run finds main already equal to the branch and
commits nothing, so the operator can resume a publish after a restart."""

from __future__ import annotations

from functools import partial

from pyiceberg.table import Table

from kappa_operator.models.backfill import Backfill, PublishedTable
from kappa_operator.reconcile.backfill import Outcome
from spark_app.catalogs import load_table
from spark_app.config import IcebergSink, JobConfig
from spark_app.errors import KappaError
from spark_app.sinks.iceberg import finality
from spark_app.sinks.iceberg.commit import branch_history
from spark_app.sinks.iceberg.publish import publish
from spark_app.sinks.iceberg.window import TimeWindow

BACKFILL = "kappa.backfill"


def publish_backfill(bf: Backfill, cfg: JobConfig) -> Outcome:
    assert cfg.window is not None
    results: list[PublishedTable] = []
    not_final: list[str] = []
    for name, sink in cfg.sinks.items():
        if not isinstance(sink, IcebergSink):
            continue
        if sink.time_column is None:
            return Outcome(results, f"sinks.{name}: set timeColumn on the StreamingJob's sink to publish a window")
        catalog = cfg.catalogs[sink.catalog].properties()
        window = TimeWindow(sink.time_column, cfg.window.start, cfg.window.end)
        try:
            done = publish(
                partial(load_table, sink.catalog, catalog, sink.table),
                cfg.sink_branch(name),
                window,
                key=sink.key,
                min_match_ratio=bf.spec.publish.min_match_ratio,
                properties={BACKFILL: f"{bf.metadata.namespace}/{bf.metadata.name}"},
            )
        except KappaError as exc:
            return Outcome(results, str(exc))
        tag = f"{bf.metadata.namespace}/{bf.metadata.name}"
        table = load_table(sink.catalog, catalog, sink.table)
        not_final += [f"{sink.table}: {n}" for n in finality.notices(table, cfg.sink_branch(name))]
        earlier = None if done.snapshot_id else _earlier(table, sink.table, tag)
        results.append(
            earlier
            or PublishedTable(
                table=sink.table,
                match_ratio=round(done.comparison.match_ratio, 6),
                rows_removed=done.rows_removed,
                rows_added=done.rows_added,
                snapshot_id=done.snapshot_id,
            )
        )
    return Outcome(results, None, tuple(not_final))


def _earlier(table: Table, name: str, tag: str) -> PublishedTable | None:
    """This backfill's publish already in main (a resumed or repeated publish changes nothing):
    report what that one did, not the empty second run."""
    for snap in branch_history(table, "main"):
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(BACKFILL) == tag and "kappa.rows-added" in props:
            return PublishedTable(
                table=name,
                match_ratio=float(props.get("kappa.match-ratio", "1")),
                rows_removed=int(props["kappa.rows-removed"]),
                rows_added=int(props["kappa.rows-added"]),
                snapshot_id=snap.snapshot_id,
            )
    return None
