"""Spark's own metrics on every driver the operator starts, for Prometheus to scrape (issue 61).

Spark serves them itself: its ``PrometheusServlet`` sink on the driver's UI port (``spark-ui``,
4040), with each streaming query's gauges (``spark.sql.streaming.metricsEnabled``: input rate,
processing rate, batch duration as ``latency``, state rows and bytes, the event-time watermark).
The chart's scrape job for drivers (charts/kappa-operator/templates/prometheus-config.yaml)
finds the driver pods through the Kubernetes API and labels their series with the job's
namespace and StreamingJob or Backfill name from the pod's labels (``Owner.labels``); it renames
the per-query gauges, whose names Spark builds from ``spark.metrics.namespace`` (fixed here, or
it would be each run's application id) and the query's name.

Only the applications' pods get these, not `kappa run` and the tests' local sessions: those run
with the UI off (``spark_app.apps.session.SESSION_DEFAULTS``), which saves a local session's
start the web server it never serves. A job's own ``sparkConf`` wins over each setting (a job
can turn its UI off: it then has no metrics endpoint either)."""

from __future__ import annotations

from spark_app.contract.config import JobConfig

METRICS_NAMESPACE = "kappa"
"""The first part of every metric name the driver's servlet serves
(``metrics_kappa_driver_...``): the scrape configuration's rename rules match it."""
METRICS_PATH = "/metrics/prometheus"
"""Where on the UI port the servlet answers (the chart's scrape job's ``metrics_path``)."""
SERVLET = "spark.metrics.conf.*.sink.prometheusServlet"
STREAMING_GAUGES = (
    "inputRate_total",
    "processingRate_total",
    "latency",
    "states_rowsTotal",
    "states_usedBytes",
    "eventTime_watermark",
)
"""The per-query gauges the chart's scrape job keeps, each renamed ``kappa_spark_streaming_<gauge>``
(its ``metric_relabel_configs``; the dashboard's Spark drivers row reads them)."""

DRIVER_METRICS = {
    "spark.ui.enabled": "true",
    "spark.metrics.namespace": METRICS_NAMESPACE,
    f"{SERVLET}.class": "org.apache.spark.metrics.sink.PrometheusServlet",
    f"{SERVLET}.path": METRICS_PATH,
    "spark.sql.streaming.metricsEnabled": "true",
}


def with_driver_metrics(cfg: JobConfig) -> JobConfig:
    """``cfg`` as an application's pods run it: ``DRIVER_METRICS`` under the job's own
    ``sparkConf``. Pure."""
    return cfg.model_copy(update={"spark_conf": {**DRIVER_METRICS, **cfg.spark_conf}})
