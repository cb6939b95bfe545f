"""What a Kafka job's status and metrics show of its consumer lag (pure): its driver's reports
(``spark_app.contract.reports.progress``, one per sink query) folded into one figure and the partitions
furthest behind."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from spark_app.contract.reports.progress import ProgressReport

SHOWN = 20
"""Partitions listed in status (the furthest behind); Prometheus gets every one."""


def lag_status(reports: list[ProgressReport]) -> dict[str, Any] | None:
    """The ``kafkaLag`` status field, or None while no query reported (not yet run a batch).
    A partition read by two sink queries counts once per query: each query reads it."""
    reports = [r for r in reports if r.partitions]
    if not reports:
        return None
    partitions = [p for r in reports for p in r.partitions]
    behind = sorted(partitions, key=lambda p: (-p.lag, p.topic, p.partition))[:SHOWN]
    at = max(r.at for r in reports).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "total": sum(p.lag for p in partitions),
        "at": at,
        "partitions": [{"topic": p.topic, "partition": p.partition, "lag": p.lag} for p in behind],
    }


def lag_gauges(reports: list[ProgressReport]) -> dict[tuple[str, str, str], int]:
    """(sink, topic, partition) -> lag: the gauge's series for one job."""
    return {(r.sink, p.topic, str(p.partition)): p.lag for r in reports for p in r.partitions}
