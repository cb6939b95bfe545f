"""Backfills sharing a cluster, through the operator (``kappa operator
--max-concurrent-backfills 2`` with the installed Deployment's arguments and the chart's
ServiceAccount, a process of its own, killed and started again as a pod would be) on the real
kube-apiserver: five Backfills run two at a time in priority order (then age), wait in phase
Queued with their position, keep the same queue across the restart (it is read from the
objects), and a Backfill deleted while queued leaves the queue consistent."""

from __future__ import annotations

import time

import pytest

from harness.chart import Installed, grant_coordinator_secrets
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from tests.cluster.operator_runs import Processes
from tests.cluster.spark_operator import (
    APP,
    NO_RESTART,
    absent,
    create,
    example,
    get,
    items,
    reasons,
    spark_state,
    status,
)

pytestmark = pytest.mark.usefixtures("never_forbidden")

PRIORITIES = {"b1": 0, "b2": 0, "b3": 5, "b4": 1, "b5": 5}
FLAGS = ("--max-concurrent-backfills", "2")


def phases(plane: ControlPlane, ns: str) -> dict[str, tuple[str | None, int | None]]:
    out = {}
    for item in items(plane, "Backfill", ns):
        s = item.get("status") or {}
        out[item["metadata"]["name"]] = (s.get("phase"), s.get("queuePosition"))
    return out


def settled(plane: ControlPlane, ns: str, want: dict[str, tuple[str, int | None]]) -> bool:
    now = phases(plane, ns)
    running = [n for n, (p, _) in now.items() if p == "Running"]
    assert len(running) <= 2, f"more than maxConcurrent running: {now}"
    return now == want


def test_five_backfills_two_at_a_time_in_priority_order_through_a_restart(
    control_plane: ControlPlane, installed: Installed, own_operators: Processes, namespace: str
) -> None:
    plane, ns = control_plane, namespace
    grant_coordinator_secrets(plane, installed, ns)
    proc = own_operators.start(ns, *FLAGS)
    create(plane, example("rmi-streamingjob.yaml", ns))
    for name, priority in PRIORITIES.items():
        body = example("rmi-backfill.yaml", ns, name, priority=priority, publish={"enabled": False}, **NO_RESTART)
        create(plane, body)
        time.sleep(1.1)  # creation times one second apart: age breaks priority ties
    queue = {
        "b1": ("Running", None),
        "b2": ("Running", None),
        "b3": ("Queued", 1),  # priority 5, older
        "b5": ("Queued", 2),  # priority 5
        "b4": ("Queued", 3),  # priority 1
    }
    eventually(lambda: settled(plane, ns, queue), f"the queue {queue}", 60)
    assert absent(plane, APP, ns, "b3-backfill"), "a queued backfill has no application"
    b4 = status(plane, "Backfill", ns, "b4")
    assert "backfills.maxConcurrent 2 reached" in b4["message"] and b4["queuedSince"]
    eventually(lambda: "Queued" in reasons(plane, ns, "b4"), "a Queued Event", 10)

    # the operator restarts mid-queue: the queue is read from the objects, same order
    proc.proc.kill()
    proc.proc.wait()
    proc = own_operators.start(ns, *FLAGS)
    time.sleep(6.0)  # a timer round of the new process
    assert settled(plane, ns, queue), phases(plane, ns)

    # deleted while queued: the ones behind it move up
    plane.admin.ok(plane.admin.delete(path_of("Backfill", ns, "b5")), "delete b5")
    queue = {"b1": ("Running", None), "b2": ("Running", None), "b3": ("Queued", 1), "b4": ("Queued", 2)}
    eventually(lambda: settled(plane, ns, queue), f"the queue without b5 {queue}", 30)

    # one finishes: the head of the queue starts, nobody else
    spark_state(plane, ns, "b1-backfill", "COMPLETED")
    queue = {"b1": ("Succeeded", None), "b2": ("Running", None), "b3": ("Running", None), "b4": ("Queued", 1)}
    eventually(lambda: settled(plane, ns, queue), f"b3 admitted {queue}", 30)
    assert get(plane, APP, ns, "b3-backfill") is not None
    b3 = status(plane, "Backfill", ns, "b3")
    assert b3["startedAt"] >= b3["queuedSince"]

    spark_state(plane, ns, "b2-backfill", "FAILED", "executor lost")
    queue = {"b1": ("Succeeded", None), "b2": ("Failed", None), "b3": ("Running", None), "b4": ("Running", None)}
    eventually(lambda: settled(plane, ns, queue), f"b4 admitted {queue}", 30)
