"""A node drained under a StreamingJob's driver (issue 59), decided from what the API server
says (pure).

``kubectl drain`` (and every cluster autoscaler and node upgrade) cordons the node, then evicts
its pods through the Eviction API, which honours PodDisruptionBudgets. Each StreamingJob's
driver has one (``render.disruption_budget``: ``maxUnavailable: 0``), so the drain's eviction of
the driver is refused (429, retried by the drain every few seconds) while the operator moves
the job itself, as planned work:

1. the driver, still running, takes a snapshot (``status.snapshots``, reason ``nodeDrain``): a
   restorable point from just before the move, which a Rewind or a new job's
   ``initialSnapshot`` can name;
2. the operator deletes the application and submits it again, from its checkpoint; the node is
   cordoned, so the new driver starts on another one. Its pods no longer on the node, the drain
   goes on.

The executors have no budget: the drain evicts them and their driver asks for others. Evicted
as it would be without the budget, a driver would restart from its checkpoint too, but through
the failure path: a FAILED application, a backoff, a restart counted against
``spec.restart.maxAttempts``, and no snapshot. A driver that is not Ready yet (``AlwaysAllow``
for unhealthy pods) never holds a drain, and a snapshot not taken within
``spec.upgrade.snapshotTimeout`` does not either: the job moves from its checkpoint alone, and
says so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kappa_operator.models.common import instant
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.job_intent import ENDED_LIVE, JobIntent, StatusOf
from kappa_operator.reconcile.snapshot_requests import Book
from kappa_operator.render.spark_application import (
    ROLE_LABEL,
)


@dataclass(frozen=True)
class DrainedDriver:
    """The job's running driver pod, on a cordoned node."""

    pod: str
    uid: str
    node: str


def cordoned(node: Mapping[str, Any]) -> bool:
    """Marked unschedulable: the first step of a drain (``kubectl cordon``)."""
    return bool((node.get("spec") or {}).get("unschedulable"))


def drained_driver(pods: list[Mapping[str, Any]], cordoned_nodes: Collection[str]) -> DrainedDriver | None:
    """The application's running driver pod on a cordoned node, if it has one (a pod already
    being deleted is moving already)."""
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (meta.get("labels") or {}).get(ROLE_LABEL) != "driver" or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") == "Running" and spec.get("nodeName") in cordoned_nodes:
            return DrainedDriver(str(meta.get("name")), str(meta.get("uid") or ""), str(spec["nodeName"]))
    return None


def driver_pod_left(pods: list[Mapping[str, Any]]) -> bool:
    """Whether a driver pod of the application still exists, running or being deleted."""
    return any(((pod.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL) == "driver" for pod in pods)


def drain_nonce(driver: DrainedDriver) -> str:
    """The snapshot before moving this driver: one per driver pod (a drain retried, or the
    operator restarted meanwhile, asks for the same one)."""
    return f"node-drain-{driver.uid[:8] or driver.pod}"


def move(
    job: StreamingJob,
    app: dict[str, Any] | None,
    state: str,
    drained: DrainedDriver | None,
    now: str,
    requests: Book,
    status: StatusOf,
) -> JobIntent | None:
    """The driver's node drained (``reconcile.node_drain``): a snapshot first, the application then
    deleted and submitted again (the next reconcile creates it, elsewhere: the node is
    cordoned). None: nothing to move, or moved (the rest of the decision applies)."""
    record = job.status.node_drain if job.status else None
    external = job.spec.checkpoints.external_location is not None
    if record is None or (drained is not None and record.pod != drained.pod and record.step != "Moving"):
        if drained is None or state != "RUNNING":
            return None
        nonce = drain_nonce(drained) if external else None
        record_fields = {"node": drained.node, "pod": drained.pod, "startedAt": now, "snapshotNonce": nonce}
        if nonce is not None:
            requests.request(nonce, "nodeDrain", now)
            msg = (
                f"node {drained.node} is drained: taking snapshot {nonce} before the driver moves off it "
                "(its PodDisruptionBudget holds the eviction meanwhile)"
            )
            return JobIntent(
                status={
                    **status("Draining", True, "Draining", msg, state),
                    "nodeDrain": {**record_fields, "step": "Snapshotting"},
                },
                events=(Event("Normal", "Draining", msg),),
            )
        how = "no spec.checkpoints.externalLocation to take a snapshot to: moving from its checkpoint alone"
        return moving(record_fields, drained.node, how, state, status)
    if record.step == "Snapshotting":
        snapshot = requests.get(record.snapshot_nonce) if record.snapshot_nonce else None
        if snapshot is not None and snapshot.taken_at is None and snapshot.error is None:
            if state in ENDED_LIVE:  # failed on its own meanwhile: restarted as any failure (the
                return None  # decision's failure path, which drops the record), elsewhere
            return JobIntent()  # the timer looks again
        if snapshot is not None and snapshot.taken_at is not None:
            ids = ", ".join(f"{k} batch {v}" for k, v in sorted(snapshot.batch_ids.items()))
            how = f"snapshot {snapshot.nonce} taken ({ids})"
        else:
            why = snapshot.error if snapshot is not None else "no answer"
            how = f"snapshot {record.snapshot_nonce} {why}: moving from its checkpoint alone"
        fields = record.model_dump(by_alias=True, exclude_none=True)
        return moving(fields, record.node, how, state, status)
    # Moving: the old application goes (it may still show, ended or being deleted), the new one
    # is created once it is gone, and runs (the Running branch clears the record)
    if app is not None and (app.get("metadata", {}).get("deletionTimestamp") or created_before(app, record.started_at)):
        return JobIntent()
    return None


def waits_for_old_driver(job: StreamingJob, driver_left: bool) -> JobIntent | None:
    """A move's new application waits until the old driver's pod is gone, not only its
    application: the pod outlives the application while it terminates, the new driver has its
    name, and the spark-operator would take the old pod's end (exit 137) for the new
    application's failure, a restart counted for a move (seen under load). None: create it."""
    record = job.status.node_drain if job.status else None
    if record is not None and record.step == "Moving" and driver_left:
        return JobIntent()
    return None


def moving(record: dict[str, Any], node: str, how: str, state: str, status: StatusOf) -> JobIntent:
    msg = (
        f"node {node} is drained: {how}; the application is deleted and runs again from its checkpoint on another node"
    )
    return JobIntent(
        delete_app=True,
        status={**status("Restarting", False, "Drained", msg, state), "nodeDrain": {**record, "step": "Moving"}},
        events=(Event("Normal", "Moving", msg),),
    )


def created_before(app: dict[str, Any], when: str) -> bool:
    """Whether ``app`` was created before ``when`` (RFC 3339): the application a move deletes."""
    created = (app.get("metadata") or {}).get("creationTimestamp")
    return bool(created) and instant(str(created)) < instant(when)
