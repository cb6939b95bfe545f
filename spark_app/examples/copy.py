"""Copy: a stateless pipeline that writes one source unchanged (the `unordered` mode's use case)."""

from __future__ import annotations

from pyspark.sql import DataFrame

OUTPUT = "copy"


def pipeline(sources: dict[str, DataFrame], source: str | None = None) -> dict[str, DataFrame]:
    name = source or next(iter(sources))
    return {OUTPUT: sources[name]}
