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

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kappa_operator.coordinator.core import GroupSpec
from kappa_operator.coordinator.scopes import scoped_token
from kappa_operator.models.backfill import Backfill, PublishedTable
from kappa_operator.models.common import Condition, instant
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill_queue import ACTIVE, Admitted, Queued
from kappa_operator.reconcile.conditions import Verdict, run_once, set_conditions
from kappa_operator.reconcile.estimates import Run, calibration, executor_cores, failed_plan, measured, plan_status
from kappa_operator.reconcile.phases import ENDED, STATES, app_message, app_state
from kappa_operator.reconcile.restarts import REFUSED, next_backfill_restart, parse_time, refused_its_configuration
from kappa_operator.reconcile.streaming_job import Event
from kappa_operator.render.jobconfig import backfill_branch, backfill_checkpoint, backfill_config, config_hash
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    Owner,
    config_map,
    job_launch,
    spark_application,
    token_secret,
)
from spark_app.contract.alignment import aligned_members
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.plan import PlanReport
from spark_app.contract.reports.publish import PublishReport
from spark_app.contract.reports.run import RunReport

if TYPE_CHECKING:  # a view of the coordinator's answer; the decisions here import no service
    from kappa_operator.coordinator.groups import Progress as GroupProgress


@dataclass(frozen=True)
class Progress:
    """Where the group's global watermark is in the window, and when it will reach the end."""

    ratio: float
    eta: timedelta | None

    @property
    def percent(self) -> str:
        return f"{self.ratio * 100:.0f}%"


def progress(
    start: datetime,
    end: datetime,
    global_watermark: datetime | None,
    previous: tuple[datetime, float] | None,
    now: datetime,
) -> Progress:
    """``previous``: (when, ratio) of the last observation, for the rate behind the ETA."""
    if global_watermark is None:
        return Progress(0.0, None)
    span = (end - start).total_seconds()
    ratio = min(1.0, max(0.0, (global_watermark - start).total_seconds() / span))
    eta = None
    if previous is not None and ratio > previous[1] and now > previous[0]:
        rate = (ratio - previous[1]) / (now - previous[0]).total_seconds()
        eta = timedelta(seconds=round((1.0 - ratio) / rate))
    return Progress(ratio, eta)


@dataclass(frozen=True)
class BackfillPlan:
    config_map: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None
    """The backfill's coordinator credential (scoped to its alignment group)."""
    create_app: dict[str, Any] | None = None
    delete_app: bool = False
    """Delete the application (a restartNonce change: it is submitted again afterwards)."""
    join_group: GroupSpec | None = None
    """Declare this backfill's members in its alignment group (idempotent)."""
    leave_group: GroupSpec | None = None
    """Remove this backfill's members from its group (done, or deleted)."""
    delete_secret: bool = False
    """Remove its coordinator credential: nothing runs that could present it (it ended, or
    failed with its application stopped); a resubmission makes a new one."""
    create_publish_app: dict[str, Any] | None = None
    """The application validating and publishing the branch (its report decides the end)."""
    delete_publish_app: bool = False
    """Delete the publish application (a restartNonce change, or one of an earlier attempt)."""
    create_plan_app: dict[str, Any] | None = None
    """The application planning the backfill from metadata (spec.dryRun)."""
    record_calibration: Run | None = None
    """Add this finished backfill's throughput to the namespace's calibration ConfigMap."""
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    retry_after: float | None = None
    """Look again later (the job is missing)."""


#: A nonce on the application says which spec.restartNonce submitted it.
NONCE = "kappa.dev/restart-nonce"
#: On a backfill's application: the publish settings its driver validates and publishes with
#: once its query has written the window (JSON; absent: its driver does not publish).
PUBLISH = "kappa.dev/publish"
TERMINAL = ("Succeeded", "Failed")


SAVED_JOB = "streamingjob.json"
"""The ConfigMap key holding the StreamingJob as it was at submission."""


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
    if status.phase == "Running" and (status.next_restart_at or _reason(bf) == "Restarting"):
        return "reconcile"  # a failed application: its restart is due, or its deletion under way
    if status.phase == "Running" and (status.model_extra or {}).get("retries"):
        return "reconcile"  # its last decision failed (e.g. its completed driver's report unreadable): retried
    if status.phase == "Running":
        return "reconcile" if not job_listed and not status.job_deleted else "progress"
    if status.phase == "Pending" and not job_listed and not submitted(bf):
        return "wait"
    return "reconcile"


