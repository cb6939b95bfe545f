"""A time window of a table: the rows of one ref with ``time_column`` in ``[start, end)``, and
its data files classified as wholly inside it or straddling its edges (by column stats)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, LessThan, literal
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask, Table
from pyiceberg.types import TimestampType, TimestamptzType

from spark_app.contract.errors import ConfigError
from spark_app.sources.iceberg.spec import micros


@dataclass(frozen=True)
class TimeWindow:
    column: str
    start: datetime
    end: datetime

    @property
    def start_us(self) -> int:
        return micros(self.start)

    @property
    def end_us(self) -> int:
        return micros(self.end)

    def expression(self, table: Table) -> BooleanExpression:
        kind = self._type(table)
        return And(
            GreaterThanOrEqual(self.column, literal(self.start_us).to(kind)),
            LessThan(self.column, literal(self.end_us).to(kind)),
        )

    def _type(self, table: Table) -> TimestampType | TimestamptzType:
        try:
            kind = table.schema().find_field(self.column).field_type
        except ValueError:
            raise ConfigError(f"{table.name()}: no column {self.column!r} (the sink's timeColumn)") from None
        if not isinstance(kind, TimestampType | TimestamptzType):
            raise ConfigError(f"{table.name()}: {self.column!r} is {kind}, a time window needs a timestamp")
        return kind

    def mask(self, rows: pa.Table) -> pa.ChunkedArray:
        """Which rows are in the window (timestamps compared as UTC microseconds)."""
        us = pc.cast(pc.cast(rows.column(self.column), pa.timestamp("us")), pa.int64())
        return pc.and_(pc.greater_equal(us, self.start_us), pc.less(us, self.end_us))

    def tasks(self, table: Table, snapshot_id: int | None) -> list[FileScanTask]:
        """Files of a snapshot that may hold window rows (pruned by partition and stats)."""
        if snapshot_id is None:
            return []
        tasks = list(table.scan(row_filter=self.expression(table), snapshot_id=snapshot_id).plan_files())
        for t in tasks:
            if t.delete_files:
                raise ConfigError(
                    f"{table.name()}: {t.file.file_path} has delete files (merge-on-read); compact the table first"
                )
        return tasks

    def inside(self, table: Table, task: FileScanTask) -> bool:
        """True when the file's stats prove every row is in the window (no need to open it)."""
        field = table.schema().find_field(self.column)
        lower, upper = task.file.lower_bounds.get(field.field_id), task.file.upper_bounds.get(field.field_id)
        if lower is None or upper is None:
            return False
        lo, hi = from_bytes(field.field_type, lower), from_bytes(field.field_type, upper)
        return self.start_us <= lo and hi < self.end_us

    def read(self, table: Table, tasks: list[FileScanTask]) -> pa.Table:
        """Every row of the given files (the caller filters)."""
        scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
        return scan.to_table(tasks)

    def rows(self, table: Table, snapshot_id: int | None) -> pa.Table:
        """The window's rows in a snapshot (None: an empty table)."""
        if snapshot_id is None:
            from pyiceberg.io.pyarrow import schema_to_pyarrow

            return schema_to_pyarrow(table.schema()).empty_table()
        return table.scan(row_filter=self.expression(table), snapshot_id=snapshot_id).to_arrow()
