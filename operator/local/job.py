"""`kappa run` of a StreamingJob: ``decide_streaming_job``, the rendered live JobConfig on local
Spark, whose driver externalizes its checkpoint as it would on the cluster (every committed
batch of the run here, the newest one per ``spec.checkpoints.interval`` there); then the
restore points listed as the operator lists them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.markup import escape

from kappa_operator.local.engine import Local, application, log
from kappa_operator.local.overrides import runtime_config
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.observe.restore_points import restore_points, snapshot_failures
from kappa_operator.reconcile.bootstrap import bootstrap_status
from kappa_operator.reconcile.checkpoints import checkpoint_status
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.jobconfig import (
    config_hash,
    streaming_job_config,
)
from spark_app.apps.result import RunResult
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import KappaError, user_message
from spark_app.contract.reports.bootstrap import read_record, record_location


@dataclass(frozen=True)
class JobRun:
    job: StreamingJob
    state: str
    """COMPLETED or FAILED as an application would end; "" when it was not run."""
    message: str
    report: RunResult | None = None
    snapshot_error: str | None = None
    """Externalizing the checkpoint failed (no new restore points)."""

    @property
    def app(self) -> dict[str, Any] | None:
        return application(self.state, self.message, {}) if self.state else None


def run_job(local: Local, job: StreamingJob) -> JobRun:
    show, opts = local.show, local.opts
    job = local.objects.apply(job)
    plan = decide_streaming_job(job, None, now_rfc3339())
    if plan.create_app is None:  # paused by a Rewind, or suspended: the operator runs nothing
        job = local.record(job, plan.status)
        return JobRun(job, "", str(plan.status.get("message")))
    job = local.record(job, plan.status)
    rendered = streaming_job_config(job)
    digest = config_hash(rendered)
    cfg, notes = runtime_config(rendered, opts)
    show.notes("local run", notes)
    hashed = {"kappa.dev/config-hash": digest}
    running = application("RUNNING", f"running locally from {cfg.checkpoint.location}", hashed)
    job = local.record(job, decide_streaming_job(job, running, now_rfc3339()).status)
    report, state, message = None, "COMPLETED", "ran locally to the end of what was there (availableNow)"
    text = f"{job.metadata.name}: live from {cfg.checkpoint.location}" + (" (Ctrl-C stops)" if opts.follow else "")
    try:
        with show.ticking(text, local.engine.activity):
            report = local.engine.run(cfg)
    except KeyboardInterrupt:
        message = "stopped by Ctrl-C"
    except Exception as exc:  # Spark raises its own types; the operator would see a FAILED application
        log.debug("run of %s failed", cfg.name, exc_info=True)
        state, message = "FAILED", user_message(exc)
    fields: dict[str, Any] = {}
    snapshot_error = None
    if job.spec.checkpoints.external_location:
        try:
            fields = snapshot_job(local, job, report)
        except KappaError as exc:  # the operator logs it and looks again on its timer
            snapshot_error = str(exc)
            show.error(f"listing the checkpoint's snapshots: {exc}")
    boot = bootstrap_seen(cfg)
    if boot is not None:  # what the operator's progress timer copies from the driver's record
        fields = {**fields, "bootstrap": boot}
        if boot.get("switchedAt"):
            show.print(f"Switched: the archives were read; Kafka from {describe_offsets(boot)}")
    if state == "FAILED":
        _failure_hint(local, message)
    ended = application(state, message, hashed)
    job = local.record(job, {**decide_streaming_job(job, ended, now_rfc3339(), restarts=False).status, **fields})
    if report is not None:
        show.runs(f"{job.metadata.name}: live, locally", [(job.metadata.name, report)])
        for notice in report.notices:
            show.print(f"[yellow]{escape(notice)}[/]")
        latest = [n for n, s in cfg.sources.items() if getattr(s, "starting_position", None) == "latest"]
        if report.input_rows == 0 and latest:
            show.note(
                f"nothing read: {', '.join(latest)} start at startingPosition latest (a new query reads only what "
                "is appended after it starts); --starting-position earliest replays what the tables hold"
            )
    return JobRun(job, state, message, report, snapshot_error)


def bootstrap_seen(cfg: JobConfig) -> dict[str, Any] | None:
    """``status.bootstrap`` from the record the run's driver wrote (None: it does not bootstrap)."""
    location, name = record_location(cfg)
    record = read_record(location, name)
    return None if record is None else bootstrap_status(record)


def describe_offsets(boot: dict[str, Any]) -> str:
    return ", ".join(
        f"{o['topic']}[{o['partition']}]@{'earliest' if o['offset'] is None else o['offset']}" for o in boot["offsets"]
    )


def _failure_hint(local: Local, message: str) -> None:
    if local.opts.local is not None and "does not exist in catalog" in message:
        where = local.opts.local / "catalogs"
        local.show.note(f"with --local the tables live in the SQLite catalogs under {where}: create them there")


def snapshot_job(local: Local, job: StreamingJob, report: RunResult | None) -> dict[str, Any]:
    """What the run's driver externalized, and the status fields the operator records of the
    restore points (``reconcile.checkpoints``)."""
    now = datetime.now(UTC)
    for sink, batches in (report.externalized if report is not None else {}).items():
        if batches:
            uri = f"{(job.spec.checkpoints.external_location or '').rstrip('/')}/{sink}"
            local.show.note(f"the driver externalized {sink} batches {_ranges(batches)} to {uri}")
    fields = checkpoint_status(restore_points(job), now, snapshot_failures(job))
    if fields["checkpoints"]:
        local.show.points(f"{job.metadata.name}: newest restore points (status.checkpoints)", fields["checkpoints"])
    return fields


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
