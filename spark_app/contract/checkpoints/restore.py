"""Restore: materialize a snapshot into a fresh checkpoint location that Spark resumes from
at exactly the snapshot's next batch.

Spark restarts from the newest ``offsets/N`` and ``commits/N``: with both present it plans
batch N+1 from ``offsets/N`` and loads state version N+1. A restored location holds exactly the
snapshot's files, so that is where it resumes. Restore only ever creates files in its destination:
the live checkpoint is never written to, and a destination holding anything else is refused.

Files are written in an order that never looks like a committed batch before it is one: state,
sources and offsets first, then ``metadata``, then the commit log, ``commits/N`` last. An
interrupted restore is completed by running it again (files already there with their size are
kept).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime

from spark_app.contract.checkpoints import layout
from spark_app.contract.checkpoints.errors import (
    CheckpointError,
    DestinationNotEmptyError,
    NoRestorablePointError,
    SnapshotDamagedError,
)
from spark_app.contract.checkpoints.snapshots import POOL, Manifest, missing_objects
from spark_app.contract.storage import FileStat, Location, copy_many

log = logging.getLogger("kappa.checkpoints")


def _describe(m: Manifest) -> str:
    return f"batch {m.batch_id} committed at {m.committed_at.isoformat()}"


def choose(snapshots: list[Manifest], time: datetime | None = None, batch_id: int | None = None) -> Manifest:
    """The snapshot to restore: the newest committed strictly before ``time``, or the newest at
    or before ``batch_id``, or (neither given) the newest."""
    if time is not None and batch_id is not None:
        raise ValueError("give a time or a batch id, not both")
    ordered = sorted(snapshots, key=lambda m: m.batch_id)
    if not ordered:
        raise NoRestorablePointError("there is no restorable snapshot: externalize checkpoints before a rewind")
    if time is not None:
        if time.tzinfo is None:
            raise ValueError("time must be timezone-aware (UTC)")
        found = [m for m in ordered if m.committed_at < time]
        wanted = f"committed before {time.isoformat()}"
    elif batch_id is not None:
        found = [m for m in ordered if m.batch_id <= batch_id]
        wanted = f"at or before batch {batch_id}"
    else:
        return ordered[-1]
    if not found:
        raise NoRestorablePointError(
            f"no snapshot {wanted}: the earliest restorable point is {_describe(ordered[0])} "
            f"({len(ordered)} snapshot(s) retained)"
        )
    return max(found, key=lambda m: m.batch_id)


def restore_order(manifest: Manifest) -> list[list[str]]:
    """Groups of files to copy one group after the other (each group in parallel)."""
    commits = sorted(
        (r for r in manifest.files if r.startswith(layout.COMMITS + "/")), key=lambda r: int(r.split("/")[1])
    )
    rest = sorted(r for r in manifest.files if r != layout.METADATA and r not in commits)
    groups = [rest, [layout.METADATA] if layout.METADATA in manifest.files else [], commits[:-1], commits[-1:]]
    return [g for g in groups if g]


def copies_left(manifest: Manifest, existing: Mapping[str, FileStat]) -> list[list[str]]:
    """What is left to copy into a destination holding ``existing``. Raises DestinationNotEmptyError when
    the destination holds a file that is not this snapshot's (or has another size): only an empty
    destination, or one a restore of this very snapshot was interrupted in, is written to."""
    foreign = sorted(rel for rel, st in existing.items() if rel not in manifest.files or manifest.files[rel] != st.size)
    if foreign:
        raise DestinationNotEmptyError(
            f"the restore destination holds {len(foreign)} file(s) that are not part of the snapshot of batch "
            f"{manifest.batch_id} (e.g. {foreign[0]}): restore into a fresh, empty location; the live "
            "checkpoint is never written to"
        )
    return [[r for r in group if r not in existing] for group in restore_order(manifest)]


def restore(
    external: Location, manifest: Manifest, destination: Location, query_id: str | None = None, parallelism: int = 8
) -> None:
    """Copy ``manifest``'s files from ``external`` into ``destination`` (empty or absent).

    ``query_id`` gives the restored query a new id (``metadata``): a fork rather than the same
    query resumed. Leave it None to resume the same query, which is what Spark itself does on
    a restart; a sink that deduplicates on (query id, batch id) must then treat the batches
    after N as undone (see the package docs)."""
    if destination.uri.rstrip("/") == manifest.source.rstrip("/"):
        raise CheckpointError(
            f"{destination.uri} is the live checkpoint the snapshot was taken from: restore elsewhere"
        )
    existing = {r: st for r, st in destination.list_files(hidden=True).items() if not r.endswith(".tmp")}
    metadata = None if query_id is None else json.dumps({"id": query_id}, separators=(",", ":")).encode()
    expected = manifest
    if metadata is not None:
        expected = manifest.model_copy(update={"files": {**manifest.files, layout.METADATA: len(metadata)}})
    groups = copies_left(expected, existing)
    pool = external.list_files(POOL)
    missing = missing_objects(manifest, pool)
    if missing:
        raise SnapshotDamagedError(
            f"snapshot of batch {manifest.batch_id} at {external.uri} misses {len(missing)} file(s), e.g. "
            f"{missing[0]}: choose another snapshot"
        )
    copied = 0
    for group in groups:
        pairs = [(manifest.objects[r], r, manifest.files[r]) for r in group]
        if metadata is not None and layout.METADATA in group:
            pairs = [p for p in pairs if p[1] != layout.METADATA]
            destination.write_bytes(layout.METADATA, metadata)
        result = copy_many(external, destination, pairs, parallelism)
        if result.changed:
            rel = next(iter(result.changed))
            raise SnapshotDamagedError(f"pool object {rel} changed during the restore: {result.changed[rel]}")
        copied += result.bytes
    log.info("restored batch %d into %s (%d bytes)", manifest.batch_id, destination.uri, copied)
