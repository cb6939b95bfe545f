"""Copy: a stateless pipeline that writes one source unchanged (the `unordered` mode's use case),
to one output or to several (``outputs``: the same rows to a table and a topic)."""

from __future__ import annotations

from pyspark.sql import DataFrame

OUTPUT = "copy"


def pipeline(sources: dict[str, DataFrame], source: str | None = None, outputs: str = OUTPUT) -> dict[str, DataFrame]:
    name = source or next(iter(sources))
    return {out.strip(): sources[name] for out in outputs.split(",")}
