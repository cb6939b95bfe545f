"""SparkApplication events (the Spark operator moved an application), dispatched to the
handler of the resource that owns it."""

from __future__ import annotations

from typing import Any

import kopf

from kappa_operator.handlers import backfill, rewind, streaming_job
from kappa_operator.handlers.context import counted, ctx, shown
from kappa_operator.kube.api import observed
from kappa_operator.kube.packed import packed
from kappa_operator.render.spark_application import MANAGED_BY, SPARK_API

SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")
OWNERS: dict[str, tuple[str, Any]] = {
    "StreamingJob": ("streamingjobs", None),  # reconcile_named: the job is read once, under its lock
    "Backfill": ("backfills", backfill.application_changed),
    "Rewind": ("rewinds", rewind.application_changed),
}


@kopf.index(SPARK_GROUP, SPARK_VERSION, "sparkapplications", labels=MANAGED_BY)
async def applications(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], bytes]:
    """Our applications as the watch last saw them, read by ``Cluster.get_app`` instead of a
    GET per reconcile. kopf keeps it from the watch this module already runs and fills it from
    its listing before any handler runs (so a restarted operator sees what it created).

    Without the spec: decisions read an application's metadata (owner, annotations) and status,
    never the spec they rendered, which is most of its size (the pods' templates, the Spark
    conf, the arguments): 11 KB of the operator's memory per application, kept per object; and
    packed (``kube.packed``)."""
    return {(namespace, name): packed(observed(body))}


@kopf.on.startup()
def read_applications_from_the_watch(applications: kopf.Index[tuple[str, str], bytes], **_: Any) -> None:
    ctx().cluster().applications = applications


@kopf.on.event(SPARK_GROUP, SPARK_VERSION, "sparkapplications", labels=MANAGED_BY)
def application_changed(type: str, body: kopf.Body, **_: Any) -> None:
    for owner in body.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("kind") not in OWNERS:
            continue
        namespace = body["metadata"]["namespace"]
        if owner["kind"] == "StreamingJob":  # its decision reads the job itself, under its lock
            try:
                counted("StreamingJob")(streaming_job.reconcile_named)(namespace, owner["name"], owner.get("uid"))
            except Exception as exc:  # shown on the job; its own handlers and timers retry
                job_body = ctx().cluster().get_resource("streamingjobs", namespace, owner["name"])
                if job_body is not None:
                    shown("StreamingJob", job_body, exc)
            return
        plural, handle = OWNERS[owner["kind"]]
        owner_body = ctx().cluster().get_resource(plural, namespace, owner["name"])
        if owner_body is None or owner_body.get("metadata", {}).get("deletionTimestamp"):
            return
        if owner.get("uid") and owner_body["metadata"].get("uid") and owner["uid"] != owner_body["metadata"]["uid"]:
            return  # an application of a deleted namesake, waiting for garbage collection
        try:
            counted(owner["kind"])(handle)(type, dict(body), owner_body)
        except Exception as exc:  # shown on the owner; its own handlers and timers retry
            shown(owner["kind"], owner_body, exc)
        return