def owner_of(bf: Backfill) -> Owner:
    return Owner("Backfill", bf.metadata.name, bf.metadata.namespace, bf.metadata.uid)


def saved_job(job: StreamingJob) -> str:
    """The StreamingJob a backfill was submitted with, as JSON: a Backfill keeps what it needs
    (its job's pipeline, catalogs, sinks), so deleting the job mid-run does not strand it."""
    meta = job.metadata
    keep = {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid, "annotations": meta.annotations}
    body = {"apiVersion": job.api_version, "kind": job.kind, "metadata": keep}
    return json.dumps({**body, "spec": job.spec.model_dump(by_alias=True, mode="json", exclude_none=True)})


def alignment_group(cfg: JobConfig) -> GroupSpec | None:
    """The members this backfill's driver reports as, in the group it shares (None: unordered)."""
    members = aligned_members(cfg)
    if not members:
        return None
    drift = cfg.alignment.effective_drift // timedelta(microseconds=1)
    return GroupSpec(name=cfg.alignment_group, members=members, max_drift_us=max(drift, 1))


class _Status:
    """Status documents of one Backfill at one instant: conditions keep their transition times."""

    def __init__(self, bf: Backfill, now: str) -> None:
        self.bf, self.now = bf, now
        self.previous: list[Condition] = list(bf.status.conditions) if bf.status else []
        self.base: dict[str, Any] = {"observedGeneration": bf.metadata.generation, "branch": backfill_branch(bf)}

    def __call__(self, phase: str, reason: str, message: str, **extra: Any) -> dict[str, Any]:
        verdict = Verdict(phase, reason, message)
        conds = set_conditions(self.previous, run_once(phase), verdict, self.now, self.bf.metadata.generation)
        if phase == "Succeeded":  # the numbers people watch say done, not their last sample
            extra = {**DONE, **extra}
        elif phase == "Failed":
            extra = {"eta": None, **extra}
        return {
            **self.base,
            **extra,
            "phase": phase,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }

    def kept(self) -> dict[str, Any]:
        return self.bf.status.model_dump(by_alias=True, exclude_none=True) if self.bf.status else {}


DONE = {
    "progress": "100%",
    "progressRatio": 1.0,
    "eta": None,
    "alignmentLag": None,
    "readRate": None,
    "readBytesPerSecond": None,
}
"""A finished backfill's progress fields (no stale ETA or lag from its last sample)."""


def plan_backfill(
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
) -> BackfillPlan:
    """``admin_token``: the coordinator's, from which this backfill's credential (scoped to its
    group) is derived. ``job_saved``: ``job`` is the copy kept at submission (the StreamingJob
    was deleted since): the backfill finishes with it. ``publish_app``: the separate publish
    application, if one was created; ``report``: the publish report, read when
    ``wants_publish_report`` says (left by the backfill's driver, or by that application).
    ``planning``: the plan application, its report and the namespace's calibration runs.
    ``turn``: whether the queue lets it start now (None: no limits). ``run_report``: what its driver
    measured of its micro-batches, once its application completed (calibrates the next ETAs)."""
    plan = _decide(bf, job, app, coordinator_url, now, admin_token, job_saved, publish_app, report, planning, turn)
    plan = _without_credential_when_stopped(_job_deleted_said(bf, plan, job_saved), app)
    phase_now = bf.status.phase if bf.status else None
    if plan.status.get("phase") != "Succeeded" or phase_now == "Succeeded" or job is None:
        return plan
    if run_report is not None and run_report.mode is not None:
        said = {"alignmentMode": run_report.mode, "alignmentModeReason": run_report.mode_reason}
        plan = replace(plan, status={**plan.status, **said})
    run = measured(bf, job, datetime.fromisoformat(now.replace("Z", "+00:00")), run_report)
    if run is None:
        return plan
    return replace(plan, status={**plan.status, "calibration": calibration(run)}, record_calibration=run)


