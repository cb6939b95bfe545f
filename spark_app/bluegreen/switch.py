"""The switch of a blue/green upgrade, once both versions stopped: green's rows from the
boundary ``B`` on replace blue's in each sink's main branch, in one Iceberg snapshot per table.

In order, each step safe to run again (an operator or driver that dies mid-way reruns it):

1. Both versions' final batches must be at one input seam (``off_seam``): else nothing is
   written and ``OffSeamError`` says where (green is started again to reach blue's end).
2. ``B`` (``contract.blue_green.boundary``) is written to the switch record *before any
   commit*; a rerun reads it back, so every table switches at the same ``B``.
3. Per table, ``publish`` over ``[B, end of time)``: main's rows from ``B`` on (blue's) are
   removed and the branch's (green's) added, by reference, in one ``overwrite`` snapshot,
   tagged with green's query and final batch so green, promoted, finds its batches in main.
   A rerun after the commit finds main equal to the branch there and commits nothing.
4. The branch is removed (main keeps the files).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from spark_app.bluegreen.tables import GreenBranch
from spark_app.contract.blue_green import FinalBatch, boundary, off_seam
from spark_app.contract.errors import KappaError
from spark_app.contract.storage import REPORT_DIR, Location
from spark_app.sinks.iceberg.commit import BATCH_ID, QUERY_ID
from spark_app.sinks.iceberg.publish import PublishResult, publish
from spark_app.sinks.iceberg.window import TimeWindow

log = logging.getLogger("kappa.bluegreen")

SWITCH_RECORD = f"{REPORT_DIR}/switch.json"
END_OF_TIME = datetime(9999, 1, 1, tzinfo=UTC)
"""The boundary's window is open-ended: every row from ``B`` on."""
BLUE_GREEN = "kappa.blue-green"
BOUNDARY = "kappa.boundary"


class OffSeamError(KappaError):
    """Green's final batch did not end where blue's did: the switch would lose or repeat input."""

    restartable = True  # green runs on to blue's end, then the switch runs again


@dataclass(frozen=True)
class SinkSwitch:
    """One Iceberg sink's part of the switch: its table, and where each version ended."""

    table: GreenBranch
    blue: FinalBatch
    green: FinalBatch
    green_query_id: str


@dataclass(frozen=True)
class Switched:
    """What the switch did to one table."""

    sink: str
    rows_removed: int
    rows_added: int
    snapshot_id: int | None


def recorded_boundary(record: Location) -> datetime | None:
    """``B`` as the switch record holds it (None: no switch decided one yet)."""
    if record.stat(SWITCH_RECORD) is None:
        return None
    return datetime.fromisoformat(json.loads(record.read_bytes(SWITCH_RECORD))["boundary"])


def recorded_green_batches(record: Location) -> dict[str, int]:
    """Green's final batch per sink as the first run of the switch found it, before it settled
    the pending logs (a rerun finds the settled batches no longer pending, so an older one
    durable in the checkpoint: the switch snapshot must name the batch green ended on, or the
    promoted green would commit that batch a second time)."""
    if record.stat(SWITCH_RECORD) is None:
        return {}
    sinks = json.loads(record.read_bytes(SWITCH_RECORD)).get("sinks", {})
    return {sink: int(v["greenBatch"]) for sink, v in sinks.items()}


def settled_boundary(record: Location, sinks: list[SinkSwitch]) -> datetime:
    """``B``, from the switch record when an earlier run wrote it, else decided now and
    recorded before anything is committed. Refuses a sink whose versions are off the seam."""
    recorded = recorded_boundary(record)
    if recorded is not None:
        return recorded
    for s in sinks:
        off = off_seam(s.blue.position, s.green.position)
        if off:
            raise OffSeamError(
                f"sinks.{s.table.sink}: green's batch {s.green.position.batch_id} did not end where blue's batch "
                f"{s.blue.position.batch_id} did (sources {', '.join(off)}); nothing was switched: green runs on to "
                "blue's end first"
            )
    b = boundary([f for s in sinks for f in (s.blue, s.green)])
    body = {
        "boundary": b.isoformat(),
        "sinks": {
            s.table.sink: {"blueBatch": s.blue.position.batch_id, "greenBatch": s.green.position.batch_id}
            for s in sinks
        },
    }
    record.write_bytes(SWITCH_RECORD, json.dumps(body, sort_keys=True).encode())
    return b


def switch(spark: SparkSession, record: Location, sinks: list[SinkSwitch], label: str) -> list[Switched]:
    """Switch every sink at one boundary (``label``: the upgrade, as ``<ns>/<job> g<gen>``, in
    each snapshot's properties)."""
    b = settled_boundary(record, sinks)
    out = []
    for s in sinks:
        t = s.table
        if t.branch not in t.load().metadata.refs:
            # switched and its branch removed by an earlier run: main holds green's rows already
            out.append(Switched(t.sink, 0, 0, None))
            continue
        result: PublishResult = publish(
            spark,
            t.load,
            t.catalog_properties,
            t.branch,
            TimeWindow(t.time_column, b, END_OF_TIME),
            key=t.key,
            min_match_ratio=0.0,  # the versions differ from B on by design: green's rows are taken
            properties={
                BLUE_GREEN: label,
                BOUNDARY: b.isoformat(),
                QUERY_ID: s.green_query_id,
                BATCH_ID: str(s.green.position.batch_id),
            },
        )
        t.load().manage_snapshots().remove_branch(t.branch).commit()
        log.info(
            "switched %s at %s: -%d +%d rows (snapshot %s)",
            t.sink,
            b.isoformat(),
            result.rows_removed,
            result.rows_added,
            result.snapshot_id,
        )
        out.append(Switched(t.sink, result.rows_removed, result.rows_added, result.snapshot_id))
    return out
