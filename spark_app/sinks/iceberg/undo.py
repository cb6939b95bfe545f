"""Undo a query's batches after N (for rewind): remove exactly the data files those batches
added from the branch's *current* state, in a new snapshot.

History is not rewritten (no rollback): another writer may have committed since, and its
rows stay. The sink writes each batch into files of its own, so removing a batch's files
removes exactly its rows. They are found two ways: from the batches' snapshots while those
are retained, and from the batch tag in every live file's name, which outlives snapshot
expiry (``batch_tags``). A file a retained snapshot added that is no longer live (a publish
or compaction rewrote it) cannot be removed by reference: it is reported, never silently
ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.manifest import DataFile, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from spark_app.contract.errors import KappaError
from spark_app.sinks.iceberg import batch_tags
from spark_app.sinks.iceberg.commit import UNDO_AFTER_BATCH, UNDO_QUERY_ID, batch_of, branch_history, try_commit

log = logging.getLogger("kappa.undo")


class UndoIncompleteError(KappaError):
    """Some files the batches wrote are no longer live (rewritten since): undo would be partial."""


@dataclass(frozen=True)
class WrittenBatch:
    batch_id: int
    snapshot_id: int
    paths: tuple[str, ...]


def added_files(table: Table, snapshot: Snapshot) -> list[str]:
    paths = []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id:
                paths.append(entry.data_file.file_path)
    return paths


def batches_after(table: Table, branch: str, query_id: str, after_batch: int) -> list[WrittenBatch]:
    """Snapshots ``query_id`` committed on ``branch`` for batches > ``after_batch``, oldest first."""
    out = []
    for snap in branch_history(table, branch):
        batch = batch_of(snap, query_id)
        if batch is not None and batch > after_batch:
            out.append(WrittenBatch(batch, snap.snapshot_id, tuple(added_files(table, snap))))
    return out[::-1]


def undone_files(table: Table, branch: str, query_id: str) -> set[str]:
    """Files earlier undos of this query removed (so undo is idempotent)."""
    out: set[str] = set()
    for snap in branch_history(table, branch):
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(UNDO_QUERY_ID) != query_id:
            continue
        for manifest in snap.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.status == ManifestEntryStatus.DELETED and entry.snapshot_id == snap.snapshot_id:
                    out.add(entry.data_file.file_path)
    return out


def live_files(table: Table, branch: str) -> dict[str, DataFile]:
    return {f.file_path: f for f in batch_tags.live_files(table, branch)}


@dataclass(frozen=True)
class UndoResult:
    batches: tuple[int, ...]
    files_removed: int
    rows_removed: int
    snapshot_id: int | None
    """The snapshot that removed them (None: nothing was written after the batch)."""


def undo(
    load: Callable[[], Table],
    branch: str,
    query_id: str,
    after_batch: int,
    retries: int = 20,
) -> UndoResult:
    for attempt in range(1, retries + 2):
        table = load()
        written = batches_after(table, branch, query_id, after_batch)
        live = live_files(table, branch)
        undone = undone_files(table, branch, query_id)
        wanted = [p for b in written for p in b.paths if p not in undone]
        gone = [p for p in wanted if p not in live]
        # Batches whose snapshots were expired: their files still name them.
        seen = set(wanted)
        tagged = {p: t for p in live if p not in seen and (t := batch_tags.parse(p)) and t.query == query_id}
        split = [p for p, t in tagged.items() if t.first <= after_batch < t.last]
        if split:
            raise UndoIncompleteError(
                f"{table.name()}: compaction merged batches on both sides of {after_batch} of query {query_id} "
                f"into one file ({split[0]}); its rows cannot be split by file. Nothing was changed. Keep "
                "compaction.protectBatches at least as long as the rewinds you need (checkpoint retention)"
            )
        wanted += [p for p, t in tagged.items() if t.first > after_batch]
        if gone:
            raise UndoIncompleteError(
                f"{table.name()}: {len(gone)} file(s) written by batches > {after_batch} of query {query_id} "
                f"are no longer live on {branch!r} (rewritten by a publish or compaction since), e.g. {gone[0]}; "
                "their rows cannot be removed by reference. Nothing was changed"
            )
        if not wanted:
            return UndoResult((), 0, 0, None)
        files = [live[p] for p in wanted]
        props = {UNDO_QUERY_ID: query_id, UNDO_AFTER_BATCH: str(after_batch)}
        tx = table.transaction()
        with tx.update_snapshot(snapshot_properties=props, branch=branch).overwrite() as overwrite:
            for f in files:
                overwrite.delete_data_file(f)
        snapshot_id = try_commit(tx, branch, attempt, retries, f"undo on {table.name()}@{branch}")
        if snapshot_id is None:
            continue
        rows = sum(f.record_count for f in files)
        log.info("undid batches > %d of %s on %s: -%d rows", after_batch, query_id, branch, rows)
        batches = tuple(
            sorted(
                {b.batch_id for b in written if any(p in live for p in b.paths)}
                | {b for p in wanted if p in tagged for b in range(tagged[p].first, tagged[p].last + 1)}
            )
        )
        return UndoResult(batches, len(files), rows, snapshot_id)
    raise AssertionError("unreachable")


def earlier_undo(table: Table, branch: str, query_id: str, after_batch: int) -> UndoResult | None:
    """What an earlier undo of the same cut did (a restore run again after it finished): read
    from its snapshot's summary, so the second run reports the first run's removal."""
    for snap in branch_history(table, branch):
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(UNDO_QUERY_ID) == query_id and props.get(UNDO_AFTER_BATCH) == str(after_batch):
            files = int(props.get("deleted-data-files", "0"))
            rows = int(props.get("deleted-records", "0"))
            return UndoResult((), files, rows, snap.snapshot_id)
    return None
