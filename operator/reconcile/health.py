"""Whether a running StreamingJob is healthy, from its driver's progress reports (pure).

``Stalled`` (reason ``NoProgress``): a sink query sent no micro-batch and no idle heartbeat for
``spec.health.progressTimeout`` while the application runs. A query that has nothing to read is
idle, not stalled: Spark says so with idle events. ``Lagging``: the job reads, but falls behind
what the user declared acceptable (Kafka records not read yet, or the watermark's distance from
the wall clock).

``Stalled`` is also what a spec the operator cannot run sets (reason ``InvalidSpec``,
``reconcile.failures``): the resource cannot make progress either way. This module clears only
its own reason, so a refused spec stays Stalled whatever its (absent) queries report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kappa_operator.models.common import Condition, as_timedelta, instant, rfc3339
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.conditions import Verdict, set_conditions
from kappa_operator.reconcile.events import Event
from spark_app.contract.reports.progress import ProgressReport

NO_PROGRESS = "NoProgress"
PROGRESS_UNKNOWN = "ProgressUnknown"
"""Condition: the operator could not read this job's reports (its store refused or did not
answer). One job's unreadable store is one condition on that job: the others are read as
usual, and this one is tried again at the next interval, not sooner (no retry storm)."""
RECORDS_LOST = "RecordsLost"
"""Condition: the driver found, at the job's first start, records its topics had already
removed (retention) before it read them: they are in no output and no archive."""
READ_FIX = (
    "the operator reads only the jobs' _kappa/ reports: give its ServiceAccount read access to "
    "<checkpoints.location>/**/_kappa/* (chart value objectStore, docs/operations.md)"
)
HEALTH_REASONS = (NO_PROGRESS, "Progressing", "NotRunning", "CaughtUp", "Behind")


def progress_status(reports: list[ProgressReport]) -> dict[str, Any]:
    """The ``progress`` and ``lastProgressAt`` status fields."""
    rows = [
        {
            "sink": r.sink,
            "batchId": r.batch_id,
            "at": rfc3339(r.at),
            "lastHeartbeat": rfc3339(r.alive_at),
            "inputRowsPerSecond": round(r.input_rows_per_second, 3),
            "processedRowsPerSecond": round(r.processed_rows_per_second, 3),
            "batchDurationMs": r.batch_duration_ms,
            "stateRows": r.state_rows,
            "watermark": None if r.watermark is None else rfc3339(r.watermark),
        }
        for r in sorted(reports, key=lambda r: r.sink)
    ]
    newest = max((r.alive_at for r in reports), default=None)
    marks = [r.watermark for r in reports if r.watermark is not None]
    return {
        "progress": rows,
        "lastProgressAt": None if newest is None else rfc3339(newest),
        # the job's watermark: its slowest query's (a query without one yet says nothing)
        "watermark": rfc3339(min(marks)) if marks else None,
    }


def running_since(job: StreamingJob) -> datetime | None:
    """When the job's application was last seen entering RUNNING (its Ready condition's last
    transition to True), or None when it does not run."""
    if job.status is None or job.status.phase != "Running":
        return None
    ready = next((c for c in job.status.conditions if c.type == "Ready"), None)
    if ready is None or ready.status != "True" or not ready.last_transition_time:
        return None
    return instant(ready.last_transition_time)


@dataclass(frozen=True)
class Health:
    stalled: tuple[str, ...]
    """Sinks whose query is silent past the timeout."""
    lagging: tuple[str, ...]
    """Why the job counts as lagging (one phrase per cause)."""


def assess(job: StreamingJob, reports: list[ProgressReport], now: datetime) -> Health | None:
    """The job's health, or None when it does not run (nothing to assess)."""
    since = running_since(job)
    if since is None:
        return None
    spec = job.spec.health
    timeout = as_timedelta(spec.progress_timeout)
    alive = {r.sink: r.alive_at for r in reports}
    # a report older than this run (from before a restart) counts from the run's start
    stalled = tuple(s for s in job.spec.sinks if now - max(alive.get(s, since), since) > timeout)
    lagging: list[str] = []
    behind = sum(p.lag for r in reports for p in r.partitions)
    if spec.max_kafka_lag is not None and behind > spec.max_kafka_lag:
        lagging.append(f"{behind} Kafka records not read yet (maxKafkaLag {spec.max_kafka_lag})")
    if spec.max_watermark_delay is not None:
        limit = as_timedelta(spec.max_watermark_delay)
        for r in sorted(reports, key=lambda r: r.sink):
            if r.watermark is not None and now - r.watermark > limit:
                lagging.append(
                    f"sink {r.sink}: watermark {rfc3339(r.watermark)} is more than "
                    f"{spec.max_watermark_delay} behind (maxWatermarkDelay)"
                )
    return Health(stalled, tuple(lagging))


@dataclass(frozen=True)
class HealthUpdate:
    status: dict[str, Any]
    events: tuple[Event, ...] = ()


