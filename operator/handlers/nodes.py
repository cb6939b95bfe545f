"""Nodes that stopped answering or are drained, and the pods of our applications on them (issue
59): the Nodes' watch keeps an index of the nodes that are not Ready and one of the nodes that
are cordoned. While the first holds any, each job's own periodic look (``backfill.follow``,
``progress.follow_progress``, every few seconds) asks its application's pods whether one has
been on such a node for its ``nodeLostAfter`` (``reconcile.node_loss``), deletes it, and says so
in an Event on the job; while the second does, a StreamingJob whose driver runs on one is
reconciled, which moves it (``reconcile.node_drain``). With every node Ready and schedulable,
nothing is read."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from kappa_operator.handlers.context import ctx
from kappa_operator.reconcile.node_drain import DrainedDriver, cordoned, drained_driver, driver_pod_left
from kappa_operator.reconcile.node_loss import (
    DRIVER_LOST_ANNOTATION,
    driver_lost_note,
    lost_message,
    lost_pods,
    not_ready_since,
)
from kappa_operator.render.spark_application import Owner

log = logging.getLogger("kappa.operator")


@kopf.index("", "v1", "nodes", when=lambda body, **_: not_ready_since(body) is not None)
def lost_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, str]:
    """Nodes that are not Ready, with since when. A node Ready again stops matching ``when``
    and kopf drops it from the index (a None result would keep its last value). Kept from the
    watch, in memory: nothing is ever written to a Node."""
    return {name: not_ready_since(body) or ""}


@kopf.index("", "v1", "nodes", when=lambda body, **_: cordoned(body))
def cordoned_nodes(name: str, **_: Any) -> dict[str, bool]:
    """Nodes marked unschedulable (``kubectl cordon``, a drain's first step); uncordoned, a
    node stops matching ``when`` and leaves the index."""
    return {name: True}


@kopf.on.startup()
def read_nodes_from_the_watch(
    lost_nodes: kopf.Index[str, str], cordoned_nodes: kopf.Index[str, bool], **_: Any
) -> None:
    ctx().lost_nodes = lost_nodes
    ctx().cordoned_nodes = cordoned_nodes


def driver_drained(namespace: str, app: str) -> DrainedDriver | None:
    """The application's running driver, if it runs on a cordoned node (read only while a node
    is cordoned)."""
    nodes = ctx().cordoned_nodes
    if not nodes:
        return None
    return drained_driver(ctx().cluster().pods_of_application(namespace, app), set(nodes))


def driver_left(namespace: str, app: str) -> bool:
    """Whether a driver pod of the application still exists (a move waits for it to go)."""
    return driver_pod_left(ctx().cluster().pods_of_application(namespace, app))


def clear_lost_pods(kind: str, body: kopf.Body) -> int:
    """The pods of the application of ``body`` (a StreamingJob or Backfill) on a node that has
    not been Ready for their ``nodeLostAfter``, or evicted from it, deleted at once; a lost
    driver's node is first noted on its application (the restart's status says why it failed).
    How many were deleted is returned."""
    nodes = ctx().lost_nodes
    if not nodes:
        return 0
    meta = body["metadata"]
    owner = Owner(kind, meta["name"], meta["namespace"], meta.get("uid"))
    app = owner.app_name
    lost = {name: next(iter(since), "") for name, since in nodes.items()}
    key = (owner.kind, owner.namespace, owner.name)
    cluster = ctx().cluster()
    deleted = 0
    for pod in lost_pods(cluster.pods_of_application(owner.namespace, app), lost, datetime.now(UTC)):
        if pod.role == "driver":  # intent first: the failure it causes is said as what it is
            try:
                cluster.annotate_app(owner.namespace, app, {DRIVER_LOST_ANNOTATION: driver_lost_note(pod)})
            except ApiException as exc:
                # 5xx: the spark-operator's webhook down (restarting after it lost its lease, or
                # on a lost node itself): the pod stays until the note lands, the next pass
                # tries again. Waiting costs nothing: no application is created through the
                # webhook while it is down either, and a restart said as a container's exit code
                # would hide the node that was lost. Any other refusal: move on without the note
                waits = exc.status is not None and exc.status >= 500
                said = "not yet noted" if waits else "not noted"
                log.warning("%s %s/%s: the lost driver's node %s on %s: %s", *key, said, app, exc.reason)
                if waits:
                    continue
        if cluster.delete_lost_pod(owner.namespace, pod.name, pod.uid):
            deleted += 1
            ctx().events().event(body, "Warning", "NodeLost", lost_message(owner.kind, owner.name, pod))
    return deleted
