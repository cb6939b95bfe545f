"""Dedup: drop replayed events (same id) within the watermark, the usual guard of an
at-least-once ingestion path.

Stateful, and Spark counts the rows its watermark drops as late
(``numRowsDroppedByWatermark``), so it is the example that makes late drops visible.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

OUTPUT = "deduplicated"


def pipeline(
    sources: dict[str, DataFrame],
    source: str | None = None,
    key: str = "event_id",
    time_column: str = "event_ts",
    lateness: str = "30 minutes",
) -> dict[str, DataFrame]:
    name = source or next(iter(sources))
    events = sources[name].withWatermark(time_column, lateness)
    return {OUTPUT: events.dropDuplicatesWithinWatermark([key])}
