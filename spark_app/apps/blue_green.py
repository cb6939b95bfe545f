"""The step applications of a blue/green upgrade: ``python -m spark_app compare|switch|discard``
on green's JobConfig (``JobConfig.green``), each leaving a ``StepReport`` in green's
``_kappa/`` for the operator, which reads nothing else (never a row).

- ``compare``: blue's rows in main against green's in its branch over ``green.compareWindow``
  (``bluegreen.compare``), Matched or Refused below ``green.minMatchRatio``.
- ``switch``, once both versions' drivers are gone: each version's final durable batch per
  sink query is read from its checkpoint and pending-commit log, then the pending logs are
  committed (blue's into main, green's into its branch), then ``bluegreen.switch`` cuts at
  one boundary in one snapshot per table. NotAtSeam when green did not end where blue did.
- ``discard``: green's branch removed from every sink table; main untouched.

Each is safe to run again: the report is cleared when a step starts and written last."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial

from pyspark.sql import SparkSession

from spark_app.bluegreen.compare import compare_versions
from spark_app.bluegreen.position import durable_position
from spark_app.bluegreen.switch import (
    OffSeamError,
    SinkSwitch,
    recorded_boundary,
    recorded_green_batches,
    settled_boundary,
    switch,
)
from spark_app.bluegreen.tables import GreenBranch
from spark_app.catalogs import load_table
from spark_app.contract.blue_green import FinalBatch, GreenConfig, NoWatermarkError
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.blue_green import (
    StepReport,
    StepState,
    SwitchedTable,
    clear_step_report,
    write_step_report,
)
from spark_app.contract.reports.progress import read_reports
from spark_app.contract.sinks import IcebergSink
from spark_app.contract.storage import REPORT_DIR, open_location
from spark_app.sinks.iceberg.pending import pending_location
from spark_app.sinks.iceberg.writer import IcebergBatchWriter, checkpoint_query_id

log = logging.getLogger("kappa.bluegreen")

FAULT_ENV = "KAPPA_SWITCH_FAULT"
"""Fault injection for tests: ``kill-before-commit`` kills the switch's driver (its process
group, as a deleted pod's) once B and the final batches are recorded and both pending logs
settled, before main's snapshot: the rerun must switch at the same B."""


def _green(cfg: JobConfig) -> GreenConfig:
    if cfg.green is None:
        raise ConfigError(f"job {cfg.name}: a blue/green step needs green's config (green: {{blueCheckpoint}})")
    return cfg.green


def _base(location: str) -> str:
    return location.rstrip("/")


def branches(cfg: JobConfig) -> list[tuple[str, IcebergSink, GreenBranch]]:
    """Each Iceberg sink with green's branch of its table (a sink without ``timeColumn`` cannot
    be compared or switched: refused by name)."""
    out = []
    for name, sink in cfg.sinks.items():
        if not isinstance(sink, IcebergSink):
            continue
        if sink.time_column is None:
            raise ConfigError(f"sinks.{name} needs timeColumn (the switch replaces its rows from one event time on)")
        props = cfg.catalogs[sink.catalog].properties()
        branch = cfg.sink_branch(name)
        if branch == "main":
            raise ConfigError(f"sinks.{name}: green writes a branch of the table, not main (set the sink's branch)")
        load = partial(load_table, sink.catalog, props, sink.table)
        out.append((name, sink, GreenBranch(name, load, props, sink.time_column, branch, list(sink.key))))
    return out


def _report(cfg: JobConfig, step: str, started: datetime, state: StepState, **fields: object) -> StepReport:
    report = StepReport(step=step, state=state, started_at=started, finished_at=datetime.now(UTC), **fields)  # type: ignore[arg-type]
    write_step_report(cfg.checkpoint.location, report)
    log.info("blue/green %s of %s: %s%s", step, cfg.name, state, f" ({report.error})" if report.error else "")
    return report


def _failing(cfg: JobConfig, step: str, body: Callable[[datetime], StepReport]) -> StepReport:
    """Run ``body``; an error leaves a Failed report naming it and is raised (the application
    fails; the operator runs the step again)."""
    clear_step_report(cfg.checkpoint.location, step)
    started = datetime.now(UTC)
    try:
        return body(started)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:500]
        _report(cfg, step, started, "Failed", error=f"{step} of {cfg.name} failed: {type(exc).__name__}: {first}")
        raise


def run_compare(cfg: JobConfig, spark: SparkSession) -> StepReport:
    green = _green(cfg)
    window = green.compare_window
    if window is None:
        raise ConfigError(f"job {cfg.name}: compare needs green.compareWindow (the operator sets it)")

    def body(started: datetime) -> StepReport:
        sinks = [b for _, _, b in branches(cfg)]
        compared = compare_versions(spark, sinks, window.start, window.end, green.min_match_ratio)
        reason = compared.reason()
        return _report(
            cfg,
            "compare",
            started,
            "Matched" if compared.passed else "Refused",
            tables=compared.tables,
            window_start=window.start,
            window_end=window.end,
            error=reason,
        )

    return _failing(cfg, "compare", body)


