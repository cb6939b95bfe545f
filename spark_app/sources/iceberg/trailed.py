"""The live leg of a green that reads an ``icebergLive`` source: the table's appends from the
snapshot its archive was pinned at, behind a gate (closed while the archive leg runs) and
never past the position blue durably read (its trail, ``bluegreen.trail``).

Capped at blue's position, green's final batch ends where blue's did, which is what the switch
checks (``contract.blue_green.off_seam``). A StreamingJob's live sources have no read limit, so
every position either version logs is a whole snapshot: the same appends in both, whatever
each version's filter or split settings. (A position within a snapshot, from a JobConfig's
read limit, means the same splits only under the same settings, ``planning.splits.plan_splits``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Literal

from pyspark.sql.streaming.datasource import ReadLimit

from spark_app.contract.offsets import LiveOffset
from spark_app.contract.storage import Location
from spark_app.contract.trace import trace
from spark_app.sources.iceberg import scan
from spark_app.sources.iceberg.live_reader import LiveReader
from spark_app.sources.iceberg.spec import SourceSpec

Gate = Literal["closed", "open"]


def _order(chain: Sequence[int], offset: LiveOffset) -> tuple[int, float]:
    """Where an offset stands in the table's history: a later snapshot is further on, and
    within one, more splits (all of them once complete)."""
    at = -1 if offset.snapshot_id is None else chain.index(offset.snapshot_id)
    return at, float("inf") if offset.complete else float(offset.position)


def capped(chain: Sequence[int], start: LiveOffset, proposed: LiveOffset, caps: Iterable[LiveOffset]) -> LiveOffset:
    """The end of green's next batch: what the reader proposed, held at the lowest of blue's
    positions in this table (``caps``: blue's live offsets of every table; those of other
    tables are not in ``chain`` and are passed over). No cap in this table: blue read none of
    it yet, so green reads nothing. Never before ``start`` (a batch does not go back)."""
    mine = [c for c in caps if c.snapshot_id is not None and c.snapshot_id in chain]
    if not mine:
        return start
    cap = min(mine, key=lambda c: _order(chain, c))
    if _order(chain, cap) <= _order(chain, start):
        return start
    return cap if _order(chain, proposed) > _order(chain, cap) else proposed


class TrailedLiveReader(LiveReader):
    """A green's live leg of one ``icebergLive`` source (see the module)."""

    def __init__(self, spec: SourceSpec, after: int, gate: Gate, trail: tuple[Location, str] | None) -> None:
        """``after``: the snapshot the archive was pinned at (its appends were read from the
        archive; the leg starts after it). ``trail``: where blue's live offsets are written (None:
        no cap, a bootstrap that trails nobody)."""
        super().__init__(spec)
        self.after, self.gate, self.trail = after, gate, trail

    def initialOffset(self) -> dict:
        return LiveOffset(self.after, 0, True).to_dict()

    def caps(self) -> list[LiveOffset] | None:
        """Blue's live offsets as its trail holds them (None: no trail to honour; [] before blue
        has a durable batch)."""
        if self.trail is None:
            return None
        location, rel = self.trail
        if location.stat(rel) is None:
            return []
        return [LiveOffset.from_dict(o) for o in json.loads(location.read_bytes(rel))["offsets"]]

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self.gate == "closed":
            return start
        proposed = super().latestOffset(start, limit)
        caps = self.caps()
        if caps is None:
            return proposed
        chain = [s.snapshot_id for s in scan.history(self.table)]
        end = capped(chain, LiveOffset.from_dict(start), LiveOffset.from_dict(proposed), caps)
        if end != LiveOffset.from_dict(proposed):  # the trace's "live" line said what was proposed: say the cap
            trace(self.spec.trace_path, "trail", source=self.spec.name, proposed=proposed, end=end.to_dict())
        return end.to_dict()
