"""Kafka jobs' consumer lag: every ``TICK`` the operator reads what each sink query's driver
last reported (``spark_app.lag_report``, a few hundred bytes next to the live checkpoint) and
shows it in the StreamingJob's status (``kubectl get sj`` prints the total) and as the gauge
``kappa_streamingjob_kafka_lag_records``. It never asks Kafka."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from kappa_operator.handlers.context import ctx, parse, record, reported
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.kafka_lag import lag_gauges, lag_status
from kappa_operator.render.jobconfig import live_checkpoint
from spark_app.lag_report import LagReport, read_reports
from spark_app.publish_report import REPORT_DIR
from spark_app.storage import open_location

TICK = 30.0


def _reads_kafka(spec: Any) -> bool:
    return any(((src or {}).get("live") or {}).get("kind") == "kafka" for src in (spec.get("sources") or {}).values())


@kopf.timer(
    GROUP, VERSION, "streamingjobs", interval=TICK, initial_delay=TICK, when=lambda spec, **_: _reads_kafka(spec)
)
@reported("StreamingJob")
async def follow_kafka_lag(body: kopf.Body, **_: Any) -> None:
    job = parse(StreamingJob, body)
    reports = await asyncio.to_thread(lag_reports, job)
    metrics = ctx().metrics
    if metrics is not None:
        metrics.resources.kafka_lag(job.metadata.namespace, job.metadata.name, lag_gauges(reports))
    fields = lag_status(reports)
    if fields is not None:
        await asyncio.to_thread(record, "StreamingJob", body, {"kafkaLag": fields})


def lag_reports(job: StreamingJob) -> list[LagReport]:
    """The reports under the checkpoint the job runs from (a Rewind's restored copy, once it
    moved there)."""
    location = live_checkpoint(job)
    return read_reports(open_location(f"{location.rstrip('/')}/{REPORT_DIR}"), list(job.spec.sinks))
