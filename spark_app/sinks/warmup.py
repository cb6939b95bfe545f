"""Backfill output is the window's: warm-up output (before start) and anything at or after
the end is not written, whatever the sink."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_app.contract.errors import ConfigError


def restrict_to_window(df: DataFrame, time_column: str | None, start_us: int, end_us: int) -> DataFrame:
    """Keep output rows whose ``time_column`` is in ``[start, end)``.

    Spark pushes a deterministic predicate on a grouping key below the aggregate, and for
    session windows that filters raw events by their *initial* session start, which splits
    sessions that begin in the warm-up or run on past the end. Spark splits a filter into its
    conjuncts and pushes the deterministic ones (``PushPredicateThroughNonJoin``; it also turns
    ``CASE WHEN c THEN p ELSE false`` into ``c AND p`` first), so each comparison is made
    non-deterministic itself: the time plus ``rand(0) * 0`` (always 0, one random draw per
    comparison and output row). The filter stays above the aggregate and runs in the JVM, where
    an Arrow map would need a Python worker in every batch.
    """
    if time_column is None:
        return df
    if time_column not in df.columns:
        raise ConfigError(f"sink timeColumn {time_column!r} is not an output column ({', '.join(df.columns)})")
    us = F.unix_micros(F.col(time_column).cast("timestamp")) + (F.rand(0) * 0).cast("long")
    return df.where((us >= F.lit(start_us)) & (us < F.lit(end_us)))


def restrict_closed(df: DataFrame, end_column: str, watermark_us: int | None, still_open: bool = False) -> DataFrame:
    """Keep the results a streaming run has written when its watermark is ``watermark_us``
    (their end at or before it: Spark's append-mode eviction), or, ``still_open``, those it
    still holds. None: no watermark yet, nothing written. Non-deterministic as in
    ``restrict_to_window``, so the comparison is not pushed below a session aggregate."""
    if watermark_us is None:
        return df if still_open else df.limit(0)
    us = F.unix_micros(F.col(end_column).cast("timestamp")) + (F.rand(0) * 0).cast("long")
    return df.where(us > F.lit(watermark_us) if still_open else us <= F.lit(watermark_us))
