"""RMI: attribute plays to the impressions that led to them (Netflix's Real-time Merchandising
Impressions app), as an event-time stream-stream join.

A play is attributed to every impression of the same title shown to the same profile in the
``attribution_window`` before it. The output's time is the play's (``playback_ts``): a
backfill of ``[start, end)`` needs impressions from ``start - attribution_window``, hence
the warm-up. Runs unchanged live and in backfill.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

OUTPUT = "attributed_plays"
TIME_COLUMN = "playback_ts"


def pipeline(
    sources: dict[str, DataFrame],
    lateness: str = "30 minutes",
    attribution_window: str = "30 minutes",
    time_to_play: str = "false",
) -> dict[str, DataFrame]:
    """``time_to_play: "true"``: also the seconds from the impression to the play
    (``time_to_play_s``), a column a later version of the app adds (the blue/green upgrade's
    example; pipelineArgs are strings)."""
    impressions = (
        sources["impressions"]
        .withWatermark("event_ts", lateness)
        .select(
            "impression_id",
            F.col("profile_id").alias("imp_profile_id"),
            F.col("title_id").alias("imp_title_id"),
            F.col("event_ts").alias("impression_ts"),
        )
    )
    plays = (
        sources["playbacks"]
        .withWatermark("event_ts", lateness)
        .select("playback_id", "profile_id", "title_id", "duration_s", F.col("event_ts").alias("playback_ts"))
    )
    joined = plays.join(
        impressions,
        F.expr(
            "imp_profile_id = profile_id AND imp_title_id = title_id AND impression_ts <= playback_ts "
            f"AND impression_ts >= playback_ts - INTERVAL {attribution_window}"
        ),
        "inner",
    )
    columns = ["playback_id", "impression_id", "profile_id", "title_id", "impression_ts", "playback_ts", "duration_s"]
    out = joined.select(*columns)
    if str(time_to_play).lower() == "true":
        out = out.withColumn("time_to_play_s", F.col("playback_ts").cast("long") - F.col("impression_ts").cast("long"))
    return {OUTPUT: out}
