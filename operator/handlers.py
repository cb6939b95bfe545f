"""kopf handlers: thin. Observe (the resource, its SparkApplication), decide (``reconcile``,
pure), act (``Cluster``), record status and events.

Run with ``kappa operator`` (or ``kopf run -m kappa_operator.handlers``)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from kappa_operator.cluster import Cluster
from kappa_operator.models.common import GROUP, VERSION, manifest_fields
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.reconcile.streaming_job import JobPlan, plan_streaming_job
from kappa_operator.render.spark_application import MANAGED_BY, SPARK_API

log = logging.getLogger("kappa.operator")
SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")


class _State:
    host: str | None = None
    cluster: Cluster | None = None


def configure(host: str | None) -> None:
    """Point the operator at an API server (tests, emulators); None: in-cluster or kubeconfig."""
    _State.host, _State.cluster = host, None


def cluster() -> Cluster:
    if _State.cluster is None:
        _State.cluster = Cluster.connect(_State.host)
    return _State.cluster


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    if _State.host is not None:
        return kopf.ConnectionInfo(server=_State.host, insecure=True)
    return kopf.login_via_client(**kwargs)


def _parse_job(body: kopf.Body | dict[str, Any]) -> StreamingJob:
    try:
        return StreamingJob.model_validate(manifest_fields(dict(body)))
    except ValueError as exc:
        raise kopf.PermanentError(f"invalid StreamingJob: {exc}") from exc


def _act(plan: JobPlan, job: StreamingJob, body: Any) -> None:
    c = cluster()
    ns, name = job.metadata.namespace, job.metadata.name
    if plan.delete_app:
        c.delete_app(ns, name)
    if plan.config_map is not None:
        c.apply_config_map(plan.config_map)
    if plan.create_app is not None:
        c.create_app(plan.create_app)
    for e in plan.events:
        kopf.event(body, type=e.type, reason=e.reason, message=e.message)


@kopf.on.resume(GROUP, VERSION, "streamingjobs")
@kopf.on.create(GROUP, VERSION, "streamingjobs")
@kopf.on.update(GROUP, VERSION, "streamingjobs", field="spec")
def reconcile_job(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    job = _parse_job(body)
    app = cluster().get_app(job.metadata.namespace, job.metadata.name)
    plan = plan_streaming_job(job, app, now_rfc3339())
    _act(plan, job, body)
    patch.status.update(plan.status)


@kopf.on.event(SPARK_GROUP, SPARK_VERSION, "sparkapplications", labels=MANAGED_BY)
def application_changed(type: str, body: kopf.Body, **_: Any) -> None:
    """The Spark operator moved an application: mirror it into its owner's status."""
    owners = [o for o in body.get("metadata", {}).get("ownerReferences") or [] if o.get("kind") == "StreamingJob"]
    if not owners:
        return
    ns, name = body["metadata"]["namespace"], owners[0]["name"]
    job_body = cluster().get_resource("streamingjobs", ns, name)
    if job_body is None or job_body.get("metadata", {}).get("deletionTimestamp"):
        return
    job = _parse_job(job_body)
    app = None if type == "DELETED" else dict(body)
    plan = plan_streaming_job(job, app, now_rfc3339())
    _act(plan, job, job_body)
    cluster().patch_status("streamingjobs", ns, name, plan.status)


@kopf.on.delete(GROUP, VERSION, "streamingjobs")
def delete_job(body: kopf.Body, **_: Any) -> None:
    """Behind kopf's finalizer: stop the application and remove its ConfigMap."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    cluster().delete_app(ns, name)
    cluster().delete_config_map(ns, f"{name}-jobconfig")
    kopf.event(body, type="Normal", reason="Deleted", message=f"deleted SparkApplication {name} and its ConfigMap")
