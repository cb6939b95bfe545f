"""Where a version's sink query durably stands, read from its checkpoint and its sink's
pending-commit log: what green trails while blue runs, and what the switch compares once both
stopped.

A batch is durable once Spark logged it done (``commits/N``) or its Iceberg sink recorded it
for commit (the pending log: the record is put before the batch function returns, so before
Spark's log, and committed to the table by the next start if the driver died in between). A
batch with only its offsets logged is not: after a restart Spark runs it again, and a live
source may then give it other input.
"""

from __future__ import annotations

import re

from spark_app.contract.blue_green import Position, durable_batch, position
from spark_app.contract.checkpoints.layout import COMMITS, OFFSETS, log_batches, parse_offsets
from spark_app.contract.storage import Location

_RECORD = re.compile(r"^(\d+)\.json$")


def recorded_batches(pending: Location) -> list[int]:
    """The batches the sink recorded for commit and has not committed yet (its pending log)."""
    return sorted(int(m.group(1)) for rel in pending.list_files() if (m := _RECORD.match(rel)))


def durable_position(checkpoint: Location, pending: Location | None = None) -> Position | None:
    """The sink query's newest durable batch and its input (None: no batch is durable yet).
    ``pending``: the sink's pending-commit log (an Iceberg sink's; None for other sinks)."""
    listing = checkpoint.list_files()
    recorded = recorded_batches(pending) if pending is not None else []
    batch = durable_batch(log_batches(listing, OFFSETS), log_batches(listing, COMMITS), recorded)
    if batch is None:
        return None
    return position(batch, parse_offsets(checkpoint.read_bytes(f"{OFFSETS}/{batch}").decode()))
