"""A job-wide rate limit on what a pipeline calls outside (a geo service, a model endpoint, a
production database): a Backfill replaying a day in an hour must not call a production service
24 times harder than the live job does.

In the pipeline function (on the driver)::

    from spark_app import external_calls

    def pipeline(sources, **args):
        limiter = external_calls.limiter()          # the run's limit (or none)

        @F.pandas_udf("string")
        def country(ips: pd.Series) -> pd.Series:
            limiter.acquire(len(ips))               # one batch request of len(ips) items
            return lookup_many(ips)

        lookup = limiter.limited(lookup_one)        # one token per call of lookup_one

``acquire(n)`` is for ``n`` calls that go out at once; calls made one after another take one
``acquire(1)`` each (``client``).

The limit (``externalCalls.ratePerSecond`` of the JobConfig, set by the operator from the
StreamingJob or Backfill) holds for the whole run: every executor and Python worker leases its
tokens from one lease server the runtime starts in the driver (``serve``), so it is the job's
rate, not a process's. How the leases keep it within a few percent over any second:
``pacing``. Without a limit ``acquire`` returns at once and no server runs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_app.contract.reports.external_calls import ExternalCallsReport, ReportWriter, read_report
from spark_app.external_calls.client import TELL_EVERY_S as _TELL_EVERY_S
from spark_app.external_calls.client import ExternalCallsError, Limiter
from spark_app.external_calls.pacing import max_lease
from spark_app.external_calls.server import LeaseServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_app.contract.config import JobConfig

__all__ = ["ExternalCallsError", "ExternalCallsReport", "Limiter", "Running", "limiter", "read_report", "serve"]
log = logging.getLogger("kappa.external_calls")


class Running:
    """The run's lease server and its report writer (nothing, without a limit)."""

    def __init__(self, server: LeaseServer | None = None, writer: ReportWriter | None = None) -> None:
        self.server, self.writer = server, writer

    @property
    def limiter(self) -> Limiter:
        if self.server is None:
            return Limiter()
        return Limiter(self.server.url, self.server.rate, max_lease(self.server.rate))

    def stop(self) -> ExternalCallsReport | None:
        """Stops serving after the executors' last counts came in; the final report."""
        global _RUNNING
        if _RUNNING is self:
            _RUNNING = _NONE
        if self.server is None:
            return None
        if self.server.counts.granted:
            # a worker's last counts arrive within two tell intervals of its last call
            self.server.wait_quiet(2 * _TELL_EVERY_S + 0.5, at_most_s=15.0)
        report = self.writer.stop() if self.writer is not None else None
        self.server.stop()
        return report


_NONE = Running()
_RUNNING = _NONE


def limiter() -> Limiter:
    """The running job's limiter: call it in the pipeline function, on the driver, and use it
    in the code that runs on the executors. Unlimited (never waits) when the job has no limit
    or the pipeline runs outside kappa's runtime (a unit test of the pipeline)."""
    return _RUNNING.limiter


def serve(cfg: JobConfig, spark: SparkSession) -> Running:
    """Starts the run's lease server when ``cfg`` sets a limit (and its report next to the
    checkpoint); ``limiter()`` hands it to the pipeline. ``stop()`` it when the run ends."""
    global _RUNNING
    _RUNNING.stop()  # a run of this process that failed before its end: its server goes now
    rate = cfg.external_calls.rate_per_second if cfg.external_calls is not None else None
    if rate is None:
        _RUNNING = _NONE
        return _NONE
    master = spark.sparkContext.master or ""
    if master.startswith("local"):
        bind, advertise = "127.0.0.1", "127.0.0.1"
    else:  # executors on other pods reach the driver as Spark's own RPC does
        bind = spark.conf.get("spark.driver.bindAddress", None) or "0.0.0.0"
        advertise = spark.conf.get("spark.driver.host", None) or bind
    server = LeaseServer(rate, bind=bind, advertise=advertise)
    writer = ReportWriter(cfg.checkpoint.location, server.snapshot)
    log.info(
        "external calls of %s limited to %g/s for the whole job (lease server on %s:%s)",
        cfg.name,
        rate,
        advertise,
        server.url.split(":")[2].split("/")[0],
    )
    _RUNNING = Running(server, writer)
    return _RUNNING
