"""Sessions: playback events grouped into per-profile sessions closed by a gap timeout.

Stateful (session windows): a session is emitted once the watermark passes its end
(last play + gap). Its output time is ``session_start``; a backfill needs a warm-up of at
least ``gap`` so it can tell where sessions that start inside the window begin.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

OUTPUT = "sessions"
TIME_COLUMN = "session_start"


def pipeline(
    sources: dict[str, DataFrame], gap: str = "10 minutes", lateness: str = "30 minutes"
) -> dict[str, DataFrame]:
    plays = sources["playbacks"].withWatermark("event_ts", lateness)
    sessions = plays.groupBy(F.session_window("event_ts", gap).alias("session"), "profile_id").agg(
        F.count("*").alias("plays"),
        F.sum("duration_s").alias("watch_s"),
        F.min("event_ts").alias("first_play_ts"),
        F.max("event_ts").alias("last_play_ts"),
    )
    return {
        OUTPUT: sessions.select(
            "profile_id",
            F.col("session.start").alias("session_start"),
            F.col("session.end").alias("session_end"),
            "plays",
            "watch_s",
            "first_play_ts",
            "last_play_ts",
        )
    }
