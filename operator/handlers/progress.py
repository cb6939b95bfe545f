"""Live jobs' progress and health: every ``--progress-interval`` (``TICK`` by default) the
operator reads what each sink query's driver last reported (``spark_app.contract.reports.progress``, a
few hundred bytes next to the live checkpoint) and shows it in the StreamingJob's status
(``progress``, ``kafkaLag``; ``kubectl get sj`` prints the lag and the last progress), as
gauges, and as the ``Stalled`` and ``Lagging`` conditions (``reconcile.health``). It never
asks Spark or Kafka."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers import followers
from kappa_operator.handlers.context import (
    READ_TIMEOUTS,
    ctx,
    parse,
    post_events,
    record,
    records_nothing,
    reported,
    until_stopped,
)
from kappa_operator.handlers.nodes import clear_lost_pods, driver_drained
from kappa_operator.handlers.streaming_job import reconcile
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.bootstrap import bootstrap_status, switched_now
from kappa_operator.reconcile.external_calls import calls_status
from kappa_operator.reconcile.health import decide_health, decide_unreadable, health_gauges
from kappa_operator.reconcile.kafka_lag import lag_gauges, lag_status
from kappa_operator.reconcile.streaming_job import owner_of
from kappa_operator.render.jobconfig import live_checkpoint
from spark_app.contract.reports.bootstrap import BootstrapRecord, read_record
from spark_app.contract.reports.external_calls import ExternalCallsReport
from spark_app.contract.reports.external_calls import read_report_at as read_calls_at
from spark_app.contract.reports.progress import ProgressReport, read_reports
from spark_app.contract.storage import REPORT_DIR, open_location

log = logging.getLogger("kappa.operator")

TICK = 30.0
"""The default interval: a report a driver writes at most every 5 s reaches status within it."""


_registered: list[float] = []
"""The interval the look was registered at in this process (``followers.LOOKS`` is global)."""


def follow_progress_every(interval: float = TICK) -> None:
    """Registers the progress look at the operator's ``--progress-interval`` (a decorator would
    fix it at import): a shorter one shows a stall or a switch sooner and reads every job's
    reports that much more often. Once per process: the looks are registered globally, so an
    operator started again in the same process (tests) keeps the look, and must ask the same."""
    if interval <= 0:
        raise ValueError(f"the progress interval must be > 0 s, got {interval}")
    if _registered:
        if _registered[0] != interval:
            raise ValueError(f"the progress timer runs every {_registered[0]} s in this process, not {interval}")
        return
    followers.every("streamingjobs", interval, initial_delay=interval)(follow_progress)
    _registered.append(interval)


@dataclass(frozen=True)
class JobReports:
    """What one job's drivers last wrote under ``_kappa/`` next to its live checkpoint."""

    progress: list[ProgressReport]
    calls: ExternalCallsReport | None
    bootstrap: BootstrapRecord | None


def read_job_reports(job: StreamingJob) -> JobReports:
    """One job's reports, read from one opened ``_kappa`` directory with the bounded timeouts."""
    loc = open_location(f"{live_checkpoint(job).rstrip('/')}/{REPORT_DIR}", READ_TIMEOUTS)
    wants_calls = job.spec.external_calls is not None and job.spec.external_calls.rate_per_second is not None
    boots = job.spec.bootstrap is not None or (job.status is not None and job.status.bootstrap is not None)
    return JobReports(
        progress=read_reports(loc, list(job.spec.sinks)),
        calls=read_calls_at(loc) if wants_calls else None,
        bootstrap=read_record(loc) if boots else None,
    )


def move_if_drained(job: StreamingJob, body: kopf.Body) -> None:
    """The job decided on again when its driver runs on a cordoned node: the decision moves it
    (``reconcile.node_drain``); the timer of a job that moves looks again until it ran elsewhere."""
    owner = owner_of(job)
    if driver_drained(owner.namespace, owner.app_name) is not None:
        reconcile(body)


