"""Live jobs' progress and health: every ``--progress-interval`` (``TICK`` by default) the
operator reads what each sink query's driver last reported (``spark_app.progress_report``, a
few hundred bytes next to the live checkpoint) and shows it in the StreamingJob's status
(``progress``, ``kafkaLag``; ``kubectl get sj`` prints the lag and the last progress), as
gauges, and as the ``Stalled`` and ``Lagging`` conditions (``reconcile.health``). It never
asks Spark or Kafka."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers.context import ctx, parse, post_events, record, reported
from kappa_operator.handlers.streaming_job import reconcile
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.bootstrap import bootstrap_status, switched_now
from kappa_operator.reconcile.external_calls import calls_status
from kappa_operator.reconcile.health import health_gauges, plan_health
from kappa_operator.reconcile.kafka_lag import lag_gauges, lag_status
from kappa_operator.render.jobconfig import live_checkpoint
from spark_app.bootstrap.record import read_record
from spark_app.external_calls.report import read_report as read_calls_report
from spark_app.progress_report import ProgressReport, read_reports
from spark_app.publish_report import REPORT_DIR
from spark_app.storage import open_location

TICK = 30.0
"""The default interval: a report a driver writes at most every 5 s reaches status within it."""


_registered: list[float] = []
"""The interval the timer was registered at in this process (kopf's registry is global)."""


def follow_progress_every(interval: float = TICK) -> None:
    """Registers the progress timer with kopf at the operator's ``--progress-interval`` (a
    decorator would fix it at import): a shorter one shows a stall or a switch sooner and reads
    every job's reports that much more often. Once per process: kopf's registry is global, so an
    operator started again in the same process (tests) keeps the timer, and must ask the same."""
    if interval <= 0:
        raise ValueError(f"the progress interval must be > 0 s, got {interval}")
    if _registered:
        if _registered[0] != interval:
            raise ValueError(f"the progress timer runs every {_registered[0]} s in this process, not {interval}")
        return
    kopf.timer(GROUP, VERSION, "streamingjobs", interval=interval, initial_delay=interval)(follow_progress)
    _registered.append(interval)


@reported("StreamingJob")
async def follow_progress(body: kopf.Body, **_: Any) -> None:
    meta = body["metadata"]
    reports = await asyncio.to_thread(progress_reports, parse(StreamingJob, body))
    # the conditions are one list, written whole: decide on what the server holds now
    fresh = await asyncio.to_thread(ctx().cluster().get_resource, "streamingjobs", meta["namespace"], meta["name"])
    if fresh is None:
        return
    job = parse(StreamingJob, fresh)
    plan = plan_health(job, reports, datetime.now(UTC))
    metrics = ctx().metrics
    if metrics is not None:
        conds = {c["type"]: c["status"] == "True" for c in plan.status.get("conditions") or []}
        health = {t: conds.get(t, False) for t in ("Stalled", "Lagging")}
        metrics.resources.kafka_lag(meta["namespace"], meta["name"], lag_gauges(reports))
        metrics.resources.progress(meta["namespace"], meta["name"], health_gauges(reports), health)
    lag = lag_status(reports)
    fields = plan.status if lag is None else {**plan.status, "kafkaLag": lag}
    calls = await asyncio.to_thread(external_calls, job)
    if calls is not None or (job.status is not None and job.status.external_calls is not None):
        fields = {**fields, "externalCalls": calls}  # None: the limit was removed, and its status goes
        if metrics is not None and calls is not None:
            metrics.resources.external_calls("StreamingJob", meta["namespace"], meta["name"], calls)
    boot = await asyncio.to_thread(bootstrap_fields, job)
    if boot is not None:
        fields = {**fields, "bootstrap": boot}
    await asyncio.to_thread(record, "StreamingJob", fresh, fields)
    post_events(fresh, plan.events)
    if switched_now(job, fields):  # the phase is the reconcile's to write: Bootstrapping -> Running
        await asyncio.to_thread(reconcile, fresh)


def bootstrap_fields(job: StreamingJob) -> dict[str, Any] | None:
    """``status.bootstrap`` from the driver's record next to the checkpoint the job runs from
    (None: the job does not bootstrap, or its driver has not chosen yet)."""
    if job.spec.bootstrap is None and (job.status is None or job.status.bootstrap is None):
        return None
    location = open_location(f"{live_checkpoint(job).rstrip('/')}/{REPORT_DIR}")
    found = read_record(location)
    return None if found is None else bootstrap_status(found)


def external_calls(job: StreamingJob) -> dict[str, Any] | None:
    """``status.externalCalls`` of a job with a limit: its driver's report under the checkpoint
    it runs from (None: no limit)."""
    limit = job.spec.external_calls.rate_per_second if job.spec.external_calls is not None else None
    if limit is None:
        return None
    return calls_status(read_calls_report(live_checkpoint(job)), limit)


def progress_reports(job: StreamingJob) -> list[ProgressReport]:
    """The reports under the checkpoint the job runs from (a Rewind's restored copy, once it
    moved there)."""
    location = live_checkpoint(job)
    return read_reports(open_location(f"{location.rstrip('/')}/{REPORT_DIR}"), list(job.spec.sinks))
