"""The operator killed in the middle of a reconcile, right after it created a SparkApplication
and before it recorded anything (``KAPPA_OPERATOR_FAULT=exit-after-create-app``), then started
again, on the real kube-apiserver: nothing is created twice (the server's audit log counts the
operator's creates), status catches up, and a backfill's alignment group is declared again in
the new process's coordinator.

The operator runs as ``kappa operator`` with the installed Deployment's arguments and the
chart's ServiceAccount, as a process of its own: a real process exit, as a pod restart would be.
"""

from __future__ import annotations

import pytest
import requests

from harness.chart import Installed, grant_coordinator_secrets
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from tests.cluster.operator_runs import Processes, creates
from tests.cluster.spark_operator import APP, create, example, get, in_phase, status

pytestmark = pytest.mark.usefixtures("never_forbidden")


def test_restart_mid_reconcile_creates_nothing_twice(
    control_plane: ControlPlane, installed: Installed, own_operators: Processes, namespace: str
) -> None:
    plane, ns, user = control_plane, namespace, installed.user
    grant_coordinator_secrets(plane, installed, ns)

    # 1. a StreamingJob: the first process dies right after creating the application
    first = own_operators.start(ns, fault="exit-after-create-app")
    create(plane, example("rmi-streamingjob.yaml", ns))
    assert first.proc.wait(60) == 137, first.tail()
    assert get(plane, APP, ns, "rmi") is not None and status(plane, "StreamingJob", ns, "rmi") == {}

    second = own_operators.start(ns)
    eventually(lambda: in_phase(plane, "StreamingJob", ns, "rmi", "Submitted"), "the job's status after restart")
    assert creates(plane, user, ns, "sparkapplications") == 1, "the restarted operator did not create it again"
    assert creates(plane, user, ns, "configmaps") == 2, "its JobConfig and its control ConfigMap, each once"
    second.stop()

    # 2. a Backfill: the same, and the new process declares its alignment group again
    third = own_operators.start(ns, fault="exit-after-create-app")
    create(plane, example("rmi-backfill.yaml", ns))
    assert third.proc.wait(60) == 137, third.tail()
    assert get(plane, APP, ns, "rmi-outage-backfill") is not None
    assert status(plane, "Backfill", ns, "rmi-outage") == {}

    fourth = own_operators.start(ns)
    eventually(lambda: in_phase(plane, "Backfill", ns, "rmi-outage", "Running"), "the backfill after restart")
    assert creates(plane, user, ns, "sparkapplications") == 2, "one application per resource, none twice"
    r = requests.get(
        f"{fourth.coordinator_url}/v1/groups/{ns}.rmi-outage",
        headers={"Authorization": f"Bearer {fourth.token}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert sorted(r.json()["declared"]) == [
        "rmi-outage/attributed_plays/impressions",
        "rmi-outage/attributed_plays/playbacks",
    ]
