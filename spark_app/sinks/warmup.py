"""Backfill output is the window's: warm-up output (before start) and anything at or after
the end is not written, whatever the sink."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame

from spark_app.errors import ConfigError


def restrict_to_window(df: DataFrame, time_column: str | None, start_us: int, end_us: int) -> DataFrame:
    """Keep output rows whose ``time_column`` is in ``[start, end)``.

    The filter runs in an Arrow map, not as a ``where``: Spark pushes a predicate on a
    grouping key below the aggregate, and for session windows that filters raw events by
    their *initial* session start, which splits sessions that begin in the warm-up.
    """
    if time_column is None:
        return df
    if time_column not in df.columns:
        raise ConfigError(f"sink timeColumn {time_column!r} is not an output column ({', '.join(df.columns)})")
    return df.mapInArrow(window_filter(time_column, start_us, end_us), df.schema)


def window_filter(column: str, start_us: int, end_us: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def keep_window(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        lo, hi = pa.scalar(start_us, pa.timestamp("us", "UTC")), pa.scalar(end_us, pa.timestamp("us", "UTC"))
        for b in batches:
            ts = b.column(column).cast(pa.timestamp("us", "UTC"))
            yield b.filter(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi)))

    return keep_window
