"""A StreamingJob's driver's PodDisruptionBudget (issue 59): what makes a drain wait for the
operator to move the job (``reconcile.node_drain`` says how it moves)."""

from __future__ import annotations

from typing import Any

from kappa_operator.render.spark_application import APP_LABEL, ROLE_LABEL, Owner


def budget_name(owner: Owner) -> str:
    return f"{owner.app_name}-driver"


def driver_disruption_budget(owner: Owner) -> dict[str, Any]:
    """No voluntary eviction of ``owner``'s Ready driver (the operator moves it, a snapshot
    first); an unready one may go (a driver starting or failing holds no drain). Owned by the
    job (``Cluster.apply_disruption_budget``): gone with it."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": budget_name(owner),
            "namespace": owner.namespace,
            "labels": owner.labels,
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {APP_LABEL: owner.app_name, ROLE_LABEL: "driver"}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
