"""The I/O edge of planning: Iceberg metadata in, ``DataFileInfo`` out.

Only manifests are read here: pruning by partition and column statistics is pyiceberg's
(``plan_files`` with the window as a row filter), and each file's time range comes from the
ordering column's lower/upper bounds. No data file is opened to plan.
"""

from __future__ import annotations

import logging

from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    LessThan,
    literal,
)
from pyiceberg.expressions.parser import parse
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.types import TimestampType

from spark_app.contract.errors import ConfigError, SnapshotExpiredError
from spark_app.planning.splits import DataFileInfo

log = logging.getLogger(__name__)


def window_filter(column: str, lo: int | None, hi: int | None) -> BooleanExpression:
    expr: BooleanExpression = AlwaysTrue()
    if lo is not None:
        expr = And(expr, GreaterThanOrEqual(column, literal(lo).to(TimestampType())))
    if hi is not None:
        expr = And(expr, LessThan(column, literal(hi).to(TimestampType())))
    return expr


def row_filter(text: str | None) -> BooleanExpression:
    return parse(text) if text else AlwaysTrue()


def _info(task: FileScanTask, field_id: int, field_type: object, table: str) -> DataFileInfo:
    if task.delete_files:
        raise ConfigError(
            f"{table} has delete files on {task.file.file_path}: merge-on-read deletes are not supported "
            "by the kappa source yet; compact the table (rewrite_data_files) first"
        )
    f = task.file
    lower = f.lower_bounds.get(field_id) if f.lower_bounds else None
    upper = f.upper_bounds.get(field_id) if f.upper_bounds else None
    return DataFileInfo(
        path=f.file_path,
        record_count=f.record_count,
        size_bytes=f.file_size_in_bytes,
        lower=from_bytes(field_type, lower) if lower is not None else None,
        upper=from_bytes(field_type, upper) if upper is not None else None,
        row_group_offsets=tuple(f.split_offsets or ()),
    )


def files_in_window(
    table: Table,
    snapshot_id: int,
    ordering_column: str,
    window: tuple[int | None, int | None],
    filter_text: str | None,
) -> list[DataFileInfo]:
    """Files of a snapshot whose ordering-column range may intersect the window."""
    field = table.schema().find_field(ordering_column)
    expr = And(window_filter(ordering_column, *window), row_filter(filter_text))
    scan = table.scan(row_filter=expr, snapshot_id=snapshot_id)
    return [_info(t, field.field_id, field.field_type, str(table.name())) for t in scan.plan_files()]


def column_bounds(
    table: Table,
    snapshot_id: int,
    ordering_column: str,
    window: tuple[int | None, int | None],
    filter_text: str | None,
    columns: tuple[str, ...],
) -> list[tuple[int | None, ...]] | None:
    """Per file of the window, the lower and upper bound of each timestamp column (µs; a
    missing statistic is None), from the manifests; None: a column is not in the table."""
    schema = table.schema()
    try:
        fields = [schema.find_field(c) for c in columns]
    except ValueError:
        return None
    expr = And(window_filter(ordering_column, *window), row_filter(filter_text))
    out: list[tuple[int | None, ...]] = []
    for task in table.scan(row_filter=expr, snapshot_id=snapshot_id).plan_files():
        f = task.file
        row: list[int | None] = []
        for fld in fields:
            for bounds in (f.lower_bounds, f.upper_bounds):
                raw = bounds.get(fld.field_id) if bounds else None
                row.append(None if raw is None else int(from_bytes(fld.field_type, raw)))
        out.append(tuple(row))
    return out


def files_added_by(
    table: Table, snapshot: Snapshot, ordering_column: str, filter_text: str | None
) -> list[DataFileInfo]:
    """Data files an append snapshot added (what a live source reads from it)."""
    field = table.schema().find_field(ordering_column)
    scan = table.incremental_append_scan(
        from_snapshot_id_exclusive=snapshot.parent_snapshot_id,
        to_snapshot_id_inclusive=snapshot.snapshot_id,
        row_filter=row_filter(filter_text),
    )
    return [_info(t, field.field_id, field.field_type, str(table.name())) for t in scan.plan_files()]


def history(table: Table) -> list[Snapshot]:
    """The current snapshot's ancestry, oldest first."""
    return list(reversed(list(ancestors_of(table.current_snapshot(), table.metadata))))


def require_snapshot(table: Table, snapshot_id: int, what: str) -> Snapshot:
    snap = table.snapshot_by_id(snapshot_id)
    if snap is None:
        raise SnapshotExpiredError(
            f"{table.name()}: snapshot {snapshot_id} ({what}) no longer exists (expired or rolled back). "
            "Reading on would silently skip data: restart the query from a fresh checkpoint with an "
            "explicit starting position, or backfill the gap from history"
        )
    return snap
