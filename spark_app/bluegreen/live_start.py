"""Where a green's history of an ``icebergLive`` source ends and its live reading begins: the
newest snapshot of the table that blue's durable position has passed whole, in every sink
query that reads it (a blue started at ``latest`` passed the snapshots before its start
without reading them: they are history all the same).

Green reads the table pinned at that snapshot as its archive (in event-time order, aligned,
from ``historyFrom``; rows blue never read included, as a Kafka archive holds records from
before blue's start), then the table's appends after it, never past blue's position
(``sources.iceberg.trailed``). So green reads each row of the table once, and no append blue
has not reached: at the switch both stand at the same input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyiceberg.table import Table

from spark_app.bluegreen.position import durable_position
from spark_app.bluegreen.trail import sink_queries
from spark_app.contract.blue_green import live_offsets
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import KappaError
from spark_app.contract.offsets import LiveOffset
from spark_app.sources.iceberg import scan


class BlueNotReadingError(KappaError):
    """Blue has no durable batch that read the table whole up to some snapshot yet: green
    would not know where its history ends."""

    restartable = True  # blue reaches the table's first snapshot within a trigger of its first append


def read_whole(chain: Sequence[int], blue: Iterable[LiveOffset]) -> int | None:
    """The newest snapshot of ``chain`` (the table's history, oldest first) that each of blue's
    positions in it has read whole: a position within a snapshot has read only its parent
    whole. None: blue has no position in this table, or is still within its first snapshot."""
    reached = [
        chain.index(o.snapshot_id) - (0 if o.complete else 1)
        for o in blue
        if o.snapshot_id is not None and o.snapshot_id in chain
    ]
    if not reached or min(reached) < 0:
        return None
    return chain[min(reached)]


def archive_snapshot(cfg: JobConfig, source: str, table: Table) -> int:
    """The snapshot green's archive of ``source`` is pinned at (see the module); refused, to be
    tried again by the restart, while blue has not read any of the table whole."""
    assert cfg.green is not None, "only a blue/green upgrade's green bootstraps an icebergLive source"
    blue = []
    for query in sink_queries(cfg, cfg.green.blue_checkpoint.rstrip("/")).values():
        found = durable_position(query.checkpoint, query.pending)
        if found is not None:
            blue += [LiveOffset.from_dict(o) for o in live_offsets(found)]
    chain = [s.snapshot_id for s in scan.history(table)]
    sid = read_whole(chain, blue)
    if sid is None:
        raise BlueNotReadingError(
            f"sources.{source}: the running version (blue, {cfg.green.blue_checkpoint}) has not yet durably read a "
            f"snapshot of {cfg.sources[source].table} whole (it has no batch yet, is within the table's first "
            "snapshot, or the table had no snapshot when it last committed), so green cannot tell where its history "
            "ends and its live reading begins. Green's driver is run again a few times; if the table gets no data "
            "meanwhile the upgrade is given up: edit the spec again once the table has had an append"
        )
    return sid
