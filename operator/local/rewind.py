"""`kappa run` of a Rewind: ``decide_rewind`` phase by phase; Pause is recorded (nothing of the
job runs here), the restore application's code (``spark_app.apps.restore``, what ``python -m
spark_app restore`` runs on a cluster) runs in-process and leaves its report where the
operator reads it, Resume runs the job once from the restored checkpoint, downstream Rewinds
are written out as manifests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import yaml

from kappa_operator.local.engine import Local, _status, application, log
from kappa_operator.local.job import JobRun, run_job
from kappa_operator.local.overrides import retarget
from kappa_operator.models.common import instant
from kappa_operator.models.rewind import PHASES, Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.observe import restore_points
from kappa_operator.reconcile.checkpoints import checkpoint_status
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.reconcile.rewind import (
    TERMINAL,
    Observed,
    Pause,
    Resume,
    RewindDownstream,
    RunRestore,
    decide_rewind,
    downstream_of,
    paused_by,
    step_failed,
)
from kappa_operator.render.jobconfig import (
    CHECKPOINT_ANNOTATION,
    PAUSED_ANNOTATION,
    SKIP_ANNOTATION,
)
from spark_app.contract.config import parse_config
from spark_app.contract.errors import KappaError, user_message
from spark_app.contract.reports.restore import RestoreReport, SinkRestored, read_report


def forget_rewind(local: Local, rw: Rewind, job: StreamingJob) -> None:
    """What deleting a Rewind does: its record goes, and a job it left paused is unpaused."""
    job = local.objects.apply(job)
    if job.metadata.annotations.get(PAUSED_ANNOTATION) == paused_by(rw):
        local.objects.annotate(job, {PAUSED_ANNOTATION: None})
        local.show.note(f"{job.metadata.name} unpaused (it was paused by this Rewind)")
    local.objects.forget(rw)


def run_rewind(local: Local, rw: Rewind, job: StreamingJob, others: tuple[StreamingJob, ...]) -> int:
    show, objects = local.show, local.objects
    rw, note = retarget(rw, local.opts)
    if note:
        show.notes("override", [note, "the manifest is unchanged"])
    before = (objects.record(rw) or {}).get("status") or {}
    if local.opts.fresh:
        forget_rewind(local, rw, job)
    elif before.get("phase") == "Failed" and not before.get("restores"):
        show.note("the earlier attempt failed before changing anything: running it again as a new Rewind")
        forget_rewind(local, rw, job)
    rw, job = objects.apply(rw), objects.apply(job)
    if rw.status is not None and rw.status.phase in TERMINAL:
        show.note(f"already {rw.status.phase} (recorded in {objects.path(rw)}); --fresh runs it again as a new Rewind")
        show.status("Rewind", rw.metadata.name, _status(rw))
        return 0 if rw.status.phase == "Succeeded" else 1
    resumed: JobRun | None = None
    restored: tuple[dict[str, Any], RestoreReport | None] | None = None
    for _ in range(2 * len(PHASES)):
        phase = rw.status.phase if rw.status and rw.status.phase else "Pending"
        ended = phase == "Restoring" and restored is not None
        seen = Observed(
            job=job,
            app=resumed.app if resumed is not None else None,  # nothing of the job runs here until Resume
            chosen=restore_points.choose_points(rw, job) if phase == "Pending" else (),
            downstream=downstream_of(job, list(others)) if ended and rw.spec.downstream else (),
            restore_app=restored[0] if ended and restored is not None else None,
            report=restored[1] if ended and restored is not None else None,
        )
        plan = decide_rewind(rw, seen, now_rfc3339())
        rw = local.record(rw, plan.status)
        if plan.status.get("phase") in TERMINAL:
            break
        try:
            extra, job, ran, restored_now = _carry_out(local, rw, job, plan.commands)
        except KappaError as exc:  # permanent: the operator records Failed and stops
            rw = local.record(rw, step_failed(rw, str(plan.status.get("phase")), str(exc), now_rfc3339()).status)
            break
        resumed = ran or resumed
        restored = restored_now or restored
        if plan.next_phase is not None:
            done = f"{plan.status.get('phase')} done"
            rw = local.record(rw, {**extra, "phase": plan.next_phase, "message": done}, quiet=True)
        elif extra:
            rw = local.record(rw, extra, quiet=True)
        elif not plan.commands and rw.status is not None and rw.status.phase == phase:
            break  # waiting on something that will not happen here
    return _rewind_result(local, rw, job, resumed)


def _restore(local: Local, job_json: str) -> tuple[dict[str, Any], RestoreReport | None]:
    """The restore application, run in-process: the application as it ended, and the report
    it left where the operator reads it."""
    from spark_app.apps.restore import run_restore

    cfg = parse_config(json.loads(job_json))
    state, message = "COMPLETED", ""
    try:
        done = run_restore(cfg)
        state = "COMPLETED" if done.state == "Restored" else "FAILED"
    except Exception as exc:  # the operator would see a FAILED restore application
        log.debug("restore of %s failed", cfg.name, exc_info=True)
        state, message = "FAILED", user_message(exc)
    return application(state, message, {}), read_report(cfg)


def _carry_out(
    local: Local, rw: Rewind, job: StreamingJob, commands: tuple[Any, ...]
) -> tuple[dict[str, Any], StreamingJob, JobRun | None, tuple[dict[str, Any], RestoreReport | None] | None]:
    """The commands of one step, as ``handlers.rewind._carry_out`` does them on a cluster."""
    show, objects = local.show, local.objects
    extra: dict[str, Any] = {}
    ran = restored = None
    for command in commands:
        match command:
            case Pause(by=by):
                job = objects.annotate(job, {PAUSED_ANNOTATION: by})
                show.note(f"{job.metadata.name}: {PAUSED_ANNOTATION}={by} recorded; nothing of it runs here to stop")
            case RunRestore(config_map=cm):
                restored = _restore(local, cm["data"]["job.json"])
                report = restored[1]
                for s in report.sinks if report is not None else []:
                    show.note(f"restored {s.sink} at batch {s.batch_id}; reset: {_undone(s)}")
            case RewindDownstream(manifests=manifests):
                extra["downstream"] = [m["metadata"]["name"] for m in manifests]
                for m in manifests:
                    path = objects.root / "created" / f"{m['metadata']['name']}.yaml"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(yaml.safe_dump(m, sort_keys=False))
                    job_name = m["spec"]["jobRef"]["name"]
                    show.note(f"created Rewind {m['metadata']['name']} of {job_name}: kappa run {path} (not run here)")
            case Resume(location=location, skip=skip):
                moved: dict[str, str | None] = {CHECKPOINT_ANNOTATION: location, PAUSED_ANNOTATION: None}
                if skip is not None:
                    moved[SKIP_ANNOTATION] = skip
                    show.note(f"{job.metadata.name}: {SKIP_ANNOTATION}={skip}")
                job = objects.annotate(job, moved)
                show.note(f"{job.metadata.name}: {CHECKPOINT_ANNOTATION}={location}; running it once from there")
                ran = run_job(local, job)
                job = ran.job
    return extra, job, ran, restored


def _undone(s: SinkRestored) -> str:
    if s.table:
        return f"{s.table}: removed {s.files_removed} data file(s) written after it"
    if s.undone_records:
        spans = ", ".join(f"{r.topic}[{r.partition}] {r.start}..{r.end - 1}" for r in s.undone_records)
        return f"records written after it, for downstream jobs to skip: {spans}"
    return "nothing written after it to undo"


def _rewind_result(local: Local, rw: Rewind, job: StreamingJob, resumed: JobRun | None) -> int:
    show, status = local.show, _status(rw)
    if rw.status is not None and rw.status.restores and rw.status.phase == "Succeeded":
        show.restores(list(rw.status.restores), rw.status.checkpoint_location)
    if status.get("conditions") and status["conditions"][-1].get("reason") == "NoRestorablePoint":
        _restore_hint(local, rw, job)
    show.status("Rewind", rw.metadata.name, status)
    if status.get("phase") != "Succeeded":
        return 1
    if resumed is not None and resumed.state != "COMPLETED":
        show.error(f"the Rewind succeeded but the resumed run of {job.metadata.name} failed: {resumed.message}")
        return 1
    return 0


def _restore_hint(local: Local, rw: Rewind, job: StreamingJob) -> None:
    """Which points there are; and why a target time from production finds none locally."""
    listed = restore_points.restore_points(job)
    if not listed:
        return
    points = checkpoint_status(listed, datetime.now(UTC))["checkpoints"]
    local.show.points(
        f"{job.metadata.name}: newest restorable points in {job.spec.checkpoints.external_location}", points
    )
    target = rw.spec.target.time
    if target is not None and instant(target) <= min(p.committed_at for p in listed if p.committed_at):
        local.show.print(
            f"Snapshots record the wall-clock time Spark committed each batch, and this machine's run committed all of "
            f"them after {target}: a target time from the production timeline precedes them all. Pick a point of "
            "this run with --target-batch N (or --target-time T); the manifest stays as it is."
        )
