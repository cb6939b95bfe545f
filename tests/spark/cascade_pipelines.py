"""Two pipelines chained through a topic, for the cascade Rewind test: ``scale`` (job1,
stateless: its ``factor`` is the bug a deploy fixes) and ``totals`` (job2, a windowed
aggregation: its state must come back as it was)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def scale(sources: dict[str, DataFrame], factor: str = "1") -> dict[str, DataFrame]:
    events = sources["events"]
    return {"scaled": events.select("id", "grp", (F.col("v") * int(factor)).alias("v"), "event_ts")}


def totals(sources: dict[str, DataFrame]) -> dict[str, DataFrame]:
    scaled = sources["scaled"].withWatermark("event_ts", "30 minutes")
    per_window = scaled.groupBy(F.window("event_ts", "10 minutes"), "grp").agg(
        F.sum("v").alias("total"), F.count("*").alias("n")
    )
    return {"totals": per_window.select(F.col("window.start").alias("window_start"), "grp", "total", "n")}
