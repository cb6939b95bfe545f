"""Replicas of the operator on the real kube-apiserver (issue 62), each ``kappa operator`` with
the installed Deployment's arguments, its ``--leader-election`` included, and the chart's
ServiceAccount: one leads through the Lease the chart grants, the other follows and writes
nothing; a leader stopped (as a pod deleted is: SIGTERM) hands the Lease over at once, one
killed (SIGKILL, a node lost) is replaced once the Lease expires. The new leader reconciles
what the old one left and declares the running Backfill's alignment group again.

The node test (tests/node/test_failover.py) does the same with pods, a real Backfill and the
audit log telling the replicas apart by pod IP."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
import requests

from harness.chart import Installed, grant_coordinator_secrets
from kappa_operator.local_cluster.control_plane import ControlPlane, audit_lines, eventually
from tests.cluster.operator_runs import OwnProcess, Processes, creates
from tests.cluster.spark_operator import APP, create, example, get, in_phase

pytestmark = pytest.mark.usefixtures("never_forbidden")


@pytest.fixture(autouse=True)
def replicas_stopped(own_operators: Processes) -> Iterator[None]:
    """Each test's replicas stopped after it, whatever it did: the next one's must lead."""
    yield
    for process in own_operators.started:
        process.stop()


GROUP_MEMBERS = ["rmi-outage/attributed_plays/impressions", "rmi-outage/attributed_plays/playbacks"]


def lease(plane: ControlPlane, installed: Installed) -> dict[str, str | int | None]:
    body = plane.admin.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{installed.namespace}/leases/{installed.lease}"
    ).body
    spec = body["spec"]
    return {"holder": spec.get("holderIdentity"), "transitions": spec.get("leaseTransitions", 0)}


def coordinator(process: OwnProcess, ns: str) -> requests.Response:
    return requests.get(
        f"{process.coordinator_url}/v1/groups/{ns}.rmi-outage",
        headers={"Authorization": f"Bearer {process.token}"},
        timeout=10,
    )


def test_one_replica_leads_the_other_takes_over_when_it_leaves_or_dies(
    control_plane: ControlPlane, installed: Installed, own_operators: Processes, namespace: str
) -> None:
    plane, ns, user = control_plane, namespace, installed.user
    grant_coordinator_secrets(plane, installed, ns)

    first = own_operators.start(ns, replica="replica-a")
    eventually(first.leading, "replica-a leading", timeout=60)
    second = own_operators.start(ns, replica="replica-b")
    assert lease(plane, installed)["holder"] == "replica-a"
    time.sleep(3)  # more than a retry period: a follower that would take over has had its chance
    assert not second.leading() and second.healthy(), "a follower: alive, not leading"
    create(plane, example("rmi-streamingjob.yaml", ns))
    eventually(lambda: in_phase(plane, "StreamingJob", ns, "rmi", "Submitted"), "the job reconciled by the leader")
    create(plane, example("rmi-backfill.yaml", ns))
    eventually(lambda: in_phase(plane, "Backfill", ns, "rmi-outage", "Running"), "the Backfill Running")
    assert coordinator(first, ns).json()["declared"] == GROUP_MEMBERS
    refused = coordinator(second, ns)
    assert refused.status_code == 503 and "not the leader" in refused.json()["error"]

    # the leader stopped as a deleted pod is (SIGTERM): it hands the Lease back on its way out
    stopped = time.monotonic()
    first.stop()
    eventually(second.leading, "replica-b leading", timeout=30, every=0.2)
    handed_over = time.monotonic() - stopped
    assert lease(plane, installed) == {"holder": "replica-b", "transitions": 1}
    assert handed_over < 10, f"a released Lease is taken at the next read, not on expiry: {handed_over:.1f} s"
    eventually(lambda: coordinator(second, ns).status_code == 200, "replica-b declaring the group again")
    assert coordinator(second, ns).json()["declared"] == GROUP_MEMBERS

    # the leader killed (SIGKILL: no hand-over): the third replica waits out the Lease
    third = own_operators.start(ns, replica="replica-c")
    assert not third.leading()
    killed = time.monotonic()
    second.proc.kill()
    second.proc.wait()
    eventually(third.leading, "replica-c leading", timeout=60, every=0.2)
    waited = time.monotonic() - killed
    assert 10 <= waited <= 15 + 3 * 2 + 5, f"taken over once the Lease expired (15 s): {waited:.1f} s"
    assert lease(plane, installed) == {"holder": "replica-c", "transitions": 2}
    eventually(lambda: coordinator(third, ns).status_code == 200, "replica-c declaring the group again")
    assert creates(plane, user, ns, "sparkapplications") == 2, "one application per object, through three leaders"
    assert get(plane, APP, ns, "rmi") is not None
    third.stop()  # hands the Lease back: the next test's replicas lead at once
    print(f"handed over in {handed_over:.1f} s; after a kill, taken over in {waited:.1f} s")


def test_a_follower_writes_nothing_and_a_leader_that_was_frozen_stops_when_it_wakes(
    control_plane: ControlPlane, installed: Installed, own_operators: Processes, namespace: str
) -> None:
    """A leader frozen (SIGSTOP: a VM paused, a long GC) neither renews nor releases. Until its
    Lease expires the follower writes nothing at all (the audit log: every write by the
    ServiceAccount); then it leads. The old leader, woken, finds the Lease taken and exits
    (status 3) instead of going on."""
    plane, ns = control_plane, namespace
    leader = own_operators.start(ns, replica="replica-d")
    eventually(leader.leading, "replica-d leading", timeout=60)
    leader.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.2)  # the audit backend's batch of the leader's last writes
        offset = plane.audit_size()
        follower = own_operators.start(ns, replica="replica-e")
        time.sleep(5)
        assert not follower.leading()
        written = [
            f"{e['verb']} {e['requestURI']}" for e in events_since(plane, installed.user, offset) if e["verb"] in WRITES
        ]
        assert written == [], f"a follower wrote: {written}"
        eventually(follower.leading, "replica-e leading once the frozen leader's Lease expired", timeout=60)
    finally:
        leader.proc.send_signal(signal.SIGCONT)
    assert leader.proc.wait(timeout=30) == 3, leader.tail()
    assert "lost the Lease" in leader.tail()
    assert lease(plane, installed)["holder"] == "replica-e"
    follower.stop()


WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def events_since(plane: ControlPlane, user: str, offset: int) -> list[dict[str, object]]:
    time.sleep(1.2)  # the audit backend flushes its batch every second
    logged = plane.audit_log.read_bytes()[offset:]
    return [e for e in audit_lines(logged) if e.get("user", {}).get("username") == user]
