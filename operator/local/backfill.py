"""`kappa run` of a Backfill: ``decide_backfill`` -> alignment group declared in an embedded
coordinator -> the backfill JobConfig run to its end, validating and publishing in the same
run when publish is enabled, as its driver does on a cluster (``spark_app.apps.publish
.run_and_publish``, in-process on one SparkSession) -> Succeeded / Failed as the operator
decides them from the report it left. Where the operator would still create a separate publish
application (the run left no report of its own), its code runs in-process next: Publishing,
then the end its report says."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from rich.markup import escape

from kappa_operator.coordinator.groups import EmbeddedGroups
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.local.engine import Local, _status, application, log
from kappa_operator.local.job import _failure_hint
from kappa_operator.local.overrides import runtime_config
from kappa_operator.models.backfill import Backfill, BackfillRestart
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill
from kappa_operator.reconcile.backfill.intent import NONCE, BackfillIntent
from kappa_operator.reconcile.backfill.progress import progress_status
from kappa_operator.reconcile.backfill.publish import wants_publish_report
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.render.jobconfig import (
    backfill_config,
    backfill_group,
)
from spark_app.apps.publish import publishing_line
from spark_app.contract.durations import format_duration
from spark_app.contract.errors import user_message
from spark_app.contract.reports.publish import PublishReport, read_report
from spark_app.contract.trace import read_trace


def run_backfill(local: Local, bf: Backfill, job: StreamingJob) -> int:
    show = local.show
    if local.opts.fresh:
        local.objects.forget(bf)
    bf = local.objects.apply(bf)
    token = secrets.token_urlsafe(16)
    with EmbeddedCoordinator(Service(token)) as coordinator:
        groups = EmbeddedGroups(coordinator.service)

        def act(plan: BackfillIntent, current: Backfill) -> Backfill:
            if plan.join_group is not None:
                groups.join(plan.join_group)  # before the driver reports into it
            if plan.leave_group is not None:
                groups.leave(plan.leave_group.name, current.metadata.name)
            return local.record(current, plan.status)

        app = application("COMPLETED", "", {NONCE: str(bf.spec.restart_nonce)})
        plan = decide_backfill(bf, job, app if _publishing(bf) else None, coordinator.url, now_rfc3339())
        if plan.create_app is None and plan.create_publish_app is None:
            bf = act(plan, bf)
            return _backfill_done_before(local, bf)
        if plan.create_app is not None:
            bf = act(plan, bf)
            created = dict(plan.create_app["metadata"]["annotations"])  # what it runs with (nonce, publish)
            bf, app = _run_backfill(local, bf, job, coordinator.url, token, groups, created)
            ran = _not_restarted(bf)
            plan = decide_backfill(ran, job, app, coordinator.url, now_rfc3339(), report=_report(ran, job, app))
            bf = act(plan, bf)
        # No report of the run (the operator's fallback, in-process): Publishing is recorded, so an
        # interrupted `kappa run` publishes next time.
        if plan.create_publish_app is not None:
            bf = act(plan, bf)
            publisher = _publish(local, bf, job)
            bf = act(decide_backfill(bf, job, app, coordinator.url, now_rfc3339(), None, False, *publisher), bf)
    if bf.status and bf.status.published:
        show.published(list(bf.status.published))
    show.status("Backfill", bf.metadata.name, _status(bf))
    return 0 if bf.status is not None and bf.status.phase == "Succeeded" else 1


def _not_restarted(bf: Backfill) -> Backfill:
    """`kappa run` is its own driver: its failure is shown, not retried (no pod was lost; a
    rerun with a bumped restartNonce resumes from the checkpoint, as on a cluster)."""
    return bf.model_copy(update={"spec": bf.spec.model_copy(update={"restart": BackfillRestart(max_attempts=0)})})


def _no() -> str | None:
    return None


def _publishing(bf: Backfill) -> bool:
    """Recorded as Publishing: its query completed in an earlier, interrupted `kappa run`."""
    return bf.status is not None and bf.status.phase == "Publishing"


def _report(bf: Backfill, job: StreamingJob, app: dict[str, Any]) -> PublishReport | None:
    """The publish report the run left, where and when the operator reads it."""
    return read_report(backfill_config(bf, job, None)) if wants_publish_report(bf, app, None) else None


def _publish(local: Local, bf: Backfill, job: StreamingJob) -> tuple[dict[str, Any], PublishReport | None]:
    """The separate publish application, run in-process: the publish application as it ended,
    and the report it left where the operator reads it."""
    cfg = backfill_config(bf, job, None)
    state, message = "COMPLETED", ""
    with local.show.ticking(publishing_line(cfg), _no):
        try:
            local.engine.publish(cfg)
        except Exception as exc:  # the operator would see a FAILED publish application
            log.debug("publish of %s failed", cfg.name, exc_info=True)
            state, message = "FAILED", user_message(exc)
    return application(state, message, {NONCE: str(bf.spec.restart_nonce)}), read_report(cfg)


def _backfill_done_before(local: Local, bf: Backfill) -> int:
    """The planner kept a finished Backfill as it was (as the operator does)."""
    status = _status(bf)
    phase = status.get("phase")
    where = local.objects.path(bf)
    if phase == "Succeeded":
        local.show.note(f"already Succeeded (recorded in {where}); --fresh runs it again as a new Backfill")
        local.show.status("Backfill", bf.metadata.name, status)
        return 0
    if status.get("conditions") and status["conditions"][-1].get("reason") == "InvalidSpec":
        return 2
    local.show.note(
        f"Failed earlier (recorded in {where}): bump spec.restartNonce to resume it from its checkpoint and branch, "
        "as on the cluster, or run with --fresh for a new Backfill"
    )
    return 1


def _run_backfill(
    local: Local,
    bf: Backfill,
    job: StreamingJob,
    url: str,
    token: str,
    groups: EmbeddedGroups,
    annotations: dict[str, str],
) -> tuple[Backfill, dict[str, Any]]:
    """Run the rendered backfill; the application (``annotations``: the rendered one's) as it
    would have ended."""
    show = local.show
    trace = local.objects.root / "traces" / f"backfill-{bf.metadata.name}-{(bf.metadata.uid or 'local')[:8]}.jsonl"
    trace.parent.mkdir(parents=True, exist_ok=True)
    cfg, notes = runtime_config(backfill_config(bf, job, url), local.opts, token=token, trace_path=str(trace))
    show.notes(
        "local run", notes + ([f"alignment through the embedded coordinator at {url}"] if cfg.coordinator else [])
    )
    group, owner = backfill_group(bf), bf.metadata.name
    current = bf
    stage: list[str] = []  # the run's line once it validates and publishes

    def tick() -> str | None:
        nonlocal current
        if stage:
            return f"{owner}: {stage[-1]}"
        seen = groups.progress(group, owner)
        if seen is None or seen.global_watermark_us is None:
            return local.engine.activity()
        fields = progress_status(current, seen.global_watermark_us, seen.lag_us, datetime.now(UTC), seen)
        current = local.objects.patch_status(current, fields)  # as the operator's follow timer
        return (
            f"{owner}: {fields['progress']} of the window, global watermark {fields['globalWatermark']}, "
            f"lag {fields['alignmentLag'] or '-'}, ETA {fields['eta'] or '-'}"
        )

    state, message, report = "COMPLETED", "", None
    w = bf.spec.window
    try:
        with show.ticking(f"{owner}: backfilling {w.start} .. {w.end} from Iceberg history", tick):
            report = local.engine.run(cfg, publishing=stage.append)
    except KeyboardInterrupt:
        state, message = "FAILED", "interrupted by Ctrl-C"
    except Exception as exc:  # the operator would see a FAILED application with this message
        log.debug("backfill %s failed", cfg.name, exc_info=True)
        state, message = "FAILED", user_message(exc)
        _failure_hint(local, message)
    if report is not None:
        show.runs(f"{owner}: backfill, locally", [(owner, report)])
        decisions = read_trace(trace, "admission") if trace.exists() else []
        throttled = sum(1 for d in decisions if d.get("throttled"))
        if decisions:  # none in a bounded run: it admits nothing, it reads the window at once
            show.print(f"{throttled}/{len(decisions)} admission decisions throttled by alignment")
        if report.lateness is not None:
            show.print(f"guard: {report.lateness.message}")
        if report.edges is not None:
            e = report.edges
            show.note(f"edges: {e.warmup_message}; drain {format_duration(e.drain)} ({e.horizon.describe()})")
            for notice in e.notices:
                show.print(f"[yellow]{escape(notice)}[/]" if notice.startswith("not yet final") else escape(notice))
    bf = local.objects.apply(bf)  # with the progress the ticker recorded
    return bf, application(state, message, annotations)
