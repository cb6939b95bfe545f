"""What to do for a StreamingJob, from the job and its SparkApplication as observed (pure).

Like the Flink Kubernetes Operator's last-state upgrade: a changed spec (a different JobConfig
hash) deletes the application, and the next reconcile starts it again from the same
checkpoint location. Suspend deletes it and keeps the checkpoint; resume recreates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kappa_operator.models.common import Condition
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.phases import STATES, app_message, app_state, condition
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION, config_hash, live_checkpoint, streaming_job_config
from kappa_operator.render.spark_application import LIVE_RESTART, Launch, Owner, config_map, spark_application


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class JobPlan:
    config_map: dict[str, Any] | None = None
    """Apply (create or replace) this ConfigMap."""
    create_app: dict[str, Any] | None = None
    """Create this SparkApplication."""
    delete_app: bool = False
    """Delete the current SparkApplication (suspend, or a restart after a spec change)."""
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()


def owner_of(job: StreamingJob) -> Owner:
    return Owner("StreamingJob", job.metadata.name, job.metadata.namespace, job.metadata.uid)


def plan_streaming_job(job: StreamingJob, app: dict[str, Any] | None, now: str) -> JobPlan:
    cfg = streaming_job_config(job)
    digest = config_hash(cfg)
    owner = owner_of(job)
    previous: list[Condition] = list(job.status.conditions) if job.status else []
    base = {
        "observedGeneration": job.metadata.generation,
        "applicationName": owner.name,
        "configHash": digest,
        "checkpointLocation": live_checkpoint(job),
    }
    running_hash = ((app or {}).get("metadata", {}).get("annotations") or {}).get("kappa.dev/config-hash")

    def status(phase: str, ready: bool, reason: str, message: str, state: str | None) -> dict[str, Any]:
        conds = condition(previous, "Ready", ready, reason, message, now)
        return {
            **base,
            "phase": phase,
            "applicationState": state,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }

    paused = job.metadata.annotations.get(PAUSED_ANNOTATION)
    if paused:
        msg = f"stopped by {paused}; the live checkpoint is kept"
        if app is not None:
            return JobPlan(
                delete_app=True,
                status=status("Rewinding", False, "Rewinding", msg, None),
                events=(Event("Normal", "Rewinding", f"{paused}: deleted the SparkApplication"),),
            )
        return JobPlan(status=status("Rewinding", False, "Rewinding", msg, None))

    if job.spec.suspend:
        if app is not None:
            # Straight to Suspended (not "Suspending"): the application's DELETED event reports
            # the same status, so whichever of the two status writes lands last, they agree.
            return JobPlan(
                delete_app=True,
                status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None),
                events=(Event("Normal", "Suspended", "spec.suspend: deleted the SparkApplication, checkpoint kept"),),
            )
        return JobPlan(status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None))

    if app is None:
        launch = Launch(job.spec.image, job.spec.driver, job.spec.executor, job.spec.service_account, LIVE_RESTART)
        return JobPlan(
            config_map=config_map(owner, cfg),
            create_app=spark_application(owner, cfg, launch, digest),
            status=status("Submitted", False, "Submitted", "SparkApplication created", None),
            events=(Event("Normal", "Submitted", f"created SparkApplication {owner.name} (config {digest})"),),
        )

    if running_hash != digest:
        return JobPlan(
            delete_app=True,
            status=status("Restarting", False, "SpecChanged", "spec changed: restarting from the checkpoint", None),
            events=(
                Event(
                    "Normal",
                    "SpecChanged",
                    f"config {running_hash} -> {digest}: restarting the application from its checkpoint",
                ),
            ),
        )

    state = app_state(app) or ""
    phase, ready, reason = STATES.get(state, ("Unknown", False, "Unknown"))
    message = app_message(app) or f"SparkApplication is {state or 'submitted'}"
    changed = job.status is None or job.status.application_state != state
    events = ()
    if changed:
        kind = "Warning" if phase == "Failed" else "Normal"
        events = (Event(kind, reason, message),)
    return JobPlan(status=status(phase, ready, reason, message, state), events=events)
