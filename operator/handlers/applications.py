"""SparkApplication events (the Spark operator moved an application), dispatched to the
handler of the resource that owns it."""

from __future__ import annotations

from typing import Any

import kopf

from kappa_operator.handlers import backfill, rewind, streaming_job
from kappa_operator.handlers.context import counted, ctx, shown
from kappa_operator.render.spark_application import MANAGED_BY, SPARK_API

SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")
OWNERS = {
    "StreamingJob": ("streamingjobs", streaming_job.application_changed),
    "Backfill": ("backfills", backfill.application_changed),
    "Rewind": ("rewinds", rewind.application_changed),
}


@kopf.on.event(SPARK_GROUP, SPARK_VERSION, "sparkapplications", labels=MANAGED_BY)
def application_changed(type: str, body: kopf.Body, **_: Any) -> None:
    for owner in body.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("kind") not in OWNERS:
            continue
        plural, handle = OWNERS[owner["kind"]]
        owner_body = ctx().cluster().get_resource(plural, body["metadata"]["namespace"], owner["name"])
        if owner_body is None or owner_body.get("metadata", {}).get("deletionTimestamp"):
            return
        if owner.get("uid") and owner_body["metadata"].get("uid") and owner["uid"] != owner_body["metadata"]["uid"]:
            return  # an application of a deleted namesake, waiting for garbage collection
        try:
            counted(owner["kind"])(handle)(type, dict(body), owner_body)
        except Exception as exc:  # shown on the owner; its own handlers and timers retry
            shown(owner["kind"], owner_body, exc)
        return
