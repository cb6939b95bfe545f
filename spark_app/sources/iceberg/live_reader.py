"""The Iceberg source of a live job: a table's appends, snapshot by snapshot, from where the
checkpoint (or the starting position) says."""

from __future__ import annotations

import logging
from typing import Any

from pyiceberg.table.snapshots import Snapshot
from pyspark.sql.streaming.datasource import (
    ReadLimit,
)

from spark_app.contract.errors import (
    NonAppendSnapshotError,
    SnapshotExpiredError,
)
from spark_app.contract.offsets import LiveOffset
from spark_app.contract.trace import trace
from spark_app.planning.admission import Limits, admit
from spark_app.planning.splits import Split, plan_splits
from spark_app.sinks.iceberg.history import expired_before
from spark_app.sources.iceberg import scan
from spark_app.sources.iceberg.spec import SourceSpec, micros
from spark_app.sources.iceberg.stream import IcebergReader

log = logging.getLogger(__name__)


class LiveReader(IcebergReader):
    """Incremental appends of the table's history, snapshot by snapshot."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._cache: dict[int, list[Split]] = {}
        self._bounded = False
        self._target: int | None = None

    def splits_of(self, snapshot_id: int) -> list[Split]:
        if snapshot_id not in self._cache:
            snap = scan.require_snapshot(self.table, snapshot_id, "a snapshot this query reads")
            files = scan.files_added_by(self.table, snap, self.spec.ordering_column, self.spec.source.filter)
            self._layouts.update({f.path: (f.size_bytes, f.row_group_offsets) for f in files})
            self._cache[snapshot_id] = plan_splits(files, self.spec.source.split)
        return self._cache[snapshot_id]

    def initialOffset(self) -> dict:
        src = self.spec.source
        assert src.kind == "icebergLive"
        table = self.refresh()
        chain = scan.history(table)
        current = chain[-1].snapshot_id if chain else None
        if src.starting_snapshot_id is not None:
            if src.starting_snapshot_id not in {s.snapshot_id for s in chain}:
                raise SnapshotExpiredError(
                    f"sources.{self.spec.name}.startingSnapshotId {src.starting_snapshot_id} is not in the "
                    f"history of {src.table} (expired, or not an ancestor of the current snapshot)"
                )
            return LiveOffset(src.starting_snapshot_id, 0, False).to_dict()
        if src.starting_timestamp is not None:
            ms = micros(src.starting_timestamp) // 1000
            first = next((s for s in chain if s.timestamp_ms >= ms), None)
            if first is None:
                return LiveOffset(current, 0, True).to_dict()
            if first is chain[0]:
                self._refuse_expired_start(chain[0], f"startingTimestamp {src.starting_timestamp.isoformat()}")
            return LiveOffset(first.snapshot_id, 0, False).to_dict()
        if src.starting_position == "earliest" and chain:
            self._refuse_expired_start(chain[0], "startingPosition earliest")
            return LiveOffset(chain[0].snapshot_id, 0, False).to_dict()
        return LiveOffset(current, 0, True).to_dict()

    def _refuse_expired_start(self, oldest: Snapshot, what: str) -> None:
        """Reading from the oldest retained snapshot on would skip every row the expired ones
        added (still in the table): silent loss, so refuse and say what to do instead."""
        if expired_before(oldest):
            raise SnapshotExpiredError(
                f"sources.{self.spec.name}: {what} on {self.spec.source.table} would start at snapshot "
                f"{oldest.snapshot_id}, but the snapshots before it were expired: the rows they added are in "
                "the table and would never be read. Start from startingPosition: latest and backfill the "
                "history (a Backfill reads the table as it is), or keep more history on the writer"
            )

    def prepareForTriggerAvailableNow(self) -> None:
        current = self.refresh().current_snapshot()
        self._bounded = True
        self._target = current.snapshot_id if current else None

    def _chain_after(self, offset: LiveOffset) -> list[int]:
        """Snapshot ids from the offset's snapshot (inclusive) to the newest allowed."""
        chain = [s.snapshot_id for s in scan.history(self.table)]
        if self._bounded:
            chain = chain[: chain.index(self._target) + 1] if self._target in chain else []
        if offset.snapshot_id is None:
            return chain
        if offset.snapshot_id not in chain:
            scan.require_snapshot(self.table, offset.snapshot_id, "the last snapshot this query read")
            raise self._not_ancestor(offset.snapshot_id, "which this query read last")
        return chain[chain.index(offset.snapshot_id) :]

    def _not_ancestor(self, snapshot_id: int, what: str) -> SnapshotExpiredError:
        return SnapshotExpiredError(
            f"{self.spec.source.table}: snapshot {snapshot_id}, {what}, is no longer an ancestor of the "
            "current snapshot (the table was rolled back, or snapshots in between expired); reading on would "
            "skip or repeat data: restart from a fresh checkpoint with an explicit starting position"
        )

    def _rewrite(self, snapshot_id: int) -> bool:
        snap = scan.require_snapshot(self.table, snapshot_id, "a snapshot this query reads")
        return snap.summary is not None and snap.summary.operation.value == "replace"

    def _readable(self, snapshot_id: int) -> bool:
        """Whether a snapshot adds data to read; non-appends are skipped or fail per config."""
        snap = scan.require_snapshot(self.table, snapshot_id, "a snapshot this query reads")
        op = snap.summary.operation.value if snap.summary else "append"
        if op == "append":
            return True
        if op == "replace":
            log.info("%s: snapshot %s rewrites files (replace): no new data", self.spec.name, snapshot_id)
            return False
        if self.spec.source.on_non_append == "skip":
            log.warning("%s: skipping %s snapshot %s (onNonAppend: skip)", self.spec.name, op, snapshot_id)
            trace(self.spec.trace_path, "skip", source=self.spec.name, snapshot_id=str(snapshot_id), operation=op)
            return False
        raise NonAppendSnapshotError(
            f"{self.spec.source.table}: snapshot {snapshot_id} is a {op}; a live source reads appends only. "
            f"Set sources.{self.spec.name}.onNonAppend: skip to log and skip such snapshots"
        )

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        off = LiveOffset.from_dict(start)
        self.refresh()
        chain = self._chain_after(off)
        limits = self.limits(limit)
        max_snapshots = self.spec.source.read_limit.max_snapshots
        used_files = used_rows = used_bytes = 0
        started = 0 if off.complete else 1  # a snapshot this batch continues counts as one
        current = off
        admitted: list[list[Any]] = []
        for sid in chain:
            if current.snapshot_id == sid and current.complete:
                continue
            if current.snapshot_id != sid:
                # a compaction's replace is passed over without counting: no empty batch for it
                rewrite = self._rewrite(sid)
                if max_snapshots is not None and started >= max_snapshots and not rewrite:
                    break
                started += 0 if rewrite else 1
                if not self._readable(sid):
                    current = LiveOffset(sid, 0, True)
                    continue
                current = LiveOffset(sid, 0, False)
            splits = self.splits_of(sid)
            remaining = Limits(
                max_files=None if limits.max_files is None else limits.max_files - used_files,
                max_rows=None if limits.max_rows is None else limits.max_rows - used_rows,
                max_bytes=None if limits.max_bytes is None else limits.max_bytes - used_bytes,
            )
            if (used_files or used_rows or used_bytes) and any(
                v is not None and v <= 0 for v in (remaining.max_files, remaining.max_rows, remaining.max_bytes)
            ):
                break
            decision = admit(splits, current.position, None, remaining, at_least_one=not admitted)
            taken = splits[decision.start : decision.end]
            used_files += sum(s.files for s in taken)
            used_rows += sum(s.rows for s in taken)
            used_bytes += sum(s.size_bytes for s in taken)
            admitted += [[str(sid), s.lower, s.upper, s.rows] for s in taken]
            current = LiveOffset(sid, decision.end, decision.end >= len(splits))
            if not current.complete:
                break
        if admitted or current != off:
            trace(
                self.spec.trace_path,
                "live",
                source=self.spec.name,
                start=start,
                end=current.to_dict(),
                admitted=admitted,
            )
        return current.to_dict()

    def task_splits(self, start: dict, end: dict) -> list[list[Split]]:
        s, e = LiveOffset.from_dict(start), LiveOffset.from_dict(end)
        if e.snapshot_id is None or s == e:
            return []
        chain = self._chain_upto(s, e)
        picked: list[Split] = []
        for sid in chain:
            snap = scan.require_snapshot(self.table, sid, "a snapshot of this batch")
            op = snap.summary.operation.value if snap.summary else "append"
            if op != "append":
                continue
            splits = self.splits_of(sid)
            lo = s.position if sid == s.snapshot_id else 0
            hi = e.position if sid == e.snapshot_id else len(splits)
            picked += splits[lo:hi]
        return self.packed(picked)

    def _chain_upto(self, s: LiveOffset, e: LiveOffset) -> list[int]:
        full = [snap.snapshot_id for snap in scan.history(self.table)]
        for off, what in ((e, "the end of this batch"), (s, "the start of this batch")):
            if off.snapshot_id is not None and off.snapshot_id not in full:
                scan.require_snapshot(self.table, off.snapshot_id, what)
                raise self._not_ancestor(off.snapshot_id, what)
        hi = full.index(e.snapshot_id)  # type: ignore[arg-type]
        if s.snapshot_id is None:
            return full[: hi + 1]
        chain = full[full.index(s.snapshot_id) : hi + 1]
        return chain[1:] if s.complete else chain