def _current(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def decide_health(job: StreamingJob, reports: list[ProgressReport], now: datetime) -> HealthUpdate:
    """The status fields to write (progress, and the Stalled and Lagging conditions) and the
    Events of a change. The conditions are a list, written whole: a change is decided again
    on ``job`` read fresh from the server just before it is written; the watch's copy decides
    only that nothing changes (``handlers.progress``)."""
    status: dict[str, Any] = progress_status(reports)
    previous = list(job.status.conditions) if job.status else []
    health = assess(job, reports, now)
    stalled_now, lagging_now = _current(previous, "Stalled"), _current(previous, "Lagging")
    conds, events = previous, []
    stamp, generation = rfc3339(now), job.metadata.generation
    timeout = job.spec.health.progress_timeout
    if health is None:
        # not running: clear what this module set, never a refused spec's Stalled
        idle = Verdict("", "NotRunning", "not running")
        if stalled_now is not None and stalled_now.status == "True" and stalled_now.reason == NO_PROGRESS:
            conds = set_conditions(conds, {"Stalled": False}, idle, stamp, generation)
        if lagging_now is not None and lagging_now.status == "True":
            conds = set_conditions(conds, {"Lagging": False}, idle, stamp, generation)
    else:
        refused = stalled_now is not None and stalled_now.status == "True" and stalled_now.reason not in HEALTH_REASONS
        if not refused:
            if health.stalled:
                msg = f"no progress for over {timeout} from the queries of sinks {', '.join(health.stalled)}"
                verdict = Verdict("", NO_PROGRESS, msg)
            else:
                verdict = Verdict("", "Progressing", f"every query made progress within {timeout}")
            was = stalled_now is not None and stalled_now.status == "True"
            conds = set_conditions(conds, {"Stalled": bool(health.stalled)}, verdict, stamp, generation)
            if bool(health.stalled) != was:
                events.append(
                    Event("Warning", "Stalled", verdict.message)
                    if health.stalled
                    else Event("Normal", "Progressing", "the queries make progress again")
                )
        lag_msg = "; ".join(health.lagging)
        verdict = Verdict("", "Behind", lag_msg) if health.lagging else Verdict("", "CaughtUp", "within the limits")
        was = lagging_now is not None and lagging_now.status == "True"
        conds = set_conditions(conds, {"Lagging": bool(health.lagging)}, verdict, stamp, generation)
        if bool(health.lagging) != was:
            events.append(
                Event("Warning", "Lagging", lag_msg) if health.lagging else Event("Normal", "CaughtUp", "caught up")
            )
    lost = sorted({n for r in reports for n in r.notices})
    if lost:  # never cleared here: records lost before the first read stay lost for this job
        was_lost = _current(conds, RECORDS_LOST)
        verdict = Verdict("", "RetentionBeforeRead", "; ".join(lost))
        conds = set_conditions(conds, {RECORDS_LOST: True}, verdict, stamp, generation)
        if was_lost is None or was_lost.status != "True" or was_lost.message != verdict.message:
            events.append(Event("Warning", "RecordsLost", verdict.message))
    unknown = _current(conds, PROGRESS_UNKNOWN)
    if unknown is not None and unknown.status == "True":
        conds = set_conditions(
            conds, {PROGRESS_UNKNOWN: False}, Verdict("", "ReportsRead", "reports read"), stamp, generation
        )
        events.append(Event("Normal", "ReportsRead", "the driver's reports can be read again"))
    if conds is not previous:
        status["conditions"] = [c.model_dump(by_alias=True) for c in conds]
    return HealthUpdate(status, tuple(events))


def decide_unreadable(job: StreamingJob, error: str, now: datetime) -> HealthUpdate:
    """The job's reports could not be read: ``ProgressUnknown`` on it with the error and the
    fix, and a Warning Event when it turns True. Progress and health keep their last values
    (nothing is known that would change them)."""
    previous = list(job.status.conditions) if job.status else []
    was = _current(previous, PROGRESS_UNKNOWN)
    msg = f"could not read the driver's reports: {error}; {READ_FIX}"
    verdict = Verdict("", "ReportUnreadable", msg)
    conds = set_conditions(previous, {PROGRESS_UNKNOWN: True}, verdict, rfc3339(now), job.metadata.generation)
    events = () if was is not None and was.status == "True" else (Event("Warning", "ReportUnreadable", msg),)
    return HealthUpdate({"conditions": [c.model_dump(by_alias=True) for c in conds]}, events)


def health_gauges(reports: list[ProgressReport]) -> dict[str, dict[str, float]]:
    """sink -> gauge name -> value: the progress series of one job."""
    out: dict[str, dict[str, float]] = {}
    for r in reports:
        series = {
            "input_rows_per_second": r.input_rows_per_second,
            "processed_rows_per_second": r.processed_rows_per_second,
            "batch_duration_seconds": r.batch_duration_ms / 1000,
            "state_rows": float(r.state_rows),
            "last_progress_timestamp_seconds": r.alive_at.timestamp(),
        }
        if r.watermark is not None:
            series["watermark_timestamp_seconds"] = r.watermark.timestamp()
        out[r.sink] = series
    return out
