"""Pods left on a node that stopped answering (issue 59): which the operator deletes at once,
and what it says (kappa_operator/reconcile/node_loss.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kappa_operator.reconcile.node_loss import (
    DRIVER_LOST_ANNOTATION,
    LostPod,
    driver_lost_prefix,
    evicted_by_taint,
    lost_message,
    lost_pods,
    not_ready_since,
)
from kappa_operator.reconcile.phases import app_message

SINCE = "2026-11-29T05:00:20Z"
LOST = datetime(2026, 11, 29, 5, 0, 20, tzinfo=UTC)


def node(ready: str, since: str = SINCE) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}]}}


def pod(
    name: str,
    on: str,
    role: str = "executor",
    evicted: bool = False,
    reason: str = "DeletionByTaintManager",
    after: str = "30",
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "False"}]
    if evicted:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": reason})
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"spark-role": role},
            "annotations": {"kappa.dev/node-lost-after": after},
            **({"deletionTimestamp": "2026-11-29T05:00:50Z"} if evicted else {}),
        },
        "spec": {"nodeName": on},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_a_node_is_lost_from_when_its_ready_condition_stopped_being_true() -> None:
    assert not_ready_since(node("Unknown")) == SINCE, "the kubelet stopped posting"
    assert not_ready_since(node("False")) == SINCE
    assert not_ready_since(node("True")) is None
    assert not_ready_since({"status": {}}) is None, "a node not yet reporting is not lost"


def test_pods_on_a_node_not_ready_for_their_node_lost_after_or_evicted_from_it_are_deleted() -> None:
    pods = [
        pod("rmi-driver", "kappa-node-2", "driver"),
        pod("rmi-exec-1", "kappa-node-2", after="10"),
        pod("rmi-exec-2", "kappa-node-3"),  # its node answers
        pod("rmi-exec-3", "kappa-node-2", after="120"),  # a longer nodeLostAfter of its own
        pod("rmi-exec-4", "kappa-node-2", after="120", evicted=True),  # Kubernetes evicted it already
        pod("rmi-exec-5", "kappa-node-2", after="120", evicted=True, reason="EvictionByEvictionAPI"),  # a drain
    ]
    lost = {"kappa-node-2": SINCE}
    assert lost_pods(pods, lost, LOST + timedelta(seconds=9)) == [
        LostPod("rmi-exec-4", "uid-rmi-exec-4", "kappa-node-2", "executor", SINCE)
    ], "before any nodeLostAfter: only what Kubernetes evicted"
    assert [p.name for p in lost_pods(pods, lost, LOST + timedelta(seconds=10))] == ["rmi-exec-1", "rmi-exec-4"]
    assert lost_pods(pods, lost, LOST + timedelta(seconds=30))[0] == LostPod(
        "rmi-driver", "uid-rmi-driver", "kappa-node-2", "driver", SINCE
    )
    assert [p.name for p in lost_pods(pods, lost, LOST + timedelta(minutes=2))] == [
        "rmi-driver", "rmi-exec-1", "rmi-exec-3", "rmi-exec-4", "rmi-exec-5",
    ]  # fmt: skip
    assert lost_pods(pods, {}, LOST + timedelta(hours=1)) == [], "no node lost: nothing"
    unannotated = pod("old", "kappa-node-2")
    del unannotated["metadata"]["annotations"]
    assert [p.name for p in lost_pods([unannotated], lost, LOST + timedelta(seconds=30))] == ["old"], "30 s by default"
    assert not evicted_by_taint({"metadata": {}, "status": {"conditions": [{"type": "DisruptionTarget"}]}})


def test_what_is_said_names_the_pod_the_node_and_what_happens_next() -> None:
    driver = LostPod("rmi-driver", "u", "kappa-node-2", "driver", SINCE)
    said = lost_message("StreamingJob", "rmi", driver)
    assert said == (
        "StreamingJob rmi: driver pod rmi-driver lost with node kappa-node-2 (NotReady since 2026-11-29T05:00:20Z): "
        "deleted, so its application fails and restarts from the checkpoint on a live node"
    )
    executor = LostPod("rmi-exec-1", "u", "kappa-node-2", "executor", "")
    assert lost_message("Backfill", "b", executor).endswith(
        "lost with node kappa-node-2: deleted, so its driver replaces it at once"
    )


def test_the_restart_after_a_lost_driver_says_its_node_was_lost() -> None:
    app = {
        "metadata": {"annotations": {DRIVER_LOST_ANNOTATION: f"kappa-node-2 {SINCE}"}},
        "status": {
            "applicationState": {"state": "FAILED", "errorMessage": "driver container failed with ExitCode: 137"}
        },
    }
    assert driver_lost_prefix(app) == f"driver lost with node kappa-node-2 (NotReady since {SINCE})"
    assert (
        app_message(app)
        == f"driver lost with node kappa-node-2 (NotReady since {SINCE}): driver container failed with ExitCode: 137"
    )
    del app["status"]["applicationState"]["errorMessage"]
    assert app_message(app) == f"driver lost with node kappa-node-2 (NotReady since {SINCE})"
    assert driver_lost_prefix({"metadata": {}}) == "" and driver_lost_prefix(None) == ""
