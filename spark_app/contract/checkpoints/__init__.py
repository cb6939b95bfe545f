"""Checkpoint management for Spark Structured Streaming queries: catalog, externalized
snapshots, retention and restore (DESIGN: "Checkpoints and rewind").

Spark keeps ``offsets/N`` (before batch N), ``commits/N`` (after it) and state version N+1
per state store, and retains only about ``minBatchesToRetain`` (100) batches. It has no
"restart from batch N": the safe path is a fresh checkpoint location restored from a copy that
ends at batch N. So:

* ``catalog``: what a checkpoint holds (committed batches, commit time, watermark, source
  offsets with our Iceberg offsets decoded, loadable state versions);
* ``snapshots``: incremental, consistent copies to an external location (S3, HDFS, local),
  with manifests and retention;
* ``restore``: choose a snapshot (by time or batch) and materialize it elsewhere; the live
  checkpoint is only ever read.

All I/O goes through ``storage.Location`` (pyarrow.fs); the decisions (which files belong to
batch N, what to copy, what retention removes, which snapshot a rewind takes) are pure
functions tested without storage.

Resuming the *same* query id after a rewind repeats batch ids N+1, N+2, ... with new
contents. A sink that deduplicates on (query id, batch id), as ours does, must then know that
the earlier batches > N were undone, or it will skip the new ones; ``restore(query_id=...)``
forks a new id instead.
"""

from spark_app.contract.checkpoints.catalog import BatchInfo, SourceOffset, list_batches, query_id, read_batch
from spark_app.contract.checkpoints.errors import (
    CheckpointError,
    DestinationNotEmptyError,
    IncompleteCheckpointError,
    NoRestorablePointError,
    SnapshotDamagedError,
    TimelineConflictError,
)
from spark_app.contract.checkpoints.restore import choose, restore
from spark_app.contract.checkpoints.snapshots import (
    Manifest,
    apply_retention,
    collect_garbage,
    discard_after,
    externalize,
    list_snapshots,
)
from spark_app.contract.storage import Location, S3Options, open_location

__all__ = [
    "BatchInfo",
    "CheckpointError",
    "DestinationNotEmptyError",
    "IncompleteCheckpointError",
    "Location",
    "Manifest",
    "NoRestorablePointError",
    "S3Options",
    "SnapshotDamagedError",
    "SourceOffset",
    "TimelineConflictError",
    "apply_retention",
    "choose",
    "collect_garbage",
    "discard_after",
    "externalize",
    "list_batches",
    "list_snapshots",
    "open_location",
    "query_id",
    "read_batch",
    "restore",
]
