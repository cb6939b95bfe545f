"""The rows a run reports, counted from Spark's progress: delivered (what the sources handed
the pipeline, after the window and filter), scanned (decoded from Parquet) and reused (served
from an earlier read of the same file). The run report's figures and the benches' both come
from here, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

OBSERVED_ROWS = "kappa_rows:"
"""Prefix of the observed metric that counts the rows a kappa-iceberg source delivers."""
SOURCE_DESCRIPTION = "kappa-iceberg["


SCANNED_ROWS = "scannedRows"
"""The kappa-iceberg source's metric (``sources[].metrics`` of a progress): rows its readers
decoded from Parquet since the query started, a time slice's neighbours included."""
REUSED_ROWS = "reusedRows"
"""The kappa-iceberg source's metric: rows its readers served from an earlier read of the same
file (kept for a later time slice) instead of decoding the file again."""


def _running(progress: Sequence[dict[str, Any]], metric: str) -> tuple[int, int]:
    """A kappa-iceberg source metric counted since its query started: summed over the query
    runs of ``progress`` (the last value of each), and the other sources' ``numInputRows``."""
    running: dict[str, int] = {}
    other = 0
    for p in progress:
        if "sources" not in p:  # a summary without per-source detail (a bounded run's)
            other += int(p.get("numInputRows", 0) or 0)
            continue
        for source in p["sources"] or []:
            metrics = source.get("metrics") or {}
            if metric in metrics:
                running[f"{p.get('runId')}/{source.get('description')}"] = int(metrics[metric])
            else:
                other += int(source.get("numInputRows", 0) or 0)
    return sum(running.values()), other


def scanned_rows(progress: Sequence[dict[str, Any]]) -> int:
    """Rows a run's sources decoded: the kappa-iceberg readers' count, the other sources'
    ``numInputRows`` (what they read is what they deliver)."""
    own, other = _running(progress, SCANNED_ROWS)
    return own + other


def reused_rows(progress: Sequence[dict[str, Any]]) -> int:
    """Rows the kappa-iceberg readers delivered from a file's earlier read, not decoded again."""
    return _running(progress, REUSED_ROWS)[0]


def delivered_rows(progress: dict[str, Any]) -> int:
    """Rows a batch's sources handed the pipeline: for the kappa-iceberg source the rows its
    window and filter kept, observed per source (``frame.iceberg_frame``); Spark's
    ``numInputRows`` counts the rows in the reads' time slices, before those filters. Other
    sources count as Spark counts them."""
    if "sources" not in progress:  # a summary without per-source detail
        return int(progress.get("numInputRows", 0) or 0)
    observed = progress.get("observedMetrics") or {}
    total = 0
    for source in progress.get("sources") or []:
        description = str(source.get("description", ""))
        if description.startswith(SOURCE_DESCRIPTION):
            metric = observed.get(OBSERVED_ROWS + description[len(SOURCE_DESCRIPTION) : -1])
            if metric is not None:
                total += int(metric["rows"] or 0)  # a dict, or a Row of the Python progress
                continue
        total += int(source.get("numInputRows", 0) or 0)
    return total
