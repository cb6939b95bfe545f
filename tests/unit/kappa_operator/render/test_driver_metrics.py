"""Spark's own metrics on the operator's drivers (``kappa_operator.render.driver_metrics``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.driver_metrics import DRIVER_METRICS, METRICS_PATH, with_driver_metrics
from kappa_operator.render.jobconfig import streaming_job_config
from kappa_operator.render.spark_application import LIVE_RESTART, Launch, Owner, spark_application
from spark_app.apps.session import SESSION_DEFAULTS

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def job() -> StreamingJob:
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    return StreamingJob.model_validate({**data, "metadata": {"name": "rmi", "uid": "u-1"}})


def test_every_application_serves_sparks_prometheus_endpoint_with_streaming_metrics(job: StreamingJob) -> None:
    cfg = streaming_job_config(job)
    launch = Launch(job.spec.image, job.spec.driver, job.spec.executor, "spark", LIVE_RESTART)
    conf = spark_application(Owner("StreamingJob", "rmi", "default", "u"), cfg, launch, "h")["spec"]["sparkConf"]
    assert conf["spark.ui.enabled"] == "true", "the servlet is served by the driver's UI"
    assert (
        conf["spark.metrics.conf.*.sink.prometheusServlet.class"] == "org.apache.spark.metrics.sink.PrometheusServlet"
    )
    assert conf["spark.metrics.conf.*.sink.prometheusServlet.path"] == METRICS_PATH
    assert conf["spark.sql.streaming.metricsEnabled"] == "true"
    assert conf["spark.metrics.namespace"] == "kappa", "a fixed name, not each run's application id"


def test_the_jobs_own_setting_wins_and_local_sessions_keep_the_ui_off(job: StreamingJob) -> None:
    cfg = streaming_job_config(job)
    own = cfg.model_copy(update={"spark_conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}})
    conf = with_driver_metrics(own).spark_conf
    assert conf["spark.ui.enabled"] == "false" and conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.sql.streaming.metricsEnabled"] == DRIVER_METRICS["spark.sql.streaming.metricsEnabled"]
    assert with_driver_metrics(cfg).spark_conf != cfg.spark_conf and cfg.spark_conf == job.spec.spark_conf
    assert SESSION_DEFAULTS["spark.ui.enabled"] == "false", "kappa run and the tests start no web server"
