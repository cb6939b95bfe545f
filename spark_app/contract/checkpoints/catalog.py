"""The catalog of a query's checkpoint: its committed batches with commit time, watermark,
source offsets (ours decoded into Iceberg snapshot and position) and loadable state versions.

What a rewind is chosen from, so it reads only what Spark committed: a batch whose
``commits/N`` is missing is still running (or failed) and is not listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spark_app.contract.checkpoints import layout
from spark_app.contract.checkpoints.errors import CheckpointError
from spark_app.contract.errors import KappaError
from spark_app.contract.offsets import BackfillOffset, LiveOffset
from spark_app.contract.storage import FileStat, Location


class CatalogModel(BaseModel):
    """Frozen data; unknown fields ignored so older code reads newer manifests."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class SourceOffset(CatalogModel):
    source: str
    """Spark's name for the source: its index ("0", "1", ...) or, in a v2 offset log, its name."""
    raw: str | None
    """The offset JSON exactly as Spark stored it; None when the source had no offset yet."""
    kind: Literal["live", "backfill"] | None = None
    """Set when it is one of our Iceberg offsets."""
    snapshot_id: int | None = None
    """Iceberg: the snapshot being read (live) or planned (backfill)."""
    position: int | None = None
    """Iceberg: splits of that snapshot (or of the backfill plan) already admitted."""
    complete: bool | None = None
    """Iceberg live: all of ``snapshot_id`` was admitted."""


class BatchInfo(CatalogModel):
    batch_id: int
    committed_at: datetime
    """When ``commits/N`` was written (UTC): a rewind "to before T" picks batches by this."""
    watermark_ms: int | None
    """``batchWatermarkMs``: the event-time watermark the batch ran with (0: none yet)."""
    next_watermark_ms: int | None = None
    """``nextBatchWatermarkMs``: the watermark after the batch, which a resume starts with."""
    batch_timestamp_ms: int | None = None
    """When the batch was planned (Spark's processing time for it)."""
    sources: list[SourceOffset]
    """The end offsets of the batch, per source: a resume reads from here."""
    state_versions: dict[str, list[int]] = {}
    """Per stateful operator id: state versions (<= N+1) every partition can load."""

    def state_restorable(self) -> bool:
        """Whether the state after this batch (version N+1) is loadable for every operator."""
        return all(self.batch_id + 1 in versions for versions in self.state_versions.values())


def decode_offset(source: str, raw: str | None) -> SourceOffset:
    """Keep Spark's JSON; add snapshot and position when it is one of our Iceberg offsets."""
    if raw is None:
        return SourceOffset(source=source, raw=None)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return SourceOffset(source=source, raw=raw)
    if not isinstance(data, dict) or data.get("kind") not in ("live", "backfill"):
        return SourceOffset(source=source, raw=raw)
    try:
        if data["kind"] == "live":
            live = LiveOffset.from_dict(data)
            return SourceOffset(
                source=source,
                raw=raw,
                kind="live",
                snapshot_id=live.snapshot_id,
                position=live.position,
                complete=live.complete,
            )
        bf = BackfillOffset.from_dict(data)
        return SourceOffset(source=source, raw=raw, kind="backfill", snapshot_id=bf.snapshot_id, position=bf.position)
    except (KappaError, KeyError, ValueError, TypeError):
        return SourceOffset(source=source, raw=raw)  # looks like ours but another version: keep it raw


def batch_info(
    batch_id: int,
    offsets_text: str,
    commit_text: str,
    committed_at: datetime,
    state_versions: Mapping[str, list[int]] | None = None,
) -> BatchInfo:
    entry = layout.parse_offsets(offsets_text)
    return BatchInfo(
        batch_id=batch_id,
        committed_at=committed_at,
        watermark_ms=entry.watermark_ms,
        next_watermark_ms=layout.parse_commit(commit_text),
        batch_timestamp_ms=entry.timestamp_ms,
        sources=[decode_offset(name, raw) for name, raw in entry.sources],
        state_versions={op: [v for v in vs if v <= batch_id + 1] for op, vs in (state_versions or {}).items()},
    )


def _committed_at(stat: FileStat | None, fallback_ms: int | None) -> datetime:
    if stat is not None and stat.mtime_ns is not None:
        return datetime.fromtimestamp(stat.mtime_ns / 1e9, UTC)
    return datetime.fromtimestamp((fallback_ms or 0) / 1000, UTC)


def read_batch(loc: Location, batch_id: int, listing: Mapping[str, FileStat] | None = None) -> BatchInfo:
    """One committed batch; ``listing`` (of ``loc``) saves a listing when the caller has one."""
    listing = loc.list_files() if listing is None else listing
    return _read(loc, batch_id, listing, layout.operator_versions(listing))


def list_batches(loc: Location) -> list[BatchInfo]:
    """Every committed batch Spark still retains (about minBatchesToRetain), oldest first."""
    listing = loc.list_files()
    versions = layout.operator_versions(listing)
    return [_read(loc, b, listing, versions) for b in layout.committed_batches(listing)]


def _read(loc: Location, batch_id: int, listing: Mapping[str, FileStat], versions: dict[str, list[int]]) -> BatchInfo:
    offsets = loc.read_bytes(f"{layout.OFFSETS}/{batch_id}").decode()
    commit = loc.read_bytes(f"{layout.COMMITS}/{batch_id}").decode()
    fallback = layout.parse_offsets(offsets).timestamp_ms
    committed_at = _committed_at(listing.get(f"{layout.COMMITS}/{batch_id}"), fallback)
    return batch_info(batch_id, offsets, commit, committed_at, versions)


def query_id(loc: Location) -> str:
    """The query's id from ``metadata``: stable across restarts, tags every sink commit."""
    try:
        text = loc.read_bytes(layout.METADATA).decode()
    except FileNotFoundError:
        raise CheckpointError(f"{loc.uri} has no metadata file: not a streaming checkpoint (or not started)") from None
    return str(json.loads(text.splitlines()[0])["id"])
