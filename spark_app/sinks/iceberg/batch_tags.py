"""Every data file the sink writes names the query and batch that wrote it.

A snapshot's summary says which batch it committed, but snapshots expire (they must: a
pyiceberg commit costs ~0.5 ms per snapshot in the table's metadata, see ``history``). The
file's name does not expire: it stays in the live manifests for as long as the file is live.
So an undo (rewind) and the sink's replay check find a batch's files from the branch's
current state even after every snapshot that added them was expired, and expiry need not
keep the history a retained restore point may need to undo.

The tag goes in front of pyiceberg's own file name, in the table's usual data location
(partition directories unchanged): ``q<query id>_b<batch>_00000-0-<uuid>.parquet``. Files
Spark's own writer wrote (``spark_files``) cannot be named by us: the tag names their batch's
directory instead, ``data/q<query id>_b<batch>_<uuid>/.../part-00000-<uuid>.c000.parquet``. A file
compaction wrote from several batches of one query names their range, ``q<id>_b<first>-<last>_``:
an undo that would have to split it refuses instead of removing too much or too little.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionKey
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.locations import LocationProvider, load_location_provider
from pyiceberg.typedef import Properties

WRITE_TAG = "kappa.write.batch-tag"
"""Set only in the metadata copy the executors write with, never on the table."""

_TAG = re.compile(r"(?:^|/)q(?P<query>[0-9A-Za-z-]{1,64})_b(?P<first>\d{1,19})(?:-(?P<last>\d{1,19}))?_[^/]*(?=/|$)")


@dataclass(frozen=True)
class BatchTag:
    query: str
    first: int
    last: int
    """Equal to ``first`` for a batch's own file; a compacted file spans ``first..last``."""

    def covers(self, batch_id: int) -> bool:
        return self.first <= batch_id <= self.last


def tag(query_id: str, first: int, last: int | None = None) -> str:
    return f"q{query_id}_b{first}" if last is None or last == first else f"q{query_id}_b{first}-{last}"


def parse(path: str) -> BatchTag | None:
    """The query and batch(es) that wrote a file the sink wrote; None for any other file."""
    found = list(_TAG.finditer(path))
    if not found:
        return None
    m = found[-1]  # the file's name, else the nearest directory
    first = int(m["first"])
    return BatchTag(m["query"], first, int(m["last"]) if m["last"] else first)


def write_properties(properties: Properties, query_id: str, first: int, last: int | None = None) -> dict[str, str]:
    """The table's properties for the executors' metadata copy: our provider, with the tag."""
    own = properties.get(TableProperties.WRITE_PY_LOCATION_PROVIDER_IMPL)
    return {
        **properties,
        TableProperties.WRITE_PY_LOCATION_PROVIDER_IMPL: f"{__name__}.BatchTaggedLocations",
        WRITE_TAG: tag(query_id, first, last),
        **({_WRAPPED: own} if own else {}),
    }


_WRAPPED = "kappa.write.wrapped-location-provider"


class BatchTaggedLocations(LocationProvider):
    """The table's own location provider (simple, object-store or custom), file names tagged."""

    def __init__(self, table_location: str, table_properties: Properties) -> None:
        super().__init__(table_location, table_properties)
        inner = {
            k: v
            for k, v in table_properties.items()
            if k not in (WRITE_TAG, _WRAPPED, TableProperties.WRITE_PY_LOCATION_PROVIDER_IMPL)
        }
        if wrapped := table_properties.get(_WRAPPED):
            inner[TableProperties.WRITE_PY_LOCATION_PROVIDER_IMPL] = wrapped
        self._inner = load_location_provider(table_location, inner)
        self._tag = table_properties[WRITE_TAG]

    def new_data_location(self, data_file_name: str, partition_key: PartitionKey | None = None) -> str:
        return self._inner.new_data_location(f"{self._tag}_{data_file_name}", partition_key)


def live_files(table: Table, branch: str) -> Iterator[DataFile]:
    head = table.snapshot_by_name(branch)
    if head is None:
        return
    for manifest in head.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            yield entry.data_file


def batch_is_live(table: Table, branch: str, query_id: str, batch_id: int) -> bool:
    return any(
        t is not None and t.query == query_id and t.covers(batch_id)
        for t in (parse(f.file_path) for f in live_files(table, branch))
    )
