"""The planners of the kappa-iceberg source: what a backfill's (``backfill_reader``, aligned
history) and a live job's (``live_reader``, incremental) share, ``IcebergReader``, and a
window's plan of splits (``backfill_plan``), which the planner and the lateness guard read too.

Spark's stream (``dev.kappa.source.KappaMicroBatchStream``, in the JVM) asks them, through
``bridge.PlannerBridge``, for every offset and every batch's tasks; they run in the driver's
own Python process and read only metadata, never rows. Each keeps only caches that can be
recomputed from its spec and the offsets: a restart from the checkpoint plans the same splits
and produces the same batches. Every admission decision
goes to the trace (when configured) so it can be audited. A backfill's read-rate cap
(``readRate``) then takes the prefix of the admitted splits its token bucket pays for.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyiceberg.table import Table
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
)

from spark_app.catalogs import load_table
from spark_app.contract.trace import trace
from spark_app.planning.admission import Limits
from spark_app.planning.read_rate import FileLayout
from spark_app.planning.splits import Split, pack_tasks, plan_splits
from spark_app.sources.iceberg import scan
from spark_app.sources.iceberg.byte_ranges import file_reads, task_pieces
from spark_app.sources.iceberg.spec import SourceSpec, micros

log = logging.getLogger(__name__)


def default_watermark_file(group: str, checkpoint: str) -> str:
    """Zero set-up: one state file per (group, checkpoint) under the system temp dir."""
    key = hashlib.sha1(f"{group}\0{checkpoint}".encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / "kappa-alignment" / f"{group}-{key}.json")


def backfill_plan(table: Table, spec: SourceSpec, snapshot_id: int) -> list[Split]:
    """The ordered splits of the window in one snapshot (shared by the reader and the guard).

    Wide files (late events) are cut into time slices first, unless the mode is unordered:
    slicing only tightens the ordering bound, which unordered reading does not have."""
    return backfill_plan_and_layouts(table, spec, snapshot_id)[0]


def backfill_plan_and_layouts(
    table: Table, spec: SourceSpec, snapshot_id: int, bounds: tuple[int, int] | None = None
) -> tuple[list[Split], dict[str, FileLayout]]:
    """``backfill_plan``, and each planned file's size and row-group offsets (what reading a
    time slice of it costs, for the read-rate cap)."""
    from spark_app.sources.iceberg.slices import slice_wide_files

    scan.require_snapshot(table, snapshot_id, "the snapshot this backfill reads")
    window = spec.window
    assert window is not None, "a backfill source needs the window"
    bounds = bounds or (micros(window.read_start), micros(window.read_end))
    files = scan.files_in_window(table, snapshot_id, spec.ordering_column, bounds, spec.source.filter)
    if spec.alignment.mode != "unordered":
        files = slice_wide_files(table.io, files, spec.ordering_column, spec.source.split, bounds)
    splits = plan_splits(files, spec.source.split, bounds)
    trace(
        spec.trace_path,
        "plan",
        source=spec.name,
        member=spec.member,
        snapshot_id=str(snapshot_id),
        files=len(files),
        paths=[f.path for f in files],
        sliced=sum(f.slices is not None for f in files),
        splits=len(splits),
        rows=sum(s.rows for s in splits),
        max_span_us=max((s.span for s in splits), default=0),
    )
    return splits, {f.path: (f.size_bytes, f.row_group_offsets) for f in files}


class IcebergReader(ABC):
    """What both readers share: the table, the read limits and the tasks of a batch."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self._table: Table | None = None
        self._layouts: dict[str, FileLayout] = {}

    @property
    def table(self) -> Table:
        if self._table is None:
            self._table = load_table(self.spec.catalog_name, self.spec.catalog, self.spec.source.table)
        return self._table

    def refresh(self) -> Table:
        self._table = None
        return self.table

    # -- limits -------------------------------------------------------------------------
    def getDefaultReadLimit(self) -> ReadLimit:
        rl = self.spec.source.read_limit
        if rl.max_files:
            return ReadMaxFiles(rl.max_files)
        if rl.max_rows:
            return ReadMaxRows(rl.max_rows)
        if rl.max_bytes:
            return ReadMaxBytes(rl.max_bytes)
        return ReadAllAvailable()

    def limits(self, limit: ReadLimit | None) -> Limits:
        """The engine's limit wins; ReadAllAvailable means the trigger wants everything."""
        if limit is None or isinstance(limit, ReadAllAvailable):
            return Limits.unlimited()
        rl = self.spec.source.read_limit
        return Limits(
            max_files=limit.max_files if isinstance(limit, ReadMaxFiles) else rl.max_files,
            max_rows=limit.max_rows if isinstance(limit, ReadMaxRows) else rl.max_rows,
            max_bytes=limit.max_bytes if isinstance(limit, ReadMaxBytes) else rl.max_bytes,
        )

    # -- reading ------------------------------------------------------------------------
    @abstractmethod
    def task_splits(self, start: dict, end: dict) -> list[list[Split]]:
        """The splits of the batch [start, end), packed into tasks by ``pack_tasks``."""

    def tasks(self, start: dict, end: dict) -> list[list[dict[str, Any]]]:
        """The batch's tasks as the JVM reader takes them: each piece a byte range of whole row
        groups with its time slice."""
        tasks = self.task_splits(start, end)
        if self.spec.trace_path:
            for task in tasks:
                for path, groups, ranges in file_reads(task):
                    trace(
                        self.spec.trace_path, "open", source=self.spec.name, path=path, row_groups=groups, slices=ranges
                    )
        later = self.later(start)
        return [task_pieces(t, self._layouts, self.clip, later) for t in tasks]

    def clip(self, split: Split) -> tuple[int, int] | None:
        return None

    def later(self, start: dict) -> Callable[[str], list[tuple[int, int]]]:
        """The time slices of a file that reads from this batch on take (none: no read keeps
        rows for another)."""
        return lambda _: []

    def packed(self, splits: Sequence[Split]) -> list[list[Split]]:
        return pack_tasks(splits, self.spec.parallelism, self.spec.source.split.task_target_bytes)

    def commit(self, end: dict) -> None:  # noqa: B027 - nothing to release: offsets are positions in a plan
        """Spark committed up to ``end``: the planners keep no per-batch state to drop."""

    def stop(self) -> None:  # noqa: B027 - the planners hold no connections of their own
        """The query stopped."""
