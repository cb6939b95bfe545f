"""StreamingJob: a live job as a ConfigMap and a SparkApplication (restartPolicy Always)."""

from __future__ import annotations

from typing import Any

import kopf

from kappa_operator.handlers.context import counted, crash_point, ctx, forget, observe, parse, post_events
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.reconcile.streaming_job import JobPlan, plan_streaming_job

KIND = "StreamingJob"


def act(plan: JobPlan, job: StreamingJob, body: Any) -> None:
    c = ctx().cluster()
    ns, name = job.metadata.namespace, job.metadata.name
    if plan.delete_app:
        c.delete_app(ns, name)
    if plan.config_map is not None:
        c.apply_config_map(plan.config_map)
    if plan.create_app is not None:
        c.create_app(plan.create_app)
        crash_point("exit-after-create-app")
    post_events(body, plan.events)
    observe(KIND, body, plan.status)


@kopf.on.resume(GROUP, VERSION, "streamingjobs")
@kopf.on.create(GROUP, VERSION, "streamingjobs")
@kopf.on.update(GROUP, VERSION, "streamingjobs", field="spec")
@kopf.on.update(GROUP, VERSION, "streamingjobs", field="metadata.annotations")  # a Rewind pauses/moves it
@counted(KIND)
def reconcile_job(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    job = parse(StreamingJob, body)
    app = ctx().cluster().get_app(job.metadata.namespace, job.metadata.name)
    plan = plan_streaming_job(job, app, now_rfc3339())
    act(plan, job, body)
    patch.status.update(plan.status)


def application_changed(event: str, app: dict[str, Any], job_body: dict[str, Any]) -> None:
    """Its SparkApplication moved (see ``applications``): mirror it into the job's status."""
    job = parse(StreamingJob, job_body)
    plan = plan_streaming_job(job, None if event == "DELETED" else app, now_rfc3339())
    act(plan, job, job_body)
    ctx().cluster().patch_status("streamingjobs", job.metadata.namespace, job.metadata.name, plan.status)


@kopf.on.delete(GROUP, VERSION, "streamingjobs")
@counted(KIND)
def delete_job(body: kopf.Body, **_: Any) -> None:
    """Behind kopf's finalizer: stop the application and remove its ConfigMap."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    ctx().cluster().delete_app(ns, name)
    ctx().cluster().delete_config_map(ns, f"{name}-jobconfig")
    kopf.event(body, type="Normal", reason="Deleted", message=f"deleted SparkApplication {name} and its ConfigMap")
    forget(KIND, body)
