"""Labels looked up in a service outside, one call per row, through the job's limiter: the
example of ``spark_app.external_calls`` (``tests/spark/test_external_calls.py`` and
``bench/external_calls.py`` run it against a local service). Live it calls at the live rate;
a Backfill of the same job replays hours in minutes, and the limit keeps the service's load
where the operator set it."""

from __future__ import annotations

import urllib.request

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_app import external_calls


def enrich(sources: dict[str, DataFrame], url: str, source: str = "playbacks") -> dict[str, DataFrame]:
    """Each row's ``title_id`` looked up at ``url`` (``GET <url>?id=<title_id>``, the answer's
    text becomes ``label``), one call per row, each taking one of the job's tokens."""
    limiter = external_calls.limiter()

    @F.pandas_udf("string")  # type: ignore[call-overload]
    def label(ids: pd.Series) -> pd.Series:
        out = []
        for i in ids:
            limiter.acquire(1)
            with urllib.request.urlopen(f"{url}?id={i}", timeout=30) as resp:
                out.append(resp.read().decode())
        return pd.Series(out)

    rows = sources[source]
    return {"enriched": rows.select("playback_id", "title_id", "event_ts", label("title_id").alias("label"))}
