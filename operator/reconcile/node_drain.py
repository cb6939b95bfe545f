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

from kappa_operator.render.spark_application import ROLE_LABEL


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


def drain_nonce(driver: DrainedDriver) -> str:
    """The snapshot before moving this driver: one per driver pod (a drain retried, or the
    operator restarted meanwhile, asks for the same one)."""
    return f"node-drain-{driver.uid[:8] or driver.pod}"
