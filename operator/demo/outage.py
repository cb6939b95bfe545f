"""The outage the demo recovers from, and the comparisons that prove the recovery.

The live job's output in main is the clean replay: its snapshot before the outage is kept
(Iceberg time travel), so every later claim ("the backfill matches", "main is whole again") is
a diff against rows the live job really wrote, not against a recomputation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from spark_app.sinks.iceberg.validation import Comparison, matched_rows
from spark_app.sinks.iceberg.window import TimeWindow

OUTAGE = "kappa.demo.outage"


@dataclass(frozen=True)
class Outage:
    clean_snapshot: int
    """main's head after the live run: the clean replay everything is compared with."""
    clean_rows: int
    """Rows the live job wrote in the window."""
    down_until: datetime
    """The job was down from the window's start until here: its output there is missing."""
    missing: int
    corrupted: int
    """Rows after ``down_until`` rewritten by a bad deploy (durations in milliseconds)."""
    snapshot_id: int


def head(table: Table, ref: str = "main") -> int | None:
    snap = table.snapshot_by_name(ref)
    return snap.snapshot_id if snap else None


def inject_outage(load: Callable[[], Table], window: TimeWindow) -> Outage:
    """Replace main's rows in ``window`` by what a broken job leaves: nothing for the first half
    (the job was down), then rows with ``duration_s`` in milliseconds (a bad deploy)."""
    table = load()
    clean = head(table)
    if clean is None:
        raise ValueError(f"{table.name()} has no snapshot: the live job wrote nothing")
    rows = window.rows(table, clean)
    down_until = window.start + (window.end - window.start) / 2
    us = pc.cast(pc.cast(rows.column(window.column), pa.timestamp("us")), pa.int64())
    after = rows.filter(pc.greater_equal(us, int(down_until.timestamp() * 1_000_000)))
    i = after.schema.get_field_index("duration_s")
    bad = after.set_column(
        i, after.schema.field(i), pc.multiply(after["duration_s"], 1000).cast(after["duration_s"].type)
    )
    table.overwrite(bad, overwrite_filter=window.expression(table), snapshot_properties={OUTAGE: "injected"})
    snapshot = head(load())
    assert snapshot is not None
    return Outage(clean, rows.num_rows, down_until, rows.num_rows - after.num_rows, after.num_rows, snapshot)


def compare_tables(reference: pa.Table, candidate: pa.Table, key: list[str]) -> Comparison:
    """The demo's own whole-output checks (small tables, pyarrow); the window comparisons it
    shows go through validation's Spark comparison, as a publish does."""
    return Comparison(reference.num_rows, candidate.num_rows, matched_rows(reference, candidate, key), tuple(key))


def all_rows(table: Table, snapshot_id: int | None) -> pa.Table:
    return table.scan(snapshot_id=snapshot_id).to_arrow()
