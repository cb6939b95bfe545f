"""The driver's steps of a bootstrap: start (choose once, or read back what was chosen) and
switch (the archive leg ended: record it, then the topics take over)."""

from __future__ import annotations

import logging
import os
import signal
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from spark_app.bootstrap.legs import BootstrapLeg
from spark_app.bootstrap.seam import describe
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.bootstrap import BootstrapRecord, read_record, record_location, write_record

log = logging.getLogger("kappa.bootstrap")

FAULT_ENV = "KAPPA_BOOTSTRAP_FAULT"
"""``kill-before-switch`` / ``kill-after-switch``: the driver dies there like a killed pod (tests)."""


def start(spark: SparkSession, cfg: JobConfig, fresh: bool) -> tuple[BootstrapRecord, BootstrapLeg] | None:
    """The bootstrap this run continues, and its leg; None for a job that does not bootstrap.

    A job that bootstrapped once keeps its two-stream plan for good, even if ``bootstrap`` is
    later removed from its spec (its checkpoint maps offsets to the plan's sources). A job
    with a checkpoint and no record was started without a bootstrap: its state cannot be
    rebuilt in place, and it is refused with the way to do it."""
    if cfg.mode != "live":
        return None
    location, name = record_location(cfg)
    record = read_record(location, name)
    if record is None:
        if cfg.bootstrap is None:
            return None
        if not fresh:
            raise ConfigError(
                f"bootstrap: the job's checkpoint ({cfg.checkpoint.location}) was started without it; a bootstrap "
                "rebuilds state from the archives into a new checkpoint: give the job a new checkpoint location "
                "(or upgrade it with upgrade.mode: stateless), or remove bootstrap"
            )
        from spark_app.bootstrap.archive import decide

        record = decide(spark, cfg)
        write_record(location, record, name)  # intent first: a restart reads the same choice back
    return record, "live" if record.switched else "archive"


def switch(cfg: JobConfig, record: BootstrapRecord) -> tuple[BootstrapRecord, BootstrapLeg]:
    """The archive leg ended with every archive read: from now on (and after any restart) the
    topics are read, from the switch offsets Spark already holds in the checkpoint."""
    _fault("kill-before-switch")
    switched = record.model_copy(update={"switched_at": datetime.now(UTC)})
    location, name = record_location(cfg)
    write_record(location, switched, name)
    for source, offsets in switched.offsets.items():
        log.info("bootstrap of %s: archive read, Kafka from %s", source, describe(offsets))
    _fault("kill-after-switch")
    return switched, "live"


def _fault(point: str) -> None:
    if os.environ.get(FAULT_ENV) == point:
        log.warning("fault injected: %s", point)
        os.killpg(os.getpgrp(), signal.SIGKILL)
