"""When each data file of an Iceberg table was part of the table: the validity intervals that
turn a table's snapshot history into versions of its rows. Pure.

A row of an ordinary (mutable, copy-on-write) dimension table is valid while the file holding
it is in the table: from the commit of the snapshot that added the file to the commit of the
one that removed it. Working per file, not per snapshot, reads each file of the history once:
a snapshot that changes one ad's price rewrites one file, and the other files keep their one
interval across it. A compaction (``replace``) ends one file's interval where another's with the
same rows begins, so a row is never valid twice at one instant.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spark_app.contract.errors import ConfigError


@dataclass(frozen=True)
class SnapshotFiles:
    """One snapshot of the branch's ancestry: when it was committed (ms since the epoch, as
    Iceberg records it) and the data files the table held after it."""

    snapshot_id: int
    committed_ms: int
    files: frozenset[str]


@dataclass(frozen=True)
class FileInterval:
    """``path`` was in the table from ``valid_from_ms`` (inclusive) to ``valid_to_ms``
    (exclusive; None: it still is)."""

    path: str
    valid_from_ms: int
    valid_to_ms: int | None


def file_intervals(history: Sequence[SnapshotFiles]) -> list[FileInterval]:
    """The intervals of every file ever in ``history`` (oldest snapshot first).

    A file removed and later added again (a rollback replayed as new snapshots) gets two
    intervals. Commit times that go backwards (clock skew between writers) are refused: an
    interval would end before it begins, and which version was valid would be undefined."""
    for before, after in itertools.pairwise(history):
        if after.committed_ms < before.committed_ms:
            raise ConfigError(
                f"snapshot {after.snapshot_id} was committed at {after.committed_ms} ms, before its parent "
                f"{before.snapshot_id} ({before.committed_ms} ms): the history's commit times go backwards, so "
                "the versions they bound would overlap; declare an effective-time column instead"
            )
    opened: dict[str, int] = {}
    out: list[FileInterval] = []
    previous: frozenset[str] = frozenset()
    for snap in history:
        for path in sorted(previous - snap.files):
            start = opened.pop(path)
            if start < snap.committed_ms:  # a file added and removed within one ms was never visible
                out.append(FileInterval(path, start, snap.committed_ms))
        for path in sorted(snap.files - previous):
            opened[path] = snap.committed_ms
        previous = snap.files
    out.extend(FileInterval(path, start, None) for path, start in sorted(opened.items()))
    return sorted(out, key=lambda i: (i.valid_from_ms, i.path))


def history_start_ms(history: Iterable[SnapshotFiles]) -> int | None:
    """Since when the kept history knows the table: the oldest kept snapshot's commit. Snapshot
    expiry moves it forward; a fact older than it has no known version."""
    return min((s.committed_ms for s in history), default=None)
