"""Every playback with how engaged the viewer was: ``sampled`` (left within 5 minutes),
``watched``, or ``binged`` (at least ``binge_minutes``).

The tier is a Python UDF on purpose: Spark pickles it by reference to this module, so the
executors must be able to import ``watch_time`` too (shipped by ``deps.pyFiles`` or a
ConfigMap, not baked into the image). Stateless: it runs unchanged live and in a Backfill.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SAMPLE_SECONDS = 300


def tier(duration_s: int, binge_minutes: int) -> str:
    """The engagement tier of one playback of ``duration_s`` seconds."""
    if duration_s < SAMPLE_SECONDS:
        return "sampled"
    return "binged" if duration_s >= binge_minutes * 60 else "watched"


def pipeline(sources: dict[str, DataFrame], binge_minutes: str = "90") -> dict[str, DataFrame]:
    """``pipelineArgs`` arrive as strings (``binge_minutes: "90"``)."""
    as_tier = F.udf(tier, "string", useArrow=False)  # a plain Python UDF (Spark 4 would guess from the hints)
    plays = sources["playbacks"]
    return {
        "engaged_plays": plays.select(
            "playback_id",
            "profile_id",
            "title_id",
            "event_ts",
            "duration_s",
            as_tier("duration_s", F.lit(int(binge_minutes))).alias("tier"),
        )
    }
