"""Live jobs' progress and health: every ``TICK`` the operator reads what each sink query's
driver last reported (``spark_app.progress_report``, a few hundred bytes next to the live
checkpoint) and shows it in the StreamingJob's status (``progress``, ``kafkaLag``; ``kubectl
get sj`` prints the lag and the last progress), as gauges, and as the ``Stalled`` and
``Lagging`` conditions (``reconcile.health``). It never asks Spark or Kafka."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers.context import ctx, parse, post_events, record, reported
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.health import health_gauges, plan_health
from kappa_operator.reconcile.kafka_lag import lag_gauges, lag_status
from kappa_operator.render.jobconfig import live_checkpoint
from spark_app.progress_report import ProgressReport, read_reports
from spark_app.publish_report import REPORT_DIR
from spark_app.storage import open_location

TICK = 30.0


@kopf.timer(GROUP, VERSION, "streamingjobs", interval=TICK, initial_delay=TICK)
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
    await asyncio.to_thread(record, "StreamingJob", fresh, fields)
    post_events(fresh, plan.events)


def progress_reports(job: StreamingJob) -> list[ProgressReport]:
    """The reports under the checkpoint the job runs from (a Rewind's restored copy, once it
    moved there)."""
    location = live_checkpoint(job)
    return read_reports(open_location(f"{location.rstrip('/')}/{REPORT_DIR}"), list(job.spec.sinks))