@reported("StreamingJob")
async def follow_progress(body: kopf.Body, stopped: Any = None, **_: Any) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return  # a job being deleted gets no reads, no decisions, no status writes
    if ctx().lost_nodes:  # a node stopped answering: a pod of this job's left on it goes now
        await asyncio.to_thread(clear_lost_pods, "StreamingJob", body)
    job = parse(StreamingJob, body)
    if ctx().cordoned_nodes and not (job.status and job.status.node_drain):  # a drain: under our driver?
        await asyncio.to_thread(move_if_drained, job, body)
    error: str | None = None
    try:
        halted, reports = await until_stopped(stopped, lambda: read_job_reports(job))
    except Exception as exc:  # the store: this job's condition, never a retry or another's wait
        halted, reports, error = False, None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        log.warning("StreamingJob %s/%s: %s", meta["namespace"], meta["name"], error)
    if halted:
        return
    shown = _shown(job, reports, error, datetime.now(UTC))
    if shown.moves_nothing(body):
        shown.observe(meta["namespace"], meta["name"], reports)
        return  # the copy the watch keeps already shows it: no read, no write
    # the conditions are one list, written whole: decide again on what the server holds now
    halted, fresh = await until_stopped(
        stopped, lambda: ctx().cluster().get_resource("streamingjobs", meta["namespace"], meta["name"])
    )
    if halted or fresh is None or fresh["metadata"].get("deletionTimestamp"):
        return
    job = parse(StreamingJob, fresh)
    shown = _shown(job, reports, error, datetime.now(UTC))
    shown.observe(meta["namespace"], meta["name"], reports)
    await asyncio.to_thread(record, "StreamingJob", fresh, shown.fields)
    post_events(fresh, shown.events)
    if shown.switched:  # the phase is the reconcile's to write: Bootstrapping -> Running
        await asyncio.to_thread(reconcile, fresh)


@dataclass(frozen=True)
class Shown:
    """What one look would show on a job: the status fields, the Events of a change, whether a
    bootstrap's switch is new (the reconcile must run), and the health conditions for gauges."""

    fields: dict[str, Any]
    events: tuple[Any, ...]
    switched: bool
    health: dict[str, bool] | None

    def moves_nothing(self, body: Mapping[str, Any]) -> bool:
        """Whether writing it to the object as ``body`` shows it would change nothing: the
        steady state of a settled job, decided without reading the object again."""
        return not self.events and not self.switched and records_nothing(body, self.fields)

    def observe(self, namespace: str, name: str, reports: JobReports | None) -> None:
        metrics = ctx().metrics
        if metrics is None or reports is None or self.health is None:
            return
        metrics.resources.kafka_lag(namespace, name, lag_gauges(reports.progress))
        metrics.resources.progress(namespace, name, health_gauges(reports.progress), self.health)
        calls = self.fields.get("externalCalls")
        if calls is not None:
            metrics.resources.external_calls("StreamingJob", namespace, name, calls)


def _shown(job: StreamingJob, reports: JobReports | None, error: str | None, now: datetime) -> Shown:
    if reports is None:
        update = decide_unreadable(job, error or "unknown error", now)
        return Shown(update.status, tuple(update.events), False, None)
    update = decide_health(job, reports.progress, now)
    conds = {c["type"]: c["status"] == "True" for c in update.status.get("conditions") or []}
    health = {t: conds.get(t, False) for t in ("Stalled", "Lagging")}
    lag = lag_status(reports.progress)
    fields = update.status if lag is None else {**update.status, "kafkaLag": lag}
    calls = calls_shown(job, reports)
    if calls is not None or (job.status is not None and job.status.external_calls is not None):
        fields = {**fields, "externalCalls": calls}  # None: the limit was removed, and its status goes
    if reports.bootstrap is not None:
        fields = {**fields, "bootstrap": bootstrap_status(reports.bootstrap)}
    return Shown(fields, tuple(update.events), switched_now(job, fields), health)


def calls_shown(job: StreamingJob, reports: JobReports) -> dict[str, Any] | None:
    """``status.externalCalls`` of a job with a limit, from its driver's report (None: no limit)."""
    limit = job.spec.external_calls.rate_per_second if job.spec.external_calls is not None else None
    return None if limit is None else calls_status(reports.calls, limit)


def external_calls(job: StreamingJob) -> dict[str, Any] | None:
    """``status.externalCalls`` as the timer would show it now (reads the job's store)."""
    return calls_shown(job, read_job_reports(job))
