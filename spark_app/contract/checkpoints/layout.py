"""The layout of a Spark Structured Streaming checkpoint (Spark 4.3), as pure functions over a
listing, so "which files make batch N" is decided in one place and tested without Spark.

::

    metadata                          {"id": "<query id>"}, written once when the query is created
    offsets/<N>                       written *before* batch N runs: "v1" (or "v2"), the batch's
                                      metadata (batchWatermarkMs, batchTimestampMs, conf), then one
                                      line per source ("-": no offset; v2: "<name>:<offset>")
    commits/<N>                       written *after* batch N's sink write and state commit:
                                      "v1", {"nextBatchWatermarkMs": ...}
    sources/<i>/<N>[.compact]         per-source logs (file source: files seen; Kafka: start offsets)
    state/<op>/<part>/<V>.delta       HDFS state store; version V is the state *after* batch V-1.
    state/<op>/<part>/<V>.snapshot    Maintenance writes snapshots later, asynchronously, and
                                      deletes files older than minBatchesToRetain versions.
    state/<op>/<part>/<V>[_<id>].zip|.changelog, SSTs/...   the RocksDB state store
    state/<op>/[<part>/]_metadata/... operator metadata and state schema (v2: one file per batch)
    .<name>.crc, .<name>.<uuid>.tmp   Hadoop checksums (local FS only) and writes in flight

Batch N is committed once ``commits/N`` exists. Restarting from it needs ``metadata``,
``offsets/N`` and ``offsets/N-1`` (Spark re-reads both), ``commits/N`` and, per state store
instance, a chain of files that loads version N+1: the newest snapshot at or below it, then
every delta above that snapshot. Hidden files are never selected: Hadoop verifies a ``.crc``
only when one exists and writes fresh ones, so leaving them out loses nothing, and a stale
checksum can never be paired with a rewritten file.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_app.contract.checkpoints.errors import IncompleteCheckpointError
from spark_app.contract.storage import FileStat

METADATA = "metadata"
OFFSETS = "offsets"
COMMITS = "commits"
SOURCES = "sources"
STATE = "state"
PRODUCED = "kafka-produced"
"""A Kafka sink's log of the offsets each batch produced (``spark_app.sinks.kafka``): kept
with the batches it describes, so a restored checkpoint knows where its batch's output ends."""
VOID_OFFSET = "-"

_VERSIONED = re.compile(r"^(\d+)(?:_[0-9A-Za-z-]+)?\.(delta|snapshot|zip|changelog)$")
_SNAPSHOT_KINDS = frozenset({"snapshot", "zip"})
"""A full copy of one version (HDFS snapshot, RocksDB checkpoint zip)."""
_DELTA_KINDS = frozenset({"delta", "changelog"})
"""The changes from version V-1 to V."""
_SOURCE_LOG = re.compile(r"^(\d+)(\.compact)?$")
_BATCH_PREFIX = re.compile(r"^(\d+)(?:_|$)")
_META_DIRS = frozenset({"_metadata", "_stateSchema"})


# --- the logs ----------------------------------------------------------------------------


def log_batches(listing: Mapping[str, Any], log: str) -> list[int]:
    """Batch ids present in ``offsets`` or ``commits``, ascending."""
    out = []
    for rel in listing:
        top, _, name = rel.partition("/")
        if top == log and name.isdigit():
            out.append(int(name))
    return sorted(out)


def committed_batches(listing: Mapping[str, Any]) -> list[int]:
    """Batches with both an offsets and a commit entry: the ones a query can restart after."""
    offsets = set(log_batches(listing, OFFSETS))
    return [b for b in log_batches(listing, COMMITS) if b in offsets]


@dataclass(frozen=True)
class OffsetLogEntry:
    version: int
    watermark_ms: int | None
    """``batchWatermarkMs``: the event-time watermark the batch ran with."""
    timestamp_ms: int | None
    """``batchTimestampMs``: the batch's processing time (current_timestamp())."""
    sources: tuple[tuple[str, str | None], ...]
    """(source, offset JSON as stored or None) in Spark's order; v1 names sources by index."""


def parse_offsets(text: str) -> OffsetLogEntry:
    lines = text.split("\n")
    head = lines[0].strip()
    if not re.fullmatch(r"v\d+", head):
        raise ValueError(f"not an offset log entry (first line {head!r})")
    version = int(head[1:])
    meta: dict[str, Any] = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    sources: list[tuple[str, str | None]] = []
    for i, line in enumerate(x for x in lines[2:] if x.strip()):
        name, raw = line.split(":", 1) if version >= 2 else (str(i), line)
        raw = raw.strip()
        sources.append((name, None if raw == VOID_OFFSET else raw))
    wm, ts = meta.get("batchWatermarkMs"), meta.get("batchTimestampMs")
    return OffsetLogEntry(version, None if wm is None else int(wm), None if ts is None else int(ts), tuple(sources))


def parse_commit(text: str) -> int | None:
    """``nextBatchWatermarkMs`` of a commit log entry: the watermark the next batch starts with."""
    lines = text.split("\n")
    if not re.fullmatch(r"v\d+", lines[0].strip()):
        raise ValueError(f"not a commit log entry (first line {lines[0]!r})")
    meta = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    wm = meta.get("nextBatchWatermarkMs")
    return None if wm is None else int(wm)


# --- state stores ------------------------------------------------------------------------


