"""Windows: plays and watch time per title in tumbling event-time windows.

Stateful (a windowed aggregation in append mode): a window is emitted only once the
watermark passes its end, i.e. ``lateness`` after the last event of the window. Its output
time is ``window_start``. A backfill therefore reads past the window's end (the drain:
lateness + window length) so the windows that start inside it close, and writes only the
windows that start inside it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

OUTPUT = "title_windows"
TIME_COLUMN = "window_start"


def pipeline(
    sources: dict[str, DataFrame], window: str = "10 minutes", lateness: str = "30 minutes"
) -> dict[str, DataFrame]:
    plays = sources["playbacks"].withWatermark("event_ts", lateness)
    counts = plays.groupBy(F.window("event_ts", window).alias("w"), "title_id").agg(
        F.count("*").alias("plays"),
        F.sum("duration_s").alias("watch_s"),
    )
    return {
        OUTPUT: counts.select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "title_id",
            "plays",
            "watch_s",
        )
    }