def _lookahead(checkpoint: str, sink: str) -> timedelta | None:
    """A version's look-ahead for ``sink``, from the progress report its live driver left."""
    found = read_reports(open_location(f"{_base(checkpoint)}/{REPORT_DIR}"), [sink])
    seconds = found[0].lookahead_s if found else None
    return None if seconds is None else timedelta(seconds=seconds)


def lookaheads(blue: timedelta | None, green: timedelta | None, sink: str) -> tuple[timedelta, timedelta, str | None]:
    """Each version's look-ahead; one a driver did not report takes the other's (a notice says
    so), none reported is zero (a pipeline that emits results only at once)."""
    if blue is not None and green is not None:
        return blue, green, None
    known = blue if blue is not None else green
    if known is None:
        return timedelta(0), timedelta(0), f"sinks.{sink}: neither version reported a look-ahead; 0 taken"
    which = "blue" if blue is None else "green"
    return known, known, f"sinks.{sink}: {which} reported no look-ahead; the other version's ({known}) taken"


def run_switch(cfg: JobConfig, spark: SparkSession) -> StepReport:
    green = _green(cfg)
    blue_base, green_base = _base(green.blue_checkpoint), _base(cfg.checkpoint.location)

    def body(started: datetime) -> StepReport:
        sinks, notices = [], []
        writers = []
        recorded = recorded_green_batches(open_location(green_base))
        for name, sink, table in branches(cfg):
            finals = []
            for version, base, branch in (("blue", blue_base, "main"), ("green", green_base, table.branch)):
                checkpoint = f"{base}/{name}"
                # the position first: a batch recorded in the pending log is durable, and
                # settling the log below commits it without Spark ever logging it done
                found = durable_position(open_location(checkpoint), pending_location(checkpoint, name))
                if found is None:
                    raise OffSeamError(f"sinks.{name}: {version} has no durable batch; nothing was switched")
                finals.append((version, found))
                catalog = cfg.catalogs[sink.catalog]
                writers.append(IcebergBatchWriter(cfg.name, name, sink, catalog, branch, checkpoint, pipelined=True))
            blue_la, green_la, notice = lookaheads(_lookahead(blue_base, name), _lookahead(green_base, name), name)
            if notice:
                notices.append(notice)
            (_, blue_at), (_, green_at) = finals
            if name in recorded:
                green_at = replace(green_at, batch_id=recorded[name])
            sinks.append(
                SinkSwitch(
                    table=table,
                    blue=FinalBatch("blue", name, blue_at, blue_la),
                    green=FinalBatch("green", name, green_at, green_la),
                    green_query_id=checkpoint_query_id(f"{green_base}/{name}"),
                )
            )
        record = open_location(green_base)
        try:  # B and the final batches recorded before anything is committed, settling included
            settled_boundary(record, sinks)
        except OffSeamError as exc:
            return _report(cfg, "switch", started, "NotAtSeam", error=str(exc), notices=notices)
        except NoWatermarkError as exc:
            return _report(cfg, "switch", started, "Refused", error=str(exc), notices=notices)
        for w in writers:  # what a driver recorded and did not commit: into main (blue's), the branch (green's)
            w.recover()
        if os.environ.get(FAULT_ENV) == "kill-before-commit":
            log.warning(
                "fault point reached: switch recorded at %s, main not committed (%s)",
                recorded_boundary(record),
                FAULT_ENV,
            )
            os.killpg(os.getpgrp(), signal.SIGKILL)
        done = switch(spark, record, sinks, green.upgrade or cfg.name)
        switched = [
            SwitchedTable(
                sink=s.table.sink,
                table=_table_name(cfg, s.table.sink),
                rows_removed=d.rows_removed,
                rows_added=d.rows_added,
                snapshot_id=d.snapshot_id,
                earlier=d.snapshot_id is None,
            )
            for s, d in zip(sinks, done, strict=True)
        ]
        b = recorded_boundary(record)
        return _report(cfg, "switch", started, "Switched", switched=switched, boundary=b, notices=notices)

    return _failing(cfg, "switch", body)


def _table_name(cfg: JobConfig, sink: str) -> str:
    config = cfg.sinks[sink]
    assert isinstance(config, IcebergSink)
    return config.table


def run_discard(cfg: JobConfig) -> StepReport:
    """Green's branch removed from each sink table (a branch already gone is done). No
    SparkSession: metadata only."""
    _green(cfg)

    def body(started: datetime) -> StepReport:
        removed = []
        for name, sink, b in branches(cfg):
            table = b.load()
            if b.branch in table.metadata.refs:
                table.manage_snapshots().remove_branch(b.branch).commit()
                log.info("removed %s's branch %s", name, b.branch)
                removed.append(f"{sink.table}@{b.branch}")
        return _report(cfg, "discard", started, "Discarded", removed=removed)

    return _failing(cfg, "discard", body)
