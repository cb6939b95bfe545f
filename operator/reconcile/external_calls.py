"""What the status shows of a job's limit on external calls (pure): the driver's report as
``status.externalCalls``, when to read it again, and the gauges.

The operator never talks to the lease server in the driver: the driver leaves a report next to
the run's checkpoint (``spark_app.contract.reports.external_calls``) and the operator reads it, every
``EVERY_S`` and only for runs that have a limit (a few hundred bytes)."""

from __future__ import annotations

from typing import Any

from spark_app.contract.reports.external_calls import ExternalCallsReport

EVERY_S = 30.0
"""How often a running job's or backfill's report is read (its observed rate is over 30 s)."""


def limited(cfg_rate: float | None) -> bool:
    """Whether there is a report to read: the run was rendered with a limit."""
    return cfg_rate is not None


def due(last_read: float | None, now: float, every: float = EVERY_S) -> bool:
    """Read again: never read (this operator process), or ``every`` seconds ago."""
    return last_read is None or now - last_read >= every


def calls_status(report: ExternalCallsReport | None, configured: float | None) -> dict[str, Any] | None:
    """``status.externalCalls``: the limit the running application enforces (its report's; the
    rendered one until the first report) and what its calls did. None: no limit, nothing to say."""
    if report is None:
        return None if configured is None else {"ratePerSecond": configured}
    return {
        "ratePerSecond": report.rate_per_second,
        "observedPerSecond": round(report.observed_per_second, 2),
        "calls": report.calls,
        "waitedSeconds": round(report.waited_seconds, 1),
        "at": report.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def calls_update(current: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``externalCalls`` field to write, or None when it says what status already says."""
    if new is None or new == {k: v for k, v in (current or {}).items() if v is not None}:
        return None
    return new