def _job_deleted_said(bf: Backfill, plan: BackfillPlan, job_saved: bool) -> BackfillPlan:
    """The first decision made with the kept copy says that the job is gone: status.jobDeleted
    and one Warning (none more if the decision itself already warns JobDeleted)."""
    if not job_saved or (bf.status is not None and bf.status.job_deleted):
        return plan
    events = plan.events
    if all(e.reason != "JobDeleted" for e in events):
        name = bf.spec.job_ref.name
        then = (
            "bump spec.restartNonce to resume with the configuration kept at submission"
            if plan.status.get("phase") == "Failed"
            else "going on with the configuration kept at submission"
        )
        events = (Event("Warning", "JobDeleted", f"StreamingJob {name} was deleted: {then}"), *events)
    return replace(plan, status={**plan.status, "jobDeleted": True}, events=events)


def _without_credential_when_stopped(plan: BackfillPlan, app: dict[str, Any] | None) -> BackfillPlan:
    """A failed backfill whose application is gone or ended, like one that left its group,
    drops its coordinator credential: no driver is left to present it, and it must not outlive
    the run it was made for. One still running keeps it (a spec made invalid mid-run fails the
    backfill, not its driver)."""
    stopped = plan.status.get("phase") == "Failed" and (app is None or app_state(app) in ENDED)
    return replace(plan, delete_secret=True) if stopped or plan.leave_group is not None else plan


