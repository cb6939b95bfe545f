"""A StreamingJob as a watch event carries it: the copies of the spec (kubectl's annotation,
kopf's bookkeeping in status) and the managedFields that make up most of its size. The tests
of what the operator keeps per object (the looks' trimmed copies, kopf's diff-base) start
from it."""

from __future__ import annotations

from typing import Any


def watched_job() -> dict[str, Any]:
    return {
        "apiVersion": "kappa.dev/v1alpha1",
        "kind": "StreamingJob",
        "metadata": {
            "name": "j",
            "namespace": "n",
            "uid": "u",
            "generation": 3,
            "resourceVersion": "77",
            "labels": {"team": "plays"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": '{"spec": {}}',
                "kappa.dev/paused": "by-rewind",
                "other.kopf.zalando.org/last-handled-configuration": "{}",
            },
            "finalizers": ["kappa.dev/finalizer"],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}] * 20,
        },
        "spec": {"sinks": {"out": {"table": "db.t"}}, "sources": [{"kind": "iceberg"}], "empty": {}},
        "status": {"phase": "Running", "kopf": {"lastHandled": {"spec": {"a": 1}}, "progress": {}}},
    }
