"""Externalized snapshots: restorable copies of a query's checkpoint up to a committed batch.

Spark retains only about ``minBatchesToRetain`` batches and offers no "restart from batch N";
a rewind restores a copy into a fresh location instead. The copies live in one external
location::

    <external>/files/<relative path>@<size>-<mtime ns>   a pool of immutable checkpoint files
    <external>/snapshots/<batch id, 20 digits>.json      one manifest per snapshot

* Incremental: a pool object is named after the file's path, size and modification time, so a
  file already copied is found by name and never copied again, while a file Spark rewrote (the
  query's ``metadata`` or an operator's ``_metadata`` after a restart, or the same path in a
  restored checkpoint after a rewind) gets an object of its own instead of overwriting one an
  older snapshot references.
* Consistent: only a committed batch N is copied, with nothing Spark wrote for a later one
  (:func:`layout.select_files`), so a copy taken while the query runs is restorable. The
  manifest is written last and atomically: its presence means every file it lists is there.
  A crash mid-copy leaves unreferenced pool objects only; the next externalize reuses them.
* Retention deletes manifests first, oldest first, never the newest restorable one, then
  garbage-collects pool objects no remaining manifest references. A crash in between leaves
  unreferenced objects, never a snapshot with files missing.

Externalize, retention and discard on one external location must not run concurrently (the
operator runs them from one place per job): a garbage collection between an externalize's
pool listing and its manifest could remove an object the new manifest is about to reference.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from spark_app.contract.checkpoints import layout
from spark_app.contract.checkpoints.catalog import BatchInfo, CatalogModel, query_id, read_batch
from spark_app.contract.checkpoints.errors import (
    CheckpointError,
    IncompleteCheckpointError,
    TimelineConflictError,
)
from spark_app.contract.storage import FileStat, Location, copy_many

log = logging.getLogger("kappa.checkpoints")

POOL = "files"
SNAPSHOTS = "snapshots"
MANIFEST_FORMAT = 1


class Manifest(CatalogModel):
    """One restorable snapshot: the files of a checkpoint as of committed batch ``batch_id``."""

    format: int = MANIFEST_FORMAT
    batch_id: int
    """The last batch in the snapshot: a restore resumes at ``batch_id + 1``."""
    query_id: str
    """The query whose checkpoint this is (its sink commits carry this id)."""
    source: str
    """The live checkpoint the snapshot was copied from."""
    taken_at: datetime
    committed_at: datetime
    """When Spark committed ``batch_id``: what a rewind "to before T" compares."""
    watermark_ms: int | None
    """The event-time watermark batch ``batch_id`` ran with."""
    files: dict[str, int]
    """Checkpoint-relative path -> size."""
    objects: dict[str, str]
    """Checkpoint-relative path -> pool object (relative to the external location)."""
    total_bytes: int
    copied_files: int
    """Files this snapshot had to copy (the rest were in the pool already)."""
    copied_bytes: int
    batch: BatchInfo


# --- pure helpers --------------------------------------------------------------------------


def manifest_path(batch_id: int) -> str:
    return f"{SNAPSHOTS}/{batch_id:020d}.json"


def pool_key(rel: str, stat: FileStat) -> str:
    return f"{POOL}/{rel}@{stat.size}-{stat.mtime_ns or 0}"


def plan_copy(files: Mapping[str, FileStat], pool: Mapping[str, FileStat]) -> tuple[dict[str, str], list[str]]:
    """The pool object of every file, and the files whose object is not in the pool whole yet."""
    objects = {rel: pool_key(rel, st) for rel, st in files.items()}
    todo = [rel for rel, key in objects.items() if (have := pool.get(key)) is None or have.size != files[rel].size]
    return objects, sorted(todo)


def missing_objects(manifest: Manifest, pool: Mapping[str, FileStat]) -> list[str]:
    """Objects of ``manifest`` absent from ``pool`` or of another size (none: restorable)."""
    return sorted(
        key
        for rel, key in manifest.objects.items()
        if (have := pool.get(key)) is None or have.size != manifest.files.get(rel)
    )


def retention_plan(
    snapshots: Iterable[Manifest], keep_last: int, max_age: timedelta | None, now: datetime
) -> list[int]:
    """Batch ids to remove, oldest first. Both limits cap (as Flink's savepoint history does):
    a snapshot goes when more than ``keep_last`` are newer-or-equal, or when it was committed
    longer than ``max_age`` ago; the newest one always stays, whatever its age."""
    ordered = sorted(snapshots, key=lambda m: m.batch_id)
    keep_last = max(keep_last, 1)
    remove = []
    for i, m in enumerate(ordered[:-1]):
        too_many = i < len(ordered) - keep_last
        too_old = max_age is not None and m.committed_at < now - max_age
        if too_many or too_old:
            remove.append(m.batch_id)
    return remove


def unreferenced(pool: Iterable[str], manifests: Iterable[Manifest]) -> list[str]:
    referenced = {key for m in manifests for key in m.objects.values()}
    return sorted(k for k in pool if k not in referenced)


# --- I/O -------------------------------------------------------------------------------------


def read_manifests(external: Location) -> tuple[list[Manifest], list[str]]:
    """Every manifest that parses (by batch), and the paths of those that do not."""
    good, bad = [], []
    for rel in sorted(external.list_files(SNAPSHOTS)):
        if not rel.endswith(".json"):
            continue
        try:
            good.append(Manifest.model_validate_json(external.read_bytes(rel)))
        except (ValidationError, ValueError) as exc:
            log.warning("%s/%s is not a readable manifest: %s", external.uri, rel, exc)
            bad.append(rel)
    return sorted(good, key=lambda m: m.batch_id), bad


def list_snapshots(external: Location, verify: bool = True) -> list[Manifest]:
    """Restorable snapshots, oldest first: manifest present and parsed and (``verify``) every
    pool object it references there with its size. One listing of the pool, no reads of it."""
    manifests, _ = read_manifests(external)
    if not verify or not manifests:
        return manifests
    pool = external.list_files(POOL)
    out = []
    for m in manifests:
        missing = missing_objects(m, pool)
        if missing:
            log.warning("snapshot %d at %s misses %s, skipped", m.batch_id, external.uri, missing[0])
            continue
        out.append(m)
    return out


def _same_batch(live: Location, external: Location, existing: Manifest) -> bool:
    """Whether the externalized batch is the live one: offsets and commit entries byte-equal
    (batchTimestampMs makes offsets/N unique to one run of batch N)."""
    for rel in (f"{layout.OFFSETS}/{existing.batch_id}", f"{layout.COMMITS}/{existing.batch_id}"):
        key = existing.objects.get(rel)
        if key is None or live.read_bytes(rel) != external.read_bytes(key):
            return False
    return True


def _existing(external: Location, batch_id: int) -> Manifest | None:
    try:
        return Manifest.model_validate_json(external.read_bytes(manifest_path(batch_id)))
    except FileNotFoundError:
        return None


def externalize(
    live: Location,
    external: Location,
    batch_id: int | None = None,
    now: datetime | None = None,
    parallelism: int = 8,
) -> Manifest | None:
    """Copy the checkpoint as of committed batch ``batch_id`` (default: the newest) into
    ``external``. None when there is no committed batch yet, or that batch is externalized
    already (so calling it on a timer is idempotent). The live checkpoint is only read."""
    listing = live.list_files()
    committed = layout.committed_batches(listing)
    if not committed:
        return None
    n = committed[-1] if batch_id is None else batch_id
    selection = layout.select_files(listing, n)
    existing = _existing(external, n)
    if existing is not None:
        if _same_batch(live, external, existing):
            return None
        raise TimelineConflictError(
            f"{external.uri} already holds a snapshot of batch {n} with other offsets than {live.uri}: it was "
            f"taken on another timeline (before a rewind). Discard the snapshots after the rewind point "
            f"(discard_after) or use another external location"
        )
    info = read_batch(live, n, listing)
    pool = external.list_files(POOL)
    objects, todo = plan_copy(selection.files, pool)
    result = copy_many(live, external, [(rel, objects[rel], selection.files[rel].size) for rel in todo], parallelism)
    lost = sorted(set(result.changed) & selection.required)
    if lost:
        raise IncompleteCheckpointError(
            f"batch {n} of {live.uri}: {lost[0]} changed during the copy ({result.changed[lost[0]]}); "
            "nothing was recorded, try again (a later batch if Spark purged this one)"
        )
    files = {rel: st.size for rel, st in selection.files.items() if rel not in result.changed}
    manifest = Manifest(
        batch_id=n,
        query_id=query_id(live),
        source=live.uri,
        taken_at=now or datetime.now(UTC),
        committed_at=info.committed_at,
        watermark_ms=info.watermark_ms,
        files=files,
        objects={rel: objects[rel] for rel in files},
        total_bytes=sum(files.values()),
        copied_files=result.files,
        copied_bytes=result.bytes,
        batch=info,
    )
    external.write_bytes(manifest_path(n), manifest.model_dump_json(indent=1).encode())
    log.info(
        "externalized batch %d of %s: %d files, %d bytes (%d files, %d bytes copied)",
        n, live.uri, len(files), manifest.total_bytes, result.files, result.bytes,
    )  # fmt: skip
    return manifest


def collect_garbage(external: Location) -> list[str]:
    """Remove pool objects (and temp files of crashed copies) no manifest references."""
    manifests, bad = read_manifests(external)
    if bad:
        raise CheckpointError(
            f"{external.uri}: {len(bad)} manifest(s) cannot be read (e.g. {bad[0]}); their files cannot be told "
            "apart from garbage, so nothing is collected. Remove or repair them"
        )
    garbage = unreferenced(external.list_files(POOL, hidden=True), manifests)
    for key in garbage:
        external.delete(key)
    if garbage:
        log.info("collected %d unreferenced pool objects at %s", len(garbage), external.uri)
    return garbage


def _remove(external: Location, batch_ids: list[int]) -> None:
    for b in batch_ids:
        external.delete(manifest_path(b))
    collect_garbage(external)


def apply_retention(
    external: Location, keep_last: int, max_age: timedelta | None = None, now: datetime | None = None
) -> list[int]:
    """Drop snapshots beyond ``keep_last`` or older than ``max_age``, never the newest
    restorable one nor one a request pinned (``checkpoints.requests``); returns the batch ids
    removed."""
    _, bad = read_manifests(external)
    if bad:
        raise CheckpointError(f"{external.uri}: unreadable manifest {bad[0]}; retention would not know its files")
    from spark_app.contract.snapshot_requests import pinned_batches  # a module that imports this one

    pinned = pinned_batches(external)
    kept = [m for m in list_snapshots(external) if m.batch_id not in pinned]
    remove = retention_plan(kept, keep_last, max_age, now or datetime.now(UTC))
    _remove(external, remove)
    return remove


def discard_after(external: Location, batch_id: int) -> list[int]:
    """Drop the snapshots of batches after ``batch_id``: after a rewind to it they describe an
    abandoned timeline (restoring one would bring back what the rewind removed)."""
    manifests, _ = read_manifests(external)
    remove = [m.batch_id for m in manifests if m.batch_id > batch_id]
    _remove(external, sorted(remove, reverse=True))
    return remove
