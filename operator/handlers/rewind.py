"""Rewind: walk the phases (``reconcile.rewind``), carrying out each step's commands. The
status of a phase is written before its I/O, so an operator restarted in any phase repeats
that phase's (idempotent) step and goes on."""

from __future__ import annotations

from typing import Any

import kopf

from kappa_operator import rewind as io
from kappa_operator.handlers.context import (
    crash_point,
    ctx,
    exclusive,
    forget,
    observe,
    parse,
    post_events,
    record,
    referenced_job,
    reported,
)
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.reconcile.rewind import (
    Observed,
    Pause,
    ResetSinks,
    Restore,
    Resume,
    RewindDownstream,
    RewindPlan,
    after_reset,
    downstream_of,
    paused_by,
    plan_rewind,
    step_failed,
)
from kappa_operator.reconcile.streaming_job import owner_of as job_owner
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, PAUSED_ANNOTATION
from kappa_operator.render.spark_application import Owner
from spark_app.errors import KappaError

KIND = "Rewind"
PLURAL = "rewinds"
STEP_INTERVAL = 2.0
"""Seconds between looks at a rewind waiting on something (its job to stop, to resume)."""


def _job(rw: Rewind) -> StreamingJob | None:
    return referenced_job(rw.metadata.namespace, rw.spec.job_ref.name)


def _observe(rw: Rewind) -> Observed:
    job = _job(rw)
    phase = rw.status.phase if rw.status and rw.status.phase else "Pending"
    app = None
    if job is not None:
        owner = job_owner(job)
        app = ctx().cluster().get_app(owner.namespace, owner.app_name, owner)
    chosen: Any = ()
    if phase == "Pending" and job is not None:
        chosen = io.choose_points(rw, job)
    downstream: tuple[StreamingJob, ...] = ()
    if phase == "ResettingSinks" and job is not None and rw.spec.downstream:
        bodies = ctx().cluster().list_resources("streamingjobs", rw.metadata.namespace)
        downstream = downstream_of(job, [parse(StreamingJob, b) for b in bodies])
    return Observed(job=job, app=app, chosen=chosen, downstream=downstream)


def step(rw: Rewind, body: Any) -> dict[str, Any]:
    """One phase: record it, run its commands, record the next. The last status written."""
    seen = _observe(rw)
    plan: RewindPlan = plan_rewind(rw, seen, now_rfc3339())
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


def _carry_out(rw: Rewind, plan: RewindPlan, job: StreamingJob | None) -> dict[str, Any]:
    """Run the step's commands; the status fields they produced."""
    c = ctx().cluster()
    ns = rw.metadata.namespace
    extra: dict[str, Any] = {}
    for command in plan.commands:
        assert job is not None
        match command:
            case Pause(by=by):
                c.annotate("streamingjobs", ns, job.metadata.name, {PAUSED_ANNOTATION: by})
            case Restore(restores=restores, location=location):
                io.restore_points(job, restores, location)
            case ResetSinks(restores=restores):
                removed = io.reset_sinks(job, restores)
                extra.update(after_reset(rw, removed, extra.get("downstream", [])))
            case RewindDownstream(manifests=manifests):
                me = Owner(KIND, rw.metadata.name, ns, rw.metadata.uid)
                for m in manifests:
                    c.create_resource(PLURAL, ns, m, me)
                extra["downstream"] = [m["metadata"]["name"] for m in manifests]
            case Resume(location=location):
                c.annotate(
                    "streamingjobs", ns, job.metadata.name, {CHECKPOINT_ANNOTATION: location, PAUSED_ANNOTATION: None}
                )
    return extra


def _run(body: kopf.Body | dict[str, Any]) -> None:
    """One walker per rewind: the create handler and the timer both call here."""
    with exclusive(KIND, body["metadata"]["namespace"], body["metadata"]["name"]) as mine:
        if mine:
            _walk(body)


def _walk(body: kopf.Body | dict[str, Any]) -> None:
    """Steps until the rewind waits on something or ends (a restart re-enters here)."""
    for _ in range(len(("Pending", "Stopping", "Restoring", "ResettingSinks", "Resuming", "done"))):
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


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=STEP_INTERVAL,
    initial_delay=STEP_INTERVAL,
    when=lambda status, **_: status.get("phase") not in ("Succeeded", "Failed"),
)
@reported(KIND)
def continue_rewind(body: kopf.Body, **_: Any) -> None:
    """Waiting phases (the job stopping, resuming) move on when what they wait for happened."""
    _run(body)


@kopf.on.delete(GROUP, VERSION, PLURAL)
@reported(KIND)
def delete_rewind(body: kopf.Body, **_: Any) -> None:
    """A rewind deleted half-way must not leave its job paused."""
    rw = parse(Rewind, body)
    job = _job(rw)
    if job is not None and job.metadata.annotations.get(PAUSED_ANNOTATION) == paused_by(rw):
        ctx().cluster().annotate("streamingjobs", rw.metadata.namespace, job.metadata.name, {PAUSED_ANNOTATION: None})
        kopf.event(body, type="Warning", reason="Abandoned", message=f"deleted mid-way: {job.metadata.name} unpaused")
    forget(KIND, body)
