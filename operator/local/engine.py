"""What the walkers of `kappa run` share: the engine that runs a JobConfig (local Spark, or a
fake in unit tests) and one invocation's world."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kappa_operator.local.display import Display
from kappa_operator.local.objects import LocalObjects, R
from kappa_operator.local.overrides import RunOptions
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.apps.result import RunResult
from spark_app.contract.config import JobConfig

if TYPE_CHECKING:
    from spark_app.apps.publish import PublishReport

log = logging.getLogger("kappa.run")


class Engine(Protocol):
    """Runs a JobConfig to its end: local Spark, or a fake in unit tests."""

    def run(self, cfg: JobConfig, publishing: Callable[[str], None] | None = None) -> RunResult:
        """What the ``run`` command does, in-process: the query, then, for a backfill config with
        ``publish``, its validation and publish, as its driver does (``publishing``: told, one
        line, when that starts; ``spark_app.apps.publish.run_and_publish``)."""
        ...

    def publish(self, cfg: JobConfig) -> PublishReport:
        """What the separate publish application does (``python -m spark_app publish``),
        in-process: where a run left no publish report, as the operator decides."""
        ...

    def activity(self) -> str | None:
        """One line on the running queries, for the spinner (None: nothing to say)."""
        ...

    def open_tables(self, job: StreamingJob, backfill: bool) -> None:
        """Opens the tables the run will read before anything is recorded (``tables_read``)."""
        ...


def open_tables(catalogs: dict[str, dict[str, str]], tables: list[tuple[str, str]]) -> None:
    """Each ``(catalog, table)`` opened on this machine before Spark starts: an unreachable
    catalog or a missing table is then said in a second, with the fix (``cli_errors``), instead
    of after half a minute of Spark's start-up (or as a failure of the pipeline), and before a
    local run records anything."""
    from spark_app.catalogs import load_table

    for catalog, table in dict.fromkeys(tables):
        load_table(catalog, catalogs[catalog], table)


def open_source_tables(cfg: JobConfig) -> None:
    """A JobConfig's Iceberg sources' tables (``open_tables``)."""
    from spark_app.contract.sources import IcebergSourceBase

    iceberg = [s for s in cfg.sources.values() if isinstance(s, IcebergSourceBase)]
    open_tables(
        {c: cfg.catalogs[c].properties() for c in {s.catalog for s in iceberg}}, [(s.catalog, s.table) for s in iceberg]
    )


def tables_read(job: StreamingJob, backfill: bool) -> list[tuple[str, str]]:
    """The Iceberg tables a run of ``job`` reads: a Backfill each history table; a live run its
    icebergLive tables and the history tables its Kafka values are parsed into (an archive job
    that declares ``valueSchema`` creates its history table itself)."""
    tables: list[tuple[str, str]] = []
    for src in job.spec.sources.values():
        live = src.live
        if not backfill and live.kind == "icebergLive" and live.table is not None:
            tables.append((live.catalog, live.table))
        elif backfill or live.value_schema is None:
            tables.append((src.history.catalog, src.history.table))
    return tables


class SparkEngine:
    """One SparkSession per process (an existing one is reused: tests, a Rewind's resume)."""

    def __init__(self) -> None:
        self.spark: Any = None
        self._rows: dict[tuple[str, int], int] = {}

    def session(self, cfg: JobConfig) -> Any:
        from spark_app.apps.session import build_session

        if self.spark is None:
            self.spark = build_session(cfg)
            self.spark.sparkContext.setLogLevel("ERROR")
        return self.spark

    def open_tables(self, job: StreamingJob, backfill: bool) -> None:
        from spark_app.contract.config import CatalogConfig

        tables = tables_read(job, backfill)
        catalogs = {c: CatalogConfig.model_validate(job.spec.catalogs[c]).properties() for c, _ in tables}
        open_tables(catalogs, tables)

    def run(self, cfg: JobConfig, publishing: Callable[[str], None] | None = None) -> RunResult:
        from spark_app.apps.publish import run_and_publish

        self._rows = {}
        result, _ = run_and_publish(cfg, self.session(cfg), publishing=publishing)
        return result  # the publish report is read where the operator reads it, by the walker

    def publish(self, cfg: JobConfig) -> PublishReport:
        from spark_app.apps.publish import run_publish

        return run_publish(cfg, self.session(cfg))

    def activity(self) -> str | None:
        if self.spark is None:
            return None
        parts = []
        for q in self.spark.streams.active:
            p = q.lastProgress
            if p is None:
                continue
            d = p if isinstance(p, dict) else json.loads(p.json)
            name = str(d.get("name"))
            self._rows[(name, int(d["batchId"]))] = int(d.get("numInputRows", 0))
            rows = sum(n for (q_name, _), n in self._rows.items() if q_name == name)
            wm = (d.get("eventTime") or {}).get("watermark") or "-"
            wm = "-" if wm.startswith("1970-01-01T00:00:00") else wm  # Spark's "no watermark yet"
            parts.append(f"{name}: batch {d['batchId']}, {rows} rows read, watermark {wm}")
        return "; ".join(parts) or None


@dataclass
class Local:
    """One invocation's world."""

    opts: RunOptions
    show: Display
    objects: LocalObjects
    engine: Engine

    def record(self, obj: R, status: dict[str, Any], quiet: bool = False) -> R:
        """Write a status as the operator would patch it, and show the transition."""
        obj = self.objects.patch_status(obj, status)
        if not quiet:
            current = obj.status.model_dump(by_alias=True, exclude_none=True) if obj.status else {}
            self.show.phase(obj.kind, obj.metadata.namespace, obj.metadata.name, current)
        return obj


def application(state: str, message: str, annotations: dict[str, str]) -> dict[str, Any]:
    """What the Spark operator would report of a local run (the planners read this)."""
    return {
        "metadata": {"annotations": annotations},
        "status": {"applicationState": {"state": state, "errorMessage": message}},
    }


def _status(obj: StreamingJob | Backfill | Rewind) -> dict[str, Any]:
    return obj.status.model_dump(by_alias=True, exclude_none=True) if obj.status else {}
