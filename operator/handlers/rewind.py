"""Rewind: walk the phases (``reconcile.rewind``), carrying out each step's commands. The
status of a phase is written before its I/O, so an operator restarted in any phase repeats
that phase's (idempotent) step and goes on.

The operator reads snapshot manifests (to choose restore points) and the restore
application's report; the snapshots are copied and the sinks undone by that application."""

from __future__ import annotations

import functools
from typing import Any

import kopf

from kappa_operator.handlers import followers
from kappa_operator.handlers.context import (
    crash_point,
    ctx,
    exclusive,
    forget,
    observe,
    parse,
    post_event,
    post_events,
    record,
    referenced_job,
    reported,
)
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.observe import restore_points
from kappa_operator.reconcile.phases import ENDED, app_state, now_rfc3339
from kappa_operator.reconcile.rewind import (
    Observed,
    Pause,
    Resume,
    RewindDownstream,
    RewindIntent,
    RunRestore,
    decide_rewind,
    downstream_of,
    owner_of,
    paused_by,
    step_failed,
)
from kappa_operator.reconcile.streaming_job import owner_of as job_owner
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, PAUSED_ANNOTATION, SKIP_ANNOTATION, restore_config
from kappa_operator.render.spark_application import Owner
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.restore import RestoreReport, read_report

KIND = "Rewind"
PLURAL = "rewinds"
STEP_INTERVAL = 2.0
"""Seconds between looks at a rewind waiting on something (its job to stop, to resume)."""


def _job(rw: Rewind) -> StreamingJob | None:
    return referenced_job(rw.metadata.namespace, rw.spec.job_ref.name)


def _report(rw: Rewind, job: StreamingJob | None, restore_app: dict[str, Any] | None) -> RestoreReport | None:
    """The restore application's report, once it ended (a KB object next to the restored
    checkpoint: the only thing of the data plane the operator reads in a Rewind)."""
    if job is None or restore_app is None or app_state(restore_app) not in ENDED or rw.status is None:
        return None
    location = rw.status.checkpoint_location
    if location is None:
        return None
    return read_report(restore_config(rw, job, tuple(rw.status.restores), location))


def _observe(rw: Rewind) -> Observed:
    job = _job(rw)
    cluster = ctx().cluster()
    phase = rw.status.phase if rw.status and rw.status.phase else "Pending"
    app = None
    if job is not None:
        owner = job_owner(job)
        app = cluster.get_app(owner.namespace, owner.app_name, owner)
    chosen: Any = ()
    expired = None
    if phase == "Pending" and job is not None:
        chosen = restore_points.choose_points(rw, job)
        if not isinstance(chosen, str):
            values = functools.partial(cluster.secret_values, job.metadata.namespace)
            expired = restore_points.kafka_refusal(job, chosen, values)  # before anything is stopped
    if phase != "Restoring":
        return Observed(job=job, app=app, chosen=chosen, expired=expired)
    mine = owner_of(rw)
    restore_app = cluster.get_app(mine.namespace, mine.app_name, mine)
    report = _report(rw, job, restore_app)
    downstream: tuple[StreamingJob, ...] = ()
    if report is not None and job is not None and rw.spec.downstream:
        bodies = cluster.list_resources("streamingjobs", rw.metadata.namespace)
        downstream = downstream_of(job, [parse(StreamingJob, b) for b in bodies])
    return Observed(job=job, app=app, downstream=downstream, restore_app=restore_app, report=report)


def step(rw: Rewind, body: Any) -> dict[str, Any]:
    """One phase: record it, run its commands, record the next. The last status written."""
    seen = _observe(rw)
    plan: RewindIntent = decide_rewind(rw, seen, now_rfc3339())
    record(KIND, body, plan.status)
    observe(KIND, body, plan.status)
    post_events(body, plan.events)
    crash_point(f"exit-in-phase:{plan.status.get('phase')}")
    try:
        extra = _carry_out(rw, plan, seen.job)
    except KappaError as exc:  # permanent: retrying would refuse again
        failed = step_failed(rw, str(plan.status.get("phase")), str(exc), now_rfc3339())
        record(KIND, body, failed.status)
        post_events(body, failed.events)
        return failed.status
    if plan.next_phase is None:
        if extra:
            record(KIND, body, extra)
        return {**plan.status, **extra}
    nxt = {**extra, "phase": plan.next_phase, "message": f"{plan.status.get('phase')} done"}
    record(KIND, body, nxt)
    return {**plan.status, **nxt}


