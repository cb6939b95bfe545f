"""Pods of our applications left on a node that is gone (issue 59), decided from what the API
server says (pure).

When a node's kubelet stops posting (a preempted VM, a kernel panic, a cut network), the node
lifecycle controller marks the node NotReady and taints it. Kubernetes itself would evict the
pods on it after their toleration of the taint, 300 s for a Spark pod (the API server's default:
the spark-operator's webhook adds a pod's own tolerations after that default, and the first
that matches a taint is the one kept), and then leave them Terminating for ever: only the
node's kubelet could confirm that their containers stopped. For a Spark application that wait
is the whole outage: the spark-operator still sees a Running driver, and a driver counts its
lost executors until its network timeout.

So the operator keeps its own clock: a pod of its applications on a node that has not been
Ready for the pod's ``nodeLostAfter`` (30 s by default; the pod's ``kappa.dev/node-lost-after``
annotation), or already evicted from it by Kubernetes, is deleted at once. The spark-operator
then fails an application whose driver it was, which the operator restarts from its checkpoint
(``restarts.py``, with backoff) on a live node; a lost executor is replaced by its driver. What
it would risk, a pod still running on a node that only lost its network, is what Kubernetes'
own forced deletion risks; the checkpoint's and the sinks' commits are idempotent by batch id,
so a second driver cannot commit a batch twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kappa_operator.models.common import instant
from kappa_operator.render.spark_application import NODE_LOST_AFTER, ROLE_LABEL

EVICTED_BY_TAINT = "DeletionByTaintManager"
"""The reason of the ``DisruptionTarget`` condition the taint eviction controller sets."""
DEFAULT_LOST_AFTER_S = 30.0
DRIVER_LOST_ANNOTATION = "kappa.dev/driver-lost-with-node"
"""On a SparkApplication whose driver pod the operator deleted because its node was lost: the
node and when; what the restart's status message says the failure was."""


@dataclass(frozen=True)
class LostPod:
    name: str
    uid: str
    node: str
    role: str
    """driver | executor (Spark's ``spark-role`` label)."""
    since: str
    """When the node stopped being Ready (its condition's lastTransitionTime)."""


def _instant_or_none(text: str) -> datetime | None:
    try:
        return instant(text)
    except ValueError:
        return None


def not_ready_since(node: Mapping[str, Any]) -> str | None:
    """When a Node stopped being Ready (its Ready condition False or Unknown), else None."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return None if condition.get("status") == "True" else str(condition.get("lastTransitionTime") or "")
    return None


def evicted_by_taint(pod: Mapping[str, Any]) -> bool:
    """Deleted by the taint eviction controller (its DisruptionTarget condition says so)."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == EVICTED_BY_TAINT
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def lost_after(pod: Mapping[str, Any]) -> float:
    """The pod's ``nodeLostAfter`` in seconds (its annotation; the default where absent)."""
    found = ((pod.get("metadata") or {}).get("annotations") or {}).get(NODE_LOST_AFTER)
    try:
        return float(found) if found is not None else DEFAULT_LOST_AFTER_S
    except ValueError:
        return DEFAULT_LOST_AFTER_S


def lost_pods(pods: list[Mapping[str, Any]], lost_nodes: Mapping[str, str], now: datetime) -> list[LostPod]:
    """The pods, of an application's, on a node that is not Ready (``lost_nodes``: node name ->
    since when, RFC 3339) for their ``nodeLostAfter``, or evicted from it already: what the
    operator deletes at once."""
    out = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in lost_nodes:
            continue
        since = _instant_or_none(lost_nodes[node])
        overdue = since is not None and (now - since).total_seconds() >= lost_after(pod)
        if not (overdue or evicted_by_taint(pod)):
            continue
        meta = pod.get("metadata") or {}
        role = str((meta.get("labels") or {}).get(ROLE_LABEL) or "pod")
        out.append(LostPod(str(meta.get("name")), str(meta.get("uid") or ""), str(node), role, lost_nodes[node]))
    return out


def lost_message(kind: str, name: str, pod: LostPod) -> str:
    """What the owner's event says (one per pod)."""
    then = f" (NotReady since {pod.since})" if pod.since else ""
    if pod.role == "driver":
        return (
            f"{kind} {name}: driver pod {pod.name} lost with node {pod.node}{then}: deleted, so its application "
            "fails and restarts from the checkpoint on a live node"
        )
    return (
        f"{kind} {name}: {pod.role} pod {pod.name} lost with node {pod.node}{then}: deleted, so its driver "
        "replaces it at once"
    )


def driver_lost_note(pod: LostPod) -> str:
    return f"{pod.node} {pod.since}".strip()


def driver_lost_prefix(app: Mapping[str, Any] | None) -> str:
    """``driver lost with node N (NotReady since T)``, for an application whose driver the
    operator deleted for that reason, else empty."""
    found = ((app or {}).get("metadata") or {}).get("annotations", {}).get(DRIVER_LOST_ANNOTATION)
    if not found:
        return ""
    node, _, since = str(found).partition(" ")
    return f"driver lost with node {node}" + (f" (NotReady since {since})" if since else "")
