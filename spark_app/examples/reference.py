"""The batch reference of a backfill: the same pipeline function over a table's whole history
as a batch DataFrame, restricted to the window. What a live job that kept reading would have
written, used by the demo's checks and the tests.

Filtering happens after collecting: Spark pushes a ``where`` on a session window's start below
the aggregate, where it cuts sessions apart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession


def history(spark: SparkSession, table: Table) -> DataFrame:
    """The whole table as a batch DataFrame (timestamps as the source gives them), without the
    ingestion metadata struct."""
    arrow = table.scan().to_arrow()
    if "__metadata__" in arrow.column_names:
        arrow = arrow.drop_columns(["__metadata__"])
    return spark.createDataFrame(arrow.to_pandas())


def _tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """Every row, columns sorted by name, rows sorted."""
    return _tuples(df.select(*sorted(df.columns)).toArrow())


def in_window(df: DataFrame, column: str, start: datetime, end: datetime) -> list[tuple[Any, ...]]:
    """Rows whose ``column`` is in ``[start, end)``, as ``rows`` gives them."""
    table = df.select(*sorted(df.columns)).toArrow()
    times = table[column]
    if times.type.tz is not None:
        times = times.cast(pa.timestamp(times.type.unit))  # the UTC wall clock, as stored
    lo, hi = (pa.scalar(t.replace(tzinfo=None), pa.timestamp("us")) for t in (start, end))
    return _tuples(table.filter(pc.and_(pc.greater_equal(times, lo), pc.less(times, hi))))
