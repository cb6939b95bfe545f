"""Driver side of the sink: one Iceberg snapshot per micro-batch, exactly once.

Every snapshot carries the writing query's id and the batch id. Spark replays a batch whose
commit it did not log (a crash after our commit, before Spark's): finding that batch already
in the branch's history, the sink skips it. A conflicting commit by another writer is retried
on the refreshed table; each attempt re-checks the history first, so a commit whose outcome
was unknown is never applied twice.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from spark_app.sinks.iceberg import batch_tags, history

log = logging.getLogger("kappa.sink")

QUERY_ID = "kappa.query-id"
UNDO_QUERY_ID = "kappa.undo-query-id"
UNDO_AFTER_BATCH = "kappa.undo-after-batch"
BATCH_ID = "kappa.batch-id"
JOB = "kappa.job"


class CommitConflictError(Exception):
    """Commit conflicts outlasted the configured retries."""


def branch_history(table: Table, branch: str) -> Iterator[Snapshot]:
    """Snapshots of ``branch``, newest first (nothing when the branch does not exist yet)."""
    head = table.snapshot_by_name(branch)
    return ancestors_of(head, table.metadata) if head is not None else iter(())


def batch_of(snapshot: Snapshot, query_id: str) -> int | None:
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    if props.get(QUERY_ID) != query_id or BATCH_ID not in props:
        return None
    return int(props[BATCH_ID])


def undone_after(snapshot: Snapshot, query_id: str) -> int | None:
    """The batch after which an undo of ``query_id`` removed everything (None: not such an undo)."""
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    if props.get(UNDO_QUERY_ID) != query_id or UNDO_AFTER_BATCH not in props:
        return None
    return int(props[UNDO_AFTER_BATCH])


@dataclass(frozen=True)
class Committed:
    """A batch already in the branch."""

    snapshot_id: int | None
    """The snapshot that committed it; None when that snapshot was expired since (the batch's
    files are still live, found by their tags)."""


def find_batch(table: Table, branch: str, query_id: str, batch_id: int) -> Committed | None:
    """Whether this batch is already committed. Batches commit in order, so the walk stops at
    the query's first older batch: O(1) for the usual case. It also stops at an undo of the
    query to before this batch: a rewound query runs those batch ids again, with new contents,
    and they must not be skipped as replays. When the walk runs off the end of an expired
    history undecided, the live files' batch tags decide (one read of the branch's manifests)."""
    oldest: Snapshot | None = None
    for snap in branch_history(table, branch):
        oldest = snap
        cut = undone_after(snap, query_id)
        if cut is not None and cut < batch_id:
            return None
        written = batch_of(snap, query_id)
        if written is None:
            continue
        if written == batch_id:
            return Committed(snap.snapshot_id)
        if written < batch_id:
            return None
    if oldest is None or not history.expired_before(oldest):
        return None  # the whole history was walked
    if batch_tags.batch_is_live(table, branch, query_id, batch_id):
        log.info("%s@%s: batch %d of %s found by its files (expired)", table.name(), branch, batch_id, query_id)
        return Committed(None)
    return None


def backoff(attempt: int) -> None:
    """Exponential, jittered: writers that conflicted once should not collide again."""
    time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))


def try_commit(tx: Transaction, branch: str, attempt: int, retries: int, what: str) -> int | None:
    """Commit ``tx``; the new head of ``branch``, or None after a conflict with another writer
    (the caller plans again on the refreshed table). Raises once ``retries`` are spent."""
    try:
        committed = tx.commit_transaction()
    except (CommitFailedException, ValidationException) as exc:
        if attempt > retries:
            raise CommitConflictError(
                f"{what} still conflicts after {retries} retries ({exc}); raise commitRetries"
            ) from exc
        log.info("commit conflict: %s (attempt %d), retrying", what, attempt)
        backoff(attempt)
        return None
    head = committed.snapshot_by_name(branch)
    assert head is not None
    return head.snapshot_id


@dataclass(frozen=True)
class CommitOutcome:
    snapshot_id: int | None
    attempts: int
    skipped: bool
    """True when the batch was already committed (a replay): nothing was added."""


def data_files(table: Table, paths: list[str]) -> list[DataFile]:
    """Footers only: stats and the (single) partition of each file."""
    return [parquet_file_to_data_file(table.io, table.metadata, p) for p in paths]


def commit_batch(
    load: Callable[[], Table],
    branch: str,
    files: list[DataFile],
    properties: dict[str, str],
    retries: int,
    table_properties: dict[str, str] | None = None,
) -> CommitOutcome:
    """Append ``files`` as one snapshot on ``branch`` unless the batch is already there.
    ``table_properties`` the files need (a name mapping) are set in the same commit where the
    table does not have them yet."""
    query_id, batch_id = properties[QUERY_ID], int(properties[BATCH_ID])
    for attempt in range(1, retries + 2):
        table = load()
        done = find_batch(table, branch, query_id, batch_id)
        if done is not None:
            return CommitOutcome(done.snapshot_id, attempt, skipped=True)
        tx = table.transaction()
        missing = {k: v for k, v in (table_properties or {}).items() if k not in table.metadata.properties}
        if missing:
            tx.set_properties(missing)
        # merge_append: on a table with commit.manifest-merge.enabled (the sink creates its
        # tables so), manifests merge once ~100 accumulate and the manifest list each commit
        # rewrites stays bounded; otherwise it is a fast_append, one more manifest per batch.
        with tx.update_snapshot(snapshot_properties=properties, branch=branch).merge_append() as append:
            for f in files:
                append.append_data_file(f)
        snapshot_id = try_commit(tx, branch, attempt, retries, f"{table.name()}@{branch} batch {batch_id}")
        if snapshot_id is not None:
            return CommitOutcome(snapshot_id, attempt, skipped=False)
    raise AssertionError("unreachable")