@dataclass(frozen=True)
class StateFile:
    store: str
    """The directory of one state store instance (operator, partition, store name)."""
    version: int
    kind: str


def state_file(rel: str) -> StateFile | None:
    """A versioned state store file (delta, snapshot, RocksDB zip or changelog), else None."""
    if not rel.startswith(STATE + "/"):
        return None
    store, _, name = rel.rpartition("/")
    m = _VERSIONED.match(name)
    if m is None or _META_DIRS.intersection(store.split("/")):
        return None
    return StateFile(store, int(m.group(1)), m.group(2))


def operator_of(store: str) -> str:
    """``state/<op>/...`` -> ``<op>``."""
    return store.split("/")[1]


StoreFiles = dict[int, dict[str, list[str]]]
"""version -> kind -> files (RocksDB v2 may hold several zips of one version)."""


def state_stores(listing: Mapping[str, Any]) -> dict[str, StoreFiles]:
    stores: dict[str, StoreFiles] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for rel in listing:
        sf = state_file(rel)
        if sf is not None:
            stores[sf.store][sf.version][sf.kind].append(rel)
    return {k: {v: dict(kinds) for v, kinds in vs.items()} for k, vs in stores.items()}


def state_chain(files: StoreFiles, version: int) -> list[str] | None:
    """The files that load ``version`` (newest snapshot at or below it, then the deltas above
    it), or None when the chain is broken. Version 0 is the empty store: no files."""
    chain: list[str] = []
    v = version
    while v > 0:
        kinds = files.get(v, {})
        snapshots = [f for k in _SNAPSHOT_KINDS for f in kinds.get(k, [])]
        if snapshots:
            return sorted(snapshots) + chain
        deltas = [f for k in _DELTA_KINDS for f in kinds.get(k, [])]
        if not deltas:
            return None
        chain = sorted(deltas) + chain
        v -= 1
    return chain


def loadable_versions(files: StoreFiles) -> set[int]:
    """Versions this store instance can load from its files (one walk up the versions present)."""
    out: set[int] = set()
    for v in sorted(files):
        kinds = files[v]
        below = v == 1 or (v - 1) in out
        if _SNAPSHOT_KINDS.intersection(kinds) or (below and _DELTA_KINDS.intersection(kinds)):
            out.add(v)
    return out


def operator_versions(listing: Mapping[str, Any]) -> dict[str, list[int]]:
    """Per stateful operator: the state versions every one of its store instances can load."""
    per_op: dict[str, set[int] | None] = {}
    for store, files in state_stores(listing).items():
        op = operator_of(store)
        found = loadable_versions(files)
        prev = per_op.get(op)
        per_op[op] = found if prev is None else prev & found
    return {op: sorted(v or ()) for op, v in sorted(per_op.items())}


# --- which files make batch N ------------------------------------------------------------


def belongs_to_batch(rel: str, batch_id: int) -> bool:
    """Whether a restart point at ``batch_id`` includes ``rel``: nothing written for a later
    batch (the query may still be running), everything Spark wrote up to it."""
    parts = rel.split("/")
    if any(p.startswith(".") for p in parts):
        return False
    top, name = parts[0], parts[-1]
    if top in (OFFSETS, COMMITS, PRODUCED):
        return len(parts) == 2 and name.isdigit() and int(name) <= batch_id
    if top == SOURCES:
        m = _SOURCE_LOG.match(name)
        return m is None or int(m.group(1)) <= batch_id
    if top == STATE:
        if _META_DIRS.intersection(parts):
            m = _BATCH_PREFIX.match(name)
            return m is None or int(m.group(1)) <= batch_id
        sf = state_file(rel)
        return sf is None or sf.version <= batch_id + 1
    return True  # metadata, or something this layout does not know: keep it, restores must work


@dataclass(frozen=True)
class Selection:
    batch_id: int
    files: dict[str, FileStat]
    required: frozenset[str]
    """Files whose loss makes the copy useless; the others (older log entries and state
    versions) are kept when present, dropped if Spark purges them during the copy."""


def select_files(listing: Mapping[str, FileStat], batch_id: int) -> Selection:
    committed = committed_batches(listing)
    if batch_id not in committed:
        span = f"{committed[0]}..{committed[-1]}" if committed else "none"
        raise IncompleteCheckpointError(
            f"batch {batch_id} is not a committed batch of this checkpoint (committed and retained: {span})"
        )
    files = {rel: st for rel, st in listing.items() if belongs_to_batch(rel, batch_id)}
    required = {METADATA, f"{OFFSETS}/{batch_id}", f"{COMMITS}/{batch_id}"}
    if batch_id > 0:
        required.add(f"{OFFSETS}/{batch_id - 1}")
    missing = sorted(required - set(files))
    if missing:
        raise IncompleteCheckpointError(
            f"batch {batch_id}: {', '.join(missing)} missing from the checkpoint; Spark needs them to restart "
            "after this batch"
        )
    for store, store_files in sorted(state_stores(files).items()):
        chain = state_chain(store_files, batch_id + 1)
        if chain is None:
            have = sorted(store_files)
            raise IncompleteCheckpointError(
                f"{store}: state version {batch_id + 1} (after batch {batch_id}) cannot be loaded from the "
                f"versions present ({have[0]}..{have[-1]}, with gaps or without a snapshot); "
                "choose a later batch (Spark keeps about minBatchesToRetain versions)"
            )
        required.update(chain)
    return Selection(batch_id, files, frozenset(required))
