"""Snapshot expiry: keep a sink table's history, and so the cost of every commit, bounded.

A pyiceberg commit reads and rewrites the table's whole metadata, so its cost grows with the
snapshots kept (~0.5 ms each, ``bench/commit_growth.py``): a live job committing every 10 s
would pay seconds per commit after a day. The sink's driver expires old snapshots every few
batches, on the Spark side, as one metadata-only commit (no data file is deleted: a file an
expired snapshot referenced is either still live or an orphan for Iceberg's orphan cleanup).

What must not be lost, and why expiry is safe for it:

* a rewind's undo of batches after a retained restore point, and the replay check of a
  restarted query, find a batch's files by their batch tags (``batch_tags``), not by its
  snapshot: expiry never takes what a retained restore point needs to undo;
* branch and tag heads (a backfill branch, a reader's pinned tag) are never expired;
* a downstream live reader follows the table snapshot by snapshot: ``min_age`` is how far
  behind it may fall (or stay stopped) and still read on; beyond that its source refuses
  with a clear error instead of skipping data (``scan.require_snapshot``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger("kappa.sink.history")


def expired_before(oldest: Snapshot) -> bool:
    """Whether snapshots older than ``oldest`` (the first retained one of a history) were
    expired. pyiceberg drops the parent id of the oldest survivor, so the sequence number
    tells: the first snapshot a format-2 table ever had is number 1 (format 1 has none: 0)."""
    return oldest.parent_snapshot_id is not None or (oldest.sequence_number or 0) > 1


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    timestamp_ms: int


def expirable(
    snapshots: Iterable[SnapshotInfo],
    protected: set[int],
    keep_last: int,
    min_age: timedelta,
    now: datetime,
) -> list[int]:
    """Snapshots to expire, oldest first: beyond the newest ``keep_last``, older than
    ``min_age``, and not a branch or tag head."""
    ordered = sorted(snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id))
    cutoff_ms = int((now - min_age).timestamp() * 1000)
    old = ordered[: max(len(ordered) - max(keep_last, 1), 0)]
    return [s.snapshot_id for s in old if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected]


def heads(table: Table) -> set[int]:
    return {
        ref.snapshot_id
        for ref in table.metadata.refs.values()
        if ref.snapshot_ref_type in (SnapshotRefType.BRANCH, SnapshotRefType.TAG)
    }


@dataclass(frozen=True)
class Expired:
    snapshots: int
    kept: int


def expire(
    load: Callable[[], Table],
    keep_last: int,
    min_age: timedelta,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Expired | None:
    """Expire what ``expirable`` says, once. Maintenance, not correctness: a conflict with
    another writer is left to the next round (None), never retried against the batch's time."""
    table = load()
    infos = [SnapshotInfo(s.snapshot_id, s.timestamp_ms) for s in table.snapshots()]
    doomed = expirable(infos, heads(table), keep_last, min_age, now())
    if not doomed:
        return Expired(0, len(infos))
    try:
        table.maintenance.expire_snapshots().by_ids(doomed).commit()
    except (CommitFailedException, ValidationException) as exc:
        log.info("%s: snapshot expiry conflicted with another writer (%s); next round", table.name(), exc)
        return None
    return Expired(len(doomed), len(infos) - len(doomed))