@dataclass(frozen=True)
class Planning:
    """What planning needs to know: the plan application, its report (once it ended), and the
    throughput of the namespace's finished backfills (for the ETA)."""

    app: dict[str, Any] | None = None
    report: PlanReport | None = None
    runs: tuple[Run, ...] = ()


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
) -> BackfillPlan:
    status = _Status(bf, now)
    phase_now = bf.status.phase if bf.status else None
    nonce = bf.spec.restart_nonce
    same_nonce = _submitted_nonce(bf) == nonce
    if _done(bf, app):
        return BackfillPlan(status=status.kept())  # a new restartNonce runs a failed one again
    if job is None:
        msg = f"StreamingJob {bf.spec.job_ref.name} not found in {bf.metadata.namespace}; waiting for it"
        return BackfillPlan(
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
        return BackfillPlan(
            status=status("Failed", "InvalidSpec", msg),  # no nonce recorded: a new restartNonce tries again
            events=(Event("Warning", "InvalidSpec", msg),) if phase_now != "Failed" else (),
        )
    group = alignment_group(cfg)
    owner = owner_of(bf)
    extra: dict[str, Any] = {"applicationName": owner.app_name, "checkpoint": backfill_checkpoint(bf, job)}
    if cfg.external_calls is not None and cfg.external_calls.rate_per_second is not None:
        # the limit its runs get; the follow timer adds what the driver reports its calls did
        extra["externalCalls"] = {"ratePerSecond": cfg.external_calls.rate_per_second}
    if phase_now == "Publishing" and app is not None and _nonce_of(app) == str(nonce):
        return _publishing(bf, job, cfg, status, (app, publish_app), report, group, extra)
    if app is None:
        if job_saved and same_nonce:  # its job is gone and nobody asked for this run
            msg = (
                f"StreamingJob {bf.spec.job_ref.name} was deleted and this backfill's application is gone; "
                f"checkpoint and branch kept: bump spec.restartNonce to resume with the configuration kept at "
                "submission"
            )
            return BackfillPlan(
                leave_group=group,
                delete_secret=True,
                status=status("Failed", "JobDeleted", msg, **extra),
                events=(Event("Warning", "JobDeleted", msg),) if phase_now != "Failed" else (),
            )
        if bf.spec.dry_run:
            return _planning(bf, job, cfg, status, planning or Planning(), extra)
        if isinstance(turn, Queued) and phase_now not in ACTIVE:
            # one restarting (or whose application was deleted) keeps the slot it was admitted to
            return _queued(bf, status, turn, extra)
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
        return BackfillPlan(
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
    app_nonce = _nonce_of(app)
    if app_nonce != str(nonce):
        msg = f"restartNonce {app_nonce} -> {nonce}: resubmitting from the checkpoint"
        return BackfillPlan(
            delete_app=True,
            delete_publish_app=publish_app is not None,
            status=status("Running", "Restarting", msg, **extra),
            events=(Event("Normal", "Restarting", msg),),
        )
    state = app_state(app) or ""
    if not state and _just_submitted(bf):
        # created by us and not yet taken by the Spark operator: nothing new to say or write
        return BackfillPlan(join_group=group)
    _, _, reason = STATES.get(state, ("Unknown", False, "Unknown"))
    message = app_message(app) or f"SparkApplication is {state or 'submitted'}"
    extra["applicationState"] = state
    if state == "COMPLETED":
        if cfg.publish is not None or _driver_publish(app) is not None:
            return _publishing(bf, job, cfg, status, (app, publish_app), report, group, extra)
        return _completed(bf, status, group, extra)
    phase = "Failed" if STATES.get(state, ("",))[0] == "Failed" else "Running"
    if phase == "Failed":
        return _failed_run(bf, status, message, reason, group, extra, now)
    changed = bf.status is None or bf.status.application_state != state
    kind = "Warning" if phase == "Failed" else "Normal"
    return BackfillPlan(
        join_group=group if phase == "Running" else None,
        status=status(phase, reason, message, **extra),
        events=(Event(kind, reason, message),) if changed else (),
    )


def _failed_run(
    bf: Backfill,
    status: _Status,
    error: str,
    reason: str,
    group: GroupSpec | None,
    extra: dict[str, Any],
    now: str,
) -> BackfillPlan:
    """Its application failed: back off, then delete it so that a new one resumes from the
    checkpoint and branch (``spec.restart``); after ``maxAttempts`` restarts in a row, Failed.
    The delay and the attempt are in status first, so an operator restart in between neither
    skips the wait nor counts the failure twice."""
    current = bf.status
    if current is not None and current.phase == "Failed":
        return BackfillPlan(status=status.kept())  # decided: a later look at the same application changes nothing
    if current is not None and current.phase == "Running" and _reason(bf) == "Restarting":
        return BackfillPlan(delete_app=True, join_group=group)  # its deletion still under way
    if current is not None and current.phase == "Running" and current.next_restart_at:
        wait = (parse_time(current.next_restart_at) - parse_time(now)).total_seconds()
        if wait > 0:
            return BackfillPlan(join_group=group)  # the timer looks again
        msg = f"restart {current.restarts} of the failed application, from the checkpoint, after: {error}"
        return BackfillPlan(
            delete_app=True,
            join_group=group,
            status=status("Running", "Restarting", msg, **extra, nextRestartAt=None, **NO_PACE),
            events=(Event("Normal", "Restarting", msg),),
        )
    if refused_its_configuration(error):
        message = f"{error}; {REFUSED}: fix it, then bump spec.restartNonce (checkpoint and branch kept)"
        changed = current is None or current.phase != "Failed"
        return BackfillPlan(
            status=status("Failed", "ConfigRefused", message, **extra, nextRestartAt=None),
            events=(Event("Warning", "Failed", message),) if changed else (),
        )
    decision = next_backfill_restart(bf, parse_time(now))
    if decision is None:
        made = current.restarts if current else 0
        tried = f"; not restarted again after {made} restarts (spec.restart.maxAttempts)" if made else ""
        message = f"{error}{tried}; checkpoint and branch kept: bump spec.restartNonce to resume"
        changed = current is None or current.phase != "Failed"
        return BackfillPlan(
            status=status("Failed", reason, message, **extra, nextRestartAt=None),
            events=(Event("Warning", "Failed", message),) if changed else (),
        )
    attempt, at = decision
    msg = f"{error}; restart {attempt} at {at} from the checkpoint (spec.restart)"
    return BackfillPlan(
        join_group=group,  # its members hold at its last watermark until the new driver reports
        # no ETA while nothing runs: the rate of the last minutes would put it at months
        status=status("Running", "BackingOff", msg, **extra, restarts=attempt, nextRestartAt=at, **NO_PACE),
        events=(Event("Warning", "BackingOff", msg),),
    )


NO_PACE = {"eta": None, "progressAt": None}
"""While a failed application waits and restarts: no ETA, and no observation to take the next
one's rate from. Minutes of a restart between two observations made the first rate after it
near zero, and the ETA months ("318 days" seen on the node)."""


def _reason(bf: Backfill) -> str | None:
    """The reason of its Progressing condition (what it does now)."""
    st = bf.status
    found = next((c for c in st.conditions if c.type == "Progressing"), None) if st else None
    return found.reason if found is not None else None


def _just_submitted(bf: Backfill) -> bool:
    """Its status says it submitted its application and has seen no state of it yet."""
    st = bf.status
    if st is None or st.phase != "Running" or st.application_state:
        return False
    return _reason(bf) == "Submitted"


def _submitted_nonce(bf: Backfill) -> int | None:
    return bf.status.restart_nonce if bf.status is not None else None


def _nonce_of(app: dict[str, Any]) -> str:
    return str(((app.get("metadata") or {}).get("annotations") or {}).get(NONCE, "0"))


def publish_settings(cfg: JobConfig) -> str:
    """A backfill config's publish settings as its application's ``PUBLISH`` annotation."""
    assert cfg.publish is not None
    return json.dumps(cfg.publish.model_dump(by_alias=True, exclude_none=True, mode="json"), sort_keys=True)


def _driver_publish(app: dict[str, Any]) -> str | None:
    """The publish settings ``app``'s driver runs with (None: it does not publish)."""
    found = ((app.get("metadata") or {}).get("annotations") or {}).get(PUBLISH)
    return None if found is None else str(found)


def _done(bf: Backfill, app: dict[str, Any] | None) -> bool:
    """Nothing left to decide: Succeeded, or Failed for its current restartNonce with its
    application gone or its publish failed (a new restartNonce runs a failed one again)."""
    phase_now = bf.status.phase if bf.status else None
    same_nonce = _submitted_nonce(bf) == bf.spec.restart_nonce
    return phase_now == "Succeeded" or (phase_now == "Failed" and same_nonce and (app is None or _publish_failed(bf)))


def wants_publish_report(bf: Backfill, app: dict[str, Any] | None, publish_app: dict[str, Any] | None) -> bool:
    """Whether ``plan_backfill`` needs the publish report (the handler reads it, a KB next to
    the checkpoint; never otherwise): not done, and either the separate publish application of
    this restartNonce ended, or, none running, the backfill's own application of this
    restartNonce completed with publish asked (now, or by the settings its driver ran with)."""
    if _done(bf, app):
        return False
    nonce = str(bf.spec.restart_nonce)
    if publish_app is not None and _nonce_of(publish_app) == nonce:
        return app_state(publish_app) in ENDED
    if app is None or _nonce_of(app) != nonce or app_state(app) != "COMPLETED":
        return False
    return bf.spec.publish.enabled or _driver_publish(app) is not None


def of_this_run(bf: Backfill, report: PublishReport) -> bool:
    """Whether ``report`` was written after the backfill's current application was submitted
    (``status.startedAt``, recorded at each submission): by its driver or by a publish
    application after it, not by an earlier attempt. A driver that publishes clears the report
    when it starts, but one from an image before that neither clears nor writes it and would
    find an earlier attempt's report (the publish application's, before a restartNonce bump).
    A driver clock far behind the operator's only costs a publish application that finds main
    published already (it commits nothing and reports what was done)."""
    started = bf.status.started_at if bf.status is not None else None
    return started is None or report.started_at >= parse_time(started)


PUBLISH_FAILURES = ("ValidationFailed", "PublishFailed")


def _publish_failed(bf: Backfill) -> bool:
    """Failed in its publish (refused, or the publish application failed): kept until a new
    restartNonce, never published again by an event or an operator restart."""
    conds = bf.status.conditions if bf.status else []
    return any(c.type == "Failed" and c.status == "True" and c.reason in PUBLISH_FAILURES for c in conds)


def _publishing(
    bf: Backfill,
    job: StreamingJob,
    cfg: JobConfig,
    status: _Status,
    apps: tuple[dict[str, Any], dict[str, Any] | None],
    report: PublishReport | None,
    group: GroupSpec | None,
    extra: dict[str, Any],
) -> BackfillPlan:
    """The query completed (``apps``: its application and the separate publish application,
    if any): end on the publish report its driver left, when the driver ran with the publish
    settings asked now. Otherwise (no report of this run, ``of_this_run``: an image from before
    publish ran in the driver, or a lost report; or spec.publish changed since submission, as it
    may until the run completes) run the separate publish application with the settings asked
    now, follow it, and end on its report. spec.publish disabled since submission cannot stop
    a driver from publishing: what it published is said."""
    app, publish_app = apps
    owner = owner_of(bf)
    nonce = str(bf.spec.restart_nonce)
    branch = backfill_branch(bf)
    asked = None if cfg.publish is None else publish_settings(cfg)
    ran_with = _driver_publish(app)
    this_runs = report if report is not None and of_this_run(bf, report) else None
    # the driver's publish is the one asked for, or, publish disabled since, it changed main anyway
    driver_did = this_runs is not None and (ran_with == asked or (asked is None and this_runs.state == "Published"))
    if publish_app is None and this_runs is not None and driver_did:
        cleared = {**extra, "publishApplicationName": None, "publishApplicationState": None}
        return _ended_on(bf, this_runs, group, status, cleared, f"SparkApplication {owner.app_name}")
    if publish_app is None and asked is None:  # disabled since submission; its driver published nothing
        return _completed(bf, status, group, extra)
    extra = {**extra, "publishApplicationName": owner.publish_app_name}
    if publish_app is not None and _nonce_of(publish_app) != nonce:  # an earlier attempt's
        msg = f"restartNonce {_nonce_of(publish_app)} -> {nonce}: publishing again"
        return BackfillPlan(delete_publish_app=True, status=status("Publishing", "Publishing", msg, **extra))
    if publish_app is None:
        launch = job_launch(job, BACKFILL_RESTART, bf.spec.image, None, bf.spec.driver, bf.spec.executor)
        created = spark_application(owner, cfg, launch, config_hash(cfg), command="publish")
        created["metadata"]["annotations"][NONCE] = nonce
        why = (
            "its publish settings changed since it was submitted"
            if ran_with is not None and ran_with != asked
            else "it left no publish report of this run (an image from before publish ran in the backfill's driver, "
            "or the report was lost)"
        )
        msg = (
            f"completed, but {why}; validating {branch} against main and publishing the window in a separate "
            f"SparkApplication {owner.publish_app_name}"
        )
        return BackfillPlan(
            config_map=config_map(owner, cfg, {SAVED_JOB: saved_job(job)}),  # it publishes as asked now
            create_publish_app=created,
            status=status("Publishing", "Publishing", msg, publishApplicationState="", **extra),
            events=(Event("Normal", "Publishing", msg),)
            if bf.status is None or bf.status.phase != "Publishing"
            else (),
        )
    state = app_state(publish_app) or ""
    extra["publishApplicationState"] = state
    if state not in ENDED:
        msg = (
            f"validating {branch} against main and publishing the window: SparkApplication "
            f"{owner.publish_app_name} is {state or 'submitted'}"
        )
        return BackfillPlan(status=status("Publishing", "Publishing", msg, **extra))
    if this_runs is None:
        why = app_message(publish_app) or f"it ended {state} without a report"
        return _publish_failed_plan(status, f"SparkApplication {owner.publish_app_name}: {why}", extra)
    return _ended_on(bf, this_runs, group, status, extra, f"SparkApplication {owner.publish_app_name}")


def _completed(bf: Backfill, status: _Status, group: GroupSpec | None, extra: dict[str, Any]) -> BackfillPlan:
    msg = f"completed into branch {backfill_branch(bf)} (publish is not enabled)"
    return BackfillPlan(
        leave_group=group,
        status=status("Succeeded", "Completed", msg, **extra),
        events=(Event("Normal", "Completed", msg),),
    )


def _ended_on(
    bf: Backfill, report: PublishReport, group: GroupSpec | None, status: _Status, extra: dict[str, Any], where: str
) -> BackfillPlan:
    """The end a publish report says: Published or Refused (``published``), or Failed (what
    failed in ``where``, the application that published)."""
    if report.state == "Failed":
        return _publish_failed_plan(status, f"{where}: {report.error or 'no reason given'}", extra)
    return published(bf, report, group, status.now, extra)


def _publish_failed_plan(status: _Status, why: str, extra: dict[str, Any]) -> BackfillPlan:
    msg = (
        f"publish failed: {why}; main is unchanged or fully published (each table's publish is one snapshot): "
        "bump spec.restartNonce to run it again"
    )
    return BackfillPlan(
        status=status("Failed", "PublishFailed", msg, **extra),
        events=(Event("Warning", "PublishFailed", msg),),
    )


def _published_table(t: Any) -> dict[str, Any]:
    return PublishedTable(
        table=t.table,
        match_ratio=t.match_ratio,
        rows_removed=t.rows_removed,
        rows_added=t.rows_added,
        snapshot_id=t.snapshot_id,
        main_rows=t.main_rows,
        branch_rows=t.branch_rows,
        matched=t.matched,
        differing_keys=list(t.differing_keys),
    ).model_dump(by_alias=True)


def published(
    bf: Backfill, report: PublishReport, group: GroupSpec | None, now: str, extra: dict[str, Any] | None = None
) -> BackfillPlan:
    """After publish: Succeeded with what each table got (and the group left), or Failed with
    the reason (main unchanged for the table that refused; branch, checkpoint, group kept)."""
    status = _Status(bf, now)
    extra = extra or {}
    done = [_published_table(t) for t in report.tables]
    ratio = min((t.match_ratio for t in report.tables), default=None)
    if report.state != "Published":
        msg = f"publish refused: {report.error}"
        return BackfillPlan(
            status=status("Failed", "ValidationFailed", msg, published=done, matchRatio=ratio, **extra),
            events=(Event("Warning", "ValidationFailed", msg),),
        )
    tables = ", ".join(
        f"{t.table} (match {t.match_ratio:.4f}, "
        + (
            "main already equal to the branch: no commit)"
            if t.snapshot_id is None
            else f"-{t.rows_removed} +{t.rows_added})"
        )
        for t in report.tables
    )
    msg = f"published {backfill_branch(bf)} into main: {tables or 'no Iceberg sink to publish'}"
    events = (Event("Normal", "Published", msg),)
    not_final = tuple(f"{t.table}: {n}" for t in report.tables for n in t.not_final)
    if not_final:
        # Published, but said plainly: some results of the window could not be closed yet.
        msg += "; " + "; ".join(not_final)
        events += (Event("Warning", "NotFinal", "; ".join(not_final)),)
    return BackfillPlan(
        leave_group=group,
        status=status("Succeeded", "Published", msg, published=done, matchRatio=ratio, final=not not_final, **extra),
        events=events,
    )


def read_fields(seen: GroupProgress | None) -> dict[str, Any]:
    """What the backfill's sources have read and how fast now (``readLimit`` caps the rate);
    nothing when its members do not report reads (a Spark side older than the read cap)."""
    if seen is None or seen.read_bytes is None:
        return {}
    rate = seen.read_bytes_per_s
    files = seen.read_files_per_s
    return {
        "readBytes": seen.read_bytes,
        "readFiles": seen.read_files,
        "readRate": None if rate is None else f"{byte_rate(rate)}, {files or 0:.2f} files/s",
        "readBytesPerSecond": None if rate is None else round(rate, 1),
    }


def byte_rate(per_s: float) -> str:
    """``12.3 MB/s``: decimal units, as object stores bill and throttle."""
    for unit in ("B", "kB", "MB", "GB"):
        if per_s < 1000 or unit == "GB":
            return f"{per_s:.0f} {unit}/s" if unit == "B" else f"{per_s:.1f} {unit}/s"
        per_s /= 1000
    return f"{per_s:.1f} GB/s"


def progress_status(
    bf: Backfill,
    global_watermark_us: int | None,
    lag_us: int | None,
    now: datetime,
    seen: GroupProgress | None = None,
) -> dict[str, Any]:
    """The status fields a person watches in `kubectl get bf` (from the coordinator's view;
    ``seen`` adds what the sources read)."""
    start, end = instant(bf.spec.window.start), instant(bf.spec.window.end)
    gw = (
        None
        if global_watermark_us is None or global_watermark_us < 0
        else datetime.fromtimestamp(global_watermark_us / 1e6, UTC)
    )
    prev = None
    extra = bf.status.model_extra if bf.status is not None and bf.status.model_extra else {}
    if extra.get("progressAt") and extra.get("progressRatio") is not None:
        prev = (datetime.fromisoformat(str(extra["progressAt"])), float(extra["progressRatio"]))
    p = progress(start, end, gw, prev, now)
    return {
        "progress": p.percent,
        "progressRatio": round(p.ratio, 6),
        "progressAt": now.isoformat(),
        "globalWatermark": gw.strftime("%Y-%m-%dT%H:%M:%SZ") if gw else None,
        "alignmentLag": None if lag_us is None else f"{lag_us / 1e6:.0f}s",
        "eta": None if p.eta is None else str(p.eta),
        **read_fields(seen),
    }


def progress_update(
    bf: Backfill, global_watermark_us: int | None, lag_us: int | None, now: datetime, seen: GroupProgress | None = None
) -> dict[str, Any] | None:
    """The progress fields to write, or None: nothing new. Nothing reported (yet, or since an
    operator restart emptied the coordinator's memory) keeps the last values shown instead of
    dropping to 0%; an unchanged ratio and lag are not written again (a thousand backfills
    must not patch every few seconds)."""
    if global_watermark_us is None or global_watermark_us < 0:
        reads = read_fields(seen)  # held or all finished: no progress to show, but what was read
        current = bf.status.model_dump(by_alias=True) if bf.status else {}
        return reads if reads and any(reads[k] != current.get(k) for k in ("readBytes", "readRate")) else None
    fields = progress_status(bf, global_watermark_us, lag_us, now, seen)
    current = bf.status.model_dump(by_alias=True) if bf.status else {}
    watched = ("progressRatio", "alignmentLag", "readRate")
    if all(fields.get(k) == current.get(k) for k in watched):
        return None
    return fields


def _planning(
    bf: Backfill, job: StreamingJob, cfg: JobConfig, status: _Status, planning: Planning, extra: dict[str, Any]
) -> BackfillPlan:
    """spec.dryRun: run the plan application once, then stay Planned with its report in
    status.plan until dryRun is set to false."""
    owner = owner_of(bf)
    extra = {**extra, "planApplicationName": owner.plan_app_name}
    if bf.status is not None and bf.status.phase == "Planned" and bf.status.plan is not None:
        return BackfillPlan(status=status.kept())
    if planning.app is None:
        launch = job_launch(job, BACKFILL_RESTART, bf.spec.image, None, bf.spec.driver, bf.spec.executor)
        created = spark_application(owner, cfg, launch, config_hash(cfg), command="plan")
        msg = f"planning from Iceberg metadata (SparkApplication {owner.plan_app_name})"
        return BackfillPlan(
            config_map=config_map(owner, cfg, {SAVED_JOB: saved_job(job)}),
            create_plan_app=created,
            status=status("Planning", "Planning", msg, planApplicationState="", **extra),
            events=(Event("Normal", "Planning", msg),),
        )
    state = app_state(planning.app) or ""
    extra["planApplicationState"] = state
    if state not in ENDED:
        msg = f"planning: SparkApplication {owner.plan_app_name} is {state or 'submitted'}"
        return BackfillPlan(status=status("Planning", "Planning", msg, **extra))
    if planning.report is None:
        why = app_message(planning.app) or f"it ended {state} without a report"
        plan = failed_plan(f"SparkApplication {owner.plan_app_name}: {why}", status.now)
    else:
        plan = plan_status(planning.report, executor_cores(job), list(planning.runs), status.now)
    return BackfillPlan(
        status=status("Planned", "Planned", planned_message(plan), plan=plan, **extra), events=_plan_events(plan)
    )


def planned_message(plan: dict[str, Any]) -> str:
    if plan.get("error"):
        return (
            f"plan failed: {plan['error']}; set spec.dryRun: false to run it anyway (the lateness guard checks at "
            "start)"
        )
    verdict = "lateness ok" if plan["latenessOk"] else "the lateness guard would refuse it"
    took = f"ETA {plan['eta']}" if plan.get("eta") else "no ETA (no calibration yet)"
    return (
        f"planned: {plan['rows']:,} rows in {plan['files']} files, {plan['expectedBatches']} micro-batches, peak state "
        f"~{plan['peakStateRows']:,} rows, {verdict}, {took}; set spec.dryRun: false to run it"
    )


def _plan_events(plan: dict[str, Any]) -> tuple[Event, ...]:
    """What `kubectl describe` shows of a plan: its warnings, and a lateness refusal with the fix."""
    events = [Event("Normal", "Planned", planned_message(plan))]
    if plan.get("error"):
        events.append(Event("Warning", "PlanFailed", plan["error"]))
    elif not plan["latenessOk"]:
        events.append(Event("Warning", "LatenessTooShort", plan["latenessMessage"]))
    events += [Event("Warning", "PlanWarning", w) for w in plan.get("warnings", [])]
    return tuple(events)


def _queued(bf: Backfill, status: _Status, queued: Queued, extra: dict[str, Any]) -> BackfillPlan:
    """Over the cluster's or the namespace's limit: wait, with the position and the reason."""
    was = bf.status.phase if bf.status else None
    since = bf.status.queued_since if bf.status is not None and bf.status.queued_since else status.now
    return BackfillPlan(
        status=status("Queued", "Queued", queued.reason, queuePosition=queued.position, queuedSince=since, **extra),
        events=(Event("Normal", "Queued", queued.reason),) if was != "Queued" else (),
    )
