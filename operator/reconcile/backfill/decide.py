"""What to do for a Backfill (pure): resolve its job, launch it, follow it, finish it.

Phases: Pending (the StreamingJob is missing) -> Running (application submitted; progress is
the alignment group's global watermark between window start and end) -> Succeeded | Failed.
With spec.publish.enabled the backfill's own application, once its query has written the
window, validates the branch against main and publishes the window in the same driver
(``spark_app.apps.publish.run_and_publish``) and leaves a report next to the checkpoint: when
the application completed, the operator ends on that report (read by the handler; the decision
here is pure). Only an application that completed without a publish report of its run (an
image from before publish ran in the driver, or a lost report) leads to Publishing: a
separate SparkApplication, ``python -m spark_app publish``, validates and publishes, and the
Backfill ends on its report. A refused validation completes the application and fails the
Backfill (ValidationFailed) without a restart; a publish that raised fails the application,
which restarts (``spec.restart``) and resumes from the checkpoint with nothing left to read.

A failed backfill keeps its checkpoint, branch and group membership: bumping
spec.restartNonce submits it again and it resumes where it stopped (a publish that failed or
was refused runs again in the resubmitted application's driver, after the resumed query, which
then has nothing to read). Its coordinator credential goes as soon as nothing runs that could
present it; a resubmission makes a new one.

A submitted backfill keeps a copy of its StreamingJob (``SAVED_JOB``): everything its runs
are rendered from (pipeline, sources, sinks, checkpoint annotation). When the job is deleted
it says so once and goes on with that copy: a running one finishes, and a failed one resumes
from it when its restartNonce is bumped, as its message promises (its checkpoint and branch
belong to the backfill, not to the job). Only a run nobody asked for is never started from the
copy: the application of a backfill whose job is gone vanished, so it fails with JobDeleted,
leaves its group and drops its credential until a new restartNonce asks for the run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kappa_operator.coordinator.messages import GroupSpec
from kappa_operator.coordinator.scopes import scoped_token
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import instant
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.dry_run import Planning, planning_step
from kappa_operator.reconcile.backfill.intent import (
    NO_PACE,
    NONCE,
    PUBLISH,
    SAVED_JOB,
    BackfillIntent,
    StatusAt,
    alignment_group,
    nonce_of,
    owner_of,
    reason_of,
    saved_job,
    submitted_nonce,
)
from kappa_operator.reconcile.backfill.publish import (
    completed,
    done,
    driver_publish,
    publish_settings,
    publishing,
)
from kappa_operator.reconcile.backfill_queue import ACTIVE, Admitted, Queued
from kappa_operator.reconcile.estimates import calibration, measured
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.phases import ENDED, STATES, app_message, app_state
from kappa_operator.reconcile.restarts import (
    REFUSED,
    next_backfill_restart,
    refused_its_configuration,
    submitted_twice,
    uncounted,
)
from kappa_operator.render.jobconfig import backfill_branch, backfill_checkpoint, backfill_config, config_hash
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    config_map,
    job_launch,
    spark_application,
    token_secret,
)
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.publish import PublishReport
from spark_app.contract.reports.run import RunReport


def decide_backfill(
    bf: Backfill,
    job: StreamingJob | None,
    app: dict[str, Any] | None,
    coordinator_url: str | None,
    now: str,
    admin_token: str | None = None,
    job_saved: bool = False,
    publish_app: dict[str, Any] | None = None,
    report: PublishReport | None = None,
    *,
    planning: Planning | None = None,
    turn: Admitted | Queued | None = None,
    run_report: RunReport | None = None,
    driver_left: bool = False,
) -> BackfillIntent:
    """``admin_token``: the coordinator's, from which this backfill's credential (scoped to its
    group) is derived. ``job_saved``: ``job`` is the copy kept at submission (the StreamingJob
    was deleted since): the backfill finishes with it. ``publish_app``: the separate publish
    application, if one was created; ``report``: the publish report, read when
    ``wants_publish_report`` says (left by the backfill's driver, or by that application).
    ``planning``: the plan application, its report and the namespace's calibration runs.
    ``turn``: whether the queue lets it start now (None: no limits). ``run_report``: what its driver
    measured of its micro-batches, once its application completed (calibrates the next ETAs).
    ``driver_left``: a driver pod of its application still exists (read when the application is
    gone while the backfill runs: the restart waits for it)."""
    intent = _decide(
        bf, job, app, coordinator_url, now, admin_token, job_saved, publish_app, report, planning, turn, driver_left
    )
    intent = _without_credential_when_stopped(_job_deleted_said(bf, intent, job_saved), app)
    phase_now = bf.status.phase if bf.status else None
    if intent.status.get("phase") != "Succeeded" or phase_now == "Succeeded" or job is None:
        return intent
    if run_report is not None and run_report.mode is not None:
        said = {"alignmentMode": run_report.mode, "alignmentModeReason": run_report.mode_reason}
        intent = replace(intent, status={**intent.status, **said})
    run = measured(bf, job, instant(now), run_report)
    if run is None:
        return intent
    return replace(intent, status={**intent.status, "calibration": calibration(run)}, record_calibration=run)


def _job_deleted_said(bf: Backfill, intent: BackfillIntent, job_saved: bool) -> BackfillIntent:
    """The first decision made with the kept copy says that the job is gone: status.jobDeleted
    and one Warning (none more if the decision itself already warns JobDeleted)."""
    if not job_saved or (bf.status is not None and bf.status.job_deleted):
        return intent
    events = intent.events
    if all(e.reason != "JobDeleted" for e in events):
        name = bf.spec.job_ref.name
        then = (
            "bump spec.restartNonce to resume with the configuration kept at submission"
            if intent.status.get("phase") == "Failed"
            else "going on with the configuration kept at submission"
        )
        events = (Event("Warning", "JobDeleted", f"StreamingJob {name} was deleted: {then}"), *events)
    return replace(intent, status={**intent.status, "jobDeleted": True}, events=events)


def _without_credential_when_stopped(intent: BackfillIntent, app: dict[str, Any] | None) -> BackfillIntent:
    """A failed backfill whose application is gone or ended, like one that left its group,
    drops its coordinator credential: no driver is left to present it, and it must not outlive
    the run it was made for. One still running keeps it (a spec made invalid mid-run fails the
    backfill, not its driver)."""
    stopped = intent.status.get("phase") == "Failed" and (app is None or app_state(app) in ENDED)
    return replace(intent, delete_secret=True) if stopped or intent.leave_group is not None else intent


def _decide(
    bf: Backfill,
    job: StreamingJob | None,
    app: dict[str, Any] | None,
    coordinator_url: str | None,
    now: str,
    admin_token: str | None,
    job_saved: bool,
    publish_app: dict[str, Any] | None,
    report: PublishReport | None,
    planning: Planning | None,
    turn: Admitted | Queued | None,
    driver_left: bool = False,
) -> BackfillIntent:
    status = StatusAt(bf, now)
    phase_now = bf.status.phase if bf.status else None
    nonce = bf.spec.restart_nonce
    same_nonce = submitted_nonce(bf) == nonce
    if done(bf, app):
        return BackfillIntent(status=status.kept())  # a new restartNonce runs a failed one again
    if job is None:
        msg = f"StreamingJob {bf.spec.job_ref.name} not found in {bf.metadata.namespace}; waiting for it"
        return BackfillIntent(
            status=status("Pending", "JobNotFound", msg),
            events=(Event("Warning", "JobNotFound", msg),) if phase_now != "Pending" else (),
            retry_after=30,
        )
    try:
        cfg = backfill_config(bf, job, coordinator_url)
    except (ValueError, KappaError) as exc:
        msg = (
            f"cannot run this backfill: {exc} (its spec is immutable: create a new Backfill; after a fix of "
            "the StreamingJob, bumping spec.restartNonce tries this one again)"
        )
        return BackfillIntent(
            status=status("Failed", "InvalidSpec", msg),  # no nonce recorded: a new restartNonce tries again
            events=(Event("Warning", "InvalidSpec", msg),) if phase_now != "Failed" else (),
        )
    group = alignment_group(cfg)
    owner = owner_of(bf)
    extra: dict[str, Any] = {"applicationName": owner.app_name, "checkpoint": backfill_checkpoint(bf, job)}
    if cfg.external_calls is not None and cfg.external_calls.rate_per_second is not None:
        # the limit its runs get; the follow timer adds what the driver reports its calls did
        extra["externalCalls"] = {"ratePerSecond": cfg.external_calls.rate_per_second}
    if phase_now == "Publishing" and app is not None and nonce_of(app) == str(nonce):
        return publishing(bf, job, cfg, status, (app, publish_app), report, group, extra)
    if app is None:
        if job_saved and same_nonce:  # its job is gone and nobody asked for this run
            msg = (
                f"StreamingJob {bf.spec.job_ref.name} was deleted and this backfill's application is gone; "
                f"checkpoint and branch kept: bump spec.restartNonce to resume with the configuration kept at "
                "submission"
            )
            return BackfillIntent(
                leave_group=group,
                delete_secret=True,
                status=status("Failed", "JobDeleted", msg, **extra),
                events=(Event("Warning", "JobDeleted", msg),) if phase_now != "Failed" else (),
            )
        if bf.spec.dry_run:
            return planning_step(bf, job, cfg, status, planning or Planning(), extra)
        if isinstance(turn, Queued) and phase_now not in ACTIVE:
            # one restarting (or whose application was deleted) keeps the slot it was admitted to
            return _queued(bf, status, turn, extra)
        if driver_left and phase_now == "Running":
            # the failed run's driver pod is still going (the application's deletion reaches it
            # in the background): a new application now would find it, and the Spark operator
            # would fail its submission (``submitted_twice``). The timer looks again.
            return BackfillIntent(join_group=group)
        credential = None
        if group is not None and admin_token:
            credential = token_secret(owner, scoped_token(admin_token, [group.name]))
        token = owner.token_secret_name if credential is not None else None
        launch = job_launch(job, BACKFILL_RESTART, bf.spec.image, token, bf.spec.driver, bf.spec.executor)
        created = spark_application(owner, cfg, launch, config_hash(cfg))
        created["metadata"]["annotations"][NONCE] = str(nonce)
        if cfg.publish is not None:
            created["metadata"]["annotations"][PUBLISH] = publish_settings(cfg)
        window = f"{bf.spec.window.start} .. {bf.spec.window.end}"
        verb = "resubmitted" if phase_now == "Failed" else "created"
        copy = " with the configuration kept at submission (its StreamingJob was deleted)" if job_saved else ""
        then = ", then validating it against main and publishing, in the same application" if cfg.publish else ""
        return BackfillIntent(
            config_map=config_map(owner, cfg, {SAVED_JOB: saved_job(job)}),
            secret=credential,
            create_app=created,
            join_group=group,
            status=status(
                "Running",
                "Submitted",
                f"backfilling {window} into {backfill_branch(bf)}{then}",
                restartNonce=nonce,
                startedAt=now,
                **({} if same_nonce else {"restarts": 0, "nextRestartAt": None}),
                queuePosition=None,
                # a new application has no state yet: the failed one's is not carried over
                **{**extra, "applicationState": None},
            ),
            events=(Event("Normal", "Submitted", f"{verb} SparkApplication {owner.app_name} for {window}{copy}"),),
        )
    app_nonce = nonce_of(app)
    if app_nonce != str(nonce):
        msg = f"restartNonce {app_nonce} -> {nonce}: resubmitting from the checkpoint"
        return BackfillIntent(
            delete_app=True,
            delete_publish_app=publish_app is not None,
            status=status("Running", "Restarting", msg, **extra),
            events=(Event("Normal", "Restarting", msg),),
        )
    state = app_state(app) or ""
    if not state and _just_submitted(bf):
        # created by us and not yet taken by the Spark operator: nothing new to say or write
        return BackfillIntent(join_group=group)
    _, _, reason = STATES.get(state, ("Unknown", False, "Unknown"))
    message = app_message(app) or f"SparkApplication is {state or 'submitted'}"
    extra["applicationState"] = state
    if state == "COMPLETED":
        if cfg.publish is not None or driver_publish(app) is not None:
            return publishing(bf, job, cfg, status, (app, publish_app), report, group, extra)
        return completed(bf, status, group, extra)
    phase = "Failed" if STATES.get(state, ("",))[0] == "Failed" else "Running"
    if phase == "Failed":
        return _failed_run(bf, status, message, reason, group, extra, now)
    changed = bf.status is None or bf.status.application_state != state
    kind = "Warning" if phase == "Failed" else "Normal"
    return BackfillIntent(
        join_group=group if phase == "Running" else None,
        status=status(phase, reason, message, **extra),
        events=(Event(kind, reason, message),) if changed else (),
    )


def _failed_run(
    bf: Backfill,
    status: StatusAt,
    error: str,
    reason: str,
    group: GroupSpec | None,
    extra: dict[str, Any],
    now: str,
) -> BackfillIntent:
    """Its application failed: back off, then delete it so that a new one resumes from the
    checkpoint and branch (``spec.restart``); after ``maxAttempts`` restarts in a row, Failed.
    The delay and the attempt are in status first, so an operator restart in between neither
    skips the wait nor counts the failure twice."""
    current = bf.status
    if current is not None and current.phase == "Failed":
        return BackfillIntent(status=status.kept())  # decided: a later look at the same application changes nothing
    if current is not None and current.phase == "Running" and reason_of(bf) == "Restarting":
        return BackfillIntent(delete_app=True, join_group=group)  # its deletion still under way
    if current is not None and current.phase == "Running" and current.next_restart_at:
        wait = (instant(current.next_restart_at) - instant(now)).total_seconds()
        if wait > 0:
            return BackfillIntent(join_group=group)  # the timer looks again
        msg = f"restart {current.restarts} of the failed application, from the checkpoint, after: {error}"
        return BackfillIntent(
            delete_app=True,
            join_group=group,
            status=status("Running", "Restarting", msg, **extra, nextRestartAt=None, **NO_PACE),
            events=(Event("Normal", "Restarting", msg),),
        )
    if refused_its_configuration(error):
        message = f"{error}; {REFUSED}: fix it, then bump spec.restartNonce (checkpoint and branch kept)"
        changed = current is None or current.phase != "Failed"
        return BackfillIntent(
            status=status("Failed", "ConfigRefused", message, **extra, nextRestartAt=None),
            events=(Event("Warning", "Failed", message),) if changed else (),
        )
    decision = next_backfill_restart(bf, instant(now), counted=not submitted_twice(error))
    if decision is None:
        made = current.restarts if current else 0
        tried = f"; not restarted again after {made} restarts (spec.restart.maxAttempts)" if made else ""
        message = f"{error}{tried}; checkpoint and branch kept: bump spec.restartNonce to resume"
        changed = current is None or current.phase != "Failed"
        return BackfillIntent(
            status=status("Failed", reason, message, **extra, nextRestartAt=None),
            events=(Event("Warning", "Failed", message),) if changed else (),
        )
    attempt, at = decision
    msg = f"{error}; restart {attempt} at {at} from the checkpoint (spec.restart){uncounted(error)}"
    return BackfillIntent(
        join_group=group,  # its members hold at its last watermark until the new driver reports
        # no ETA while nothing runs: the rate of the last minutes would put it at months
        status=status("Running", "BackingOff", msg, **extra, restarts=attempt, nextRestartAt=at, **NO_PACE),
        events=(Event("Warning", "BackingOff", msg),),
    )


def _just_submitted(bf: Backfill) -> bool:
    """Its status says it submitted its application and has seen no state of it yet."""
    st = bf.status
    if st is None or st.phase != "Running" or st.application_state:
        return False
    return reason_of(bf) == "Submitted"


def _queued(bf: Backfill, status: StatusAt, queued: Queued, extra: dict[str, Any]) -> BackfillIntent:
    """Over the cluster's or the namespace's limit: wait, with the position and the reason."""
    was = bf.status.phase if bf.status else None
    since = bf.status.queued_since if bf.status is not None and bf.status.queued_since else status.now
    return BackfillIntent(
        status=status("Queued", "Queued", queued.reason, queuePosition=queued.position, queuedSince=since, **extra),
        events=(Event("Normal", "Queued", queued.reason),) if was != "Queued" else (),
    )


def submitted(bf: Backfill) -> bool:
    """Whether it was ever submitted (status.restartNonce is recorded at submission only), so
    that a copy of its job was kept: without its job it goes on with that copy instead of
    waiting in Pending for a job that may never come back. A succeeded one needs no job."""
    return bf.status is not None and bf.status.restart_nonce is not None and bf.status.phase != "Succeeded"


def follow_step(bf: Backfill, job_listed: bool) -> str:
    """What the periodic look at a followed backfill does: ``"reconcile"``, ``"progress"`` (a
    running one: its group's watermark only) or ``"wait"`` (nothing to write).

    ``job_listed``: its StreamingJob is in the operator's in-memory index of jobs (no API call
    per backfill and tick). A running backfill whose job disappeared is reconciled now, so it
    says so within a tick instead of when its application next changes; a pending one that
    was never submitted keeps waiting quietly for its job."""
    status = bf.status
    if status is None:
        return "reconcile"
    if status.phase == "Running" and (status.next_restart_at or reason_of(bf) == "Restarting"):
        return "reconcile"  # a failed application: its restart is due, or its deletion under way
    if status.phase == "Running" and (status.model_extra or {}).get("retries"):
        return "reconcile"  # its last decision failed (e.g. its completed driver's report unreadable): retried
    if status.phase == "Running":
        return "reconcile" if not job_listed and not status.job_deleted else "progress"
    if status.phase == "Pending" and not job_listed and not submitted(bf):
        return "wait"
    return "reconcile"