def _carry_out(rw: Rewind, plan: RewindIntent, job: StreamingJob | None) -> dict[str, Any]:
    """Run the step's commands; the status fields they produced."""
    c = ctx().cluster()
    ns = rw.metadata.namespace
    extra: dict[str, Any] = {}
    for command in plan.commands:
        assert job is not None
        match command:
            case Pause(by=by):
                c.annotate("streamingjobs", ns, job.metadata.name, {PAUSED_ANNOTATION: by})
            case RunRestore(config_map=cm, app=app):
                me = owner_of(rw)
                c.apply_config_map(cm, me)
                c.create_app(app, me)
            case RewindDownstream(manifests=manifests):
                me = Owner(KIND, rw.metadata.name, ns, rw.metadata.uid)
                for m in manifests:
                    c.create_resource(PLURAL, ns, m, me)
                extra["downstream"] = [m["metadata"]["name"] for m in manifests]
            case Resume(location=location, skip=skip):
                moved: dict[str, str | None] = {CHECKPOINT_ANNOTATION: location, PAUSED_ANNOTATION: None}
                if skip is not None:
                    moved[SKIP_ANNOTATION] = skip
                c.annotate("streamingjobs", ns, job.metadata.name, moved)
    return extra


def _run(body: kopf.Body | dict[str, Any]) -> None:
    """One walker per rewind: the create handler and the timer both call here."""
    with exclusive(KIND, body["metadata"]["namespace"], body["metadata"]["name"]) as mine:
        if mine:
            _walk(body)


def _walk(body: kopf.Body | dict[str, Any]) -> None:
    """Steps until the rewind waits on something or ends (a restart re-enters here)."""
    for _ in range(len(("Pending", "Stopping", "Restoring", "Resuming", "done"))):
        current = ctx().cluster().get_resource(PLURAL, body["metadata"]["namespace"], body["metadata"]["name"])
        if current is None:
            return
        rw = parse(Rewind, current)
        before = rw.status.phase if rw.status else None
        after = step(rw, current).get("phase")
        if after in ("Succeeded", "Failed") or after == before:
            return


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@reported(KIND)
def start_rewind(body: kopf.Body, **_: Any) -> None:
    _run(body)


@followers.every(
    PLURAL,
    STEP_INTERVAL,
    initial_delay=STEP_INTERVAL,
    when=lambda body: (body.get("status") or {}).get("phase") not in ("Succeeded", "Failed"),
)
@reported(KIND)
def continue_rewind(body: kopf.Body, **_: Any) -> None:
    """Waiting phases (the job stopping, resuming) move on when what they wait for happened."""
    _run(body)


def application_changed(event: str, app: dict[str, Any], rw_body: dict[str, Any]) -> None:
    """The restore application moved: take the next step now rather than at the next timer."""
    _run(rw_body)


@kopf.on.delete(GROUP, VERSION, PLURAL)
@reported(KIND)
def delete_rewind(body: kopf.Body, **_: Any) -> None:
    """A rewind deleted half-way must not leave its job paused."""
    followers.wait_idle(PLURAL, body["metadata"]["namespace"], body["metadata"]["name"])
    rw = parse(Rewind, body)
    me = owner_of(rw)
    ctx().cluster().delete_app(me.namespace, me.app_name, me)  # a restore cut short is redone by the next Rewind
    job = _job(rw)
    if job is not None and job.metadata.annotations.get(PAUSED_ANNOTATION) == paused_by(rw):
        ctx().cluster().annotate("streamingjobs", rw.metadata.namespace, job.metadata.name, {PAUSED_ANNOTATION: None})
        post_event(body, "Warning", "Abandoned", f"deleted mid-way: {job.metadata.name} unpaused")
    forget(KIND, body)
