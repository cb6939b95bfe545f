"""Issue 59 item 3: a drain of the node under a StreamingJob's driver (pure decisions). The driver
is under a PodDisruptionBudget, so the drain waits while the operator moves the job: a snapshot
first (reason ``nodeDrain``), then the application deleted and created again from its checkpoint
(elsewhere: the node is cordoned); the move is not a failure (no restart counted, no backoff);
a snapshot that does not come in time, or cannot be taken, does not hold the drain."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kappa_operator.reconcile.job_intent import JobIntent
from kappa_operator.reconcile.node_drain import DrainedDriver, cordoned, drain_nonce, drained_driver, driver_pod_left
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.disruption_budget import driver_disruption_budget
from kappa_operator.render.spark_application import Owner
from spark_app.contract.snapshot_requests import Answer
from tests.unit.kappa_operator.reconcile.test_upgrades import SINK, T0, app_of, at, job, manifest, merged, running

DRIVER = DrainedDriver(pod="rmi-driver", uid="0123456789abcdef", node="node-2")


def pod(role: str, node: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"rmi-{role}-{node}", "uid": f"uid-{role}-{node}", "labels": {"spark-role": role}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_a_driver_pod_left_is_one_running_or_being_deleted() -> None:
    assert driver_pod_left([pod("driver", "node-2", deleting=True)])
    assert driver_pod_left([pod("executor", "node-1"), pod("driver", "node-1", "Pending")])
    assert not driver_pod_left([pod("executor", "node-2", deleting=True)]) and not driver_pod_left([])


def test_the_running_driver_on_a_cordoned_node_is_found_and_nothing_else() -> None:
    assert cordoned({"spec": {"unschedulable": True}}) and not cordoned({"spec": {}})
    found = drained_driver([pod("executor", "n2"), pod("driver", "n2")], {"n2"})
    assert found == DrainedDriver("rmi-driver-n2", "uid-driver-n2", "n2")
    assert drained_driver([pod("driver", "n1"), pod("executor", "n2")], {"n2"}) is None  # executors: no budget
    assert drained_driver([pod("driver", "n2", deleting=True)], {"n2"}) is None  # moving already
    assert drained_driver([pod("driver", "n2", phase="Pending")], {"n2"}) is None
    assert drain_nonce(DRIVER) == "node-drain-01234567"


def test_the_driver_has_a_budget_that_refuses_its_eviction_while_ready_only() -> None:
    created = decide_streaming_job(job(manifest()), None, at(0))
    budget = created.disruption_budget
    assert budget == driver_disruption_budget(Owner("StreamingJob", "rmi", "default", "u1"))
    assert budget is not None and budget["spec"]["maxUnavailable"] == 0
    assert budget["spec"]["selector"]["matchLabels"] == {"sparkoperator.k8s.io/app-name": "rmi", "spark-role": "driver"}
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # a failing driver holds no drain
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "StreamingJob"


def answered(nonce: str, batch: int) -> dict[str, dict[str, Answer]]:
    t = datetime(2026, 11, 26, 10, 1, tzinfo=T0.tzinfo)
    return {nonce: {SINK: Answer(nonce=nonce, sink=SINK, batch_id=batch, committed_at=t, taken_at=t)}}


def test_a_drain_takes_a_snapshot_then_moves_the_job_from_its_checkpoint_without_counting_a_restart() -> None:
    data = manifest()
    status, app = running(data)
    # 1. the node cordoned under the running driver: a snapshot asked for, the job still runs
    asked = decide_streaming_job(job(data, status), app, at(1), drained=DRIVER)
    nonce = drain_nonce(DRIVER)
    assert not asked.delete_app and asked.status["phase"] == "Draining"
    assert asked.status["nodeDrain"] == {
        "node": "node-2",
        "pod": "rmi-driver",
        "startedAt": at(1),
        "snapshotNonce": nonce,
        "step": "Snapshotting",
    }
    assert [s["reason"] for s in asked.status["snapshots"]] == ["nodeDrain"]
    assert asked.control_map is not None and nonce in str(asked.control_map["data"])
    assert [e.reason for e in asked.events] == ["Draining"]
    assert "PodDisruptionBudget holds the eviction" in asked.status["message"]
    status = merged(status, asked)
    # while it is not taken: nothing more (the job's timer looks again)
    assert decide_streaming_job(job(data, status), app, at(1.2), drained=DRIVER) == JobIntent()
    # 2. taken: the application deleted, said with the snapshot's batch
    moved = decide_streaming_job(job(data, status), app, at(1.5), answered(nonce, 7), drained=DRIVER)
    assert moved.delete_app and moved.status["nodeDrain"]["step"] == "Moving"
    assert moved.status["phase"] == "Restarting" and "restarts" not in moved.status
    assert f"snapshot {nonce} taken ({SINK} batch 7)" in moved.status["message"]
    assert {e.reason for e in moved.events} == {"Moving", "SnapshotTaken"}
    status = merged(status, moved)
    # 3. the old application still seen (ended, or being deleted): waited for, not restarted
    old = {
        **app,
        "metadata": {**app["metadata"], "creationTimestamp": at(0)},
        "status": {"applicationState": {"state": "FAILED"}},
    }
    assert decide_streaming_job(job(data, status), old, at(1.6)) == JobIntent()
    # ... and its driver's pod, terminating after it: the new driver will have its name
    assert decide_streaming_job(job(data, status), None, at(1.65), driver_left=True) == JobIntent()
    # 4. gone: created again (the scheduler places it off the cordoned node), budget with it
    again = decide_streaming_job(job(data, status), None, at(1.7))
    assert again.create_app is not None and again.disruption_budget is not None
    status = merged(status, again)
    assert status["nodeDrain"]["step"] == "Moving"
    # 5. running: the move is over, said; no restart was counted
    new = app_of(again)
    new["metadata"] = {**new["metadata"], "creationTimestamp": at(1.7)}
    done = decide_streaming_job(job(data, status), new, at(2))
    assert done.status["phase"] == "Running" and done.status["nodeDrain"] is None
    assert [e.reason for e in done.events][-1] == "Moved"
    assert merged(status, done).get("restarts", 0) == 0


def test_a_snapshot_not_taken_in_time_does_not_hold_the_drain() -> None:
    data = manifest(upgrade={"mode": "last-state", "snapshotTimeout": "2m"})
    status, app = running(data)
    status = merged(status, decide_streaming_job(job(data, status), app, at(1), drained=DRIVER))
    late = decide_streaming_job(job(data, status), app, at(4), drained=DRIVER)
    assert late.delete_app and late.status["nodeDrain"]["step"] == "Moving"
    assert (
        "not taken within 2m" in late.status["message"] and "moving from its checkpoint alone" in late.status["message"]
    )


def test_without_an_external_location_the_job_moves_at_once_and_says_why_there_is_no_snapshot() -> None:
    data = manifest()
    data["spec"]["checkpoints"].pop("externalLocation")
    status, app = running(data)
    moved = decide_streaming_job(job(data, status), app, at(1), drained=DRIVER)
    assert moved.delete_app and moved.status["nodeDrain"]["step"] == "Moving"
    assert "snapshots" not in moved.status and "no spec.checkpoints.externalLocation" in moved.status["message"]


def test_a_driver_that_fails_while_its_snapshot_is_taken_is_restarted_as_any_failure() -> None:
    data = manifest()
    status, app = running(data)
    status = merged(status, decide_streaming_job(job(data, status), app, at(1), drained=DRIVER))
    failed = {**app, "status": {"applicationState": {"state": "FAILED", "errorMessage": "driver OOM"}}}
    plan = decide_streaming_job(job(data, status), failed, at(1.5))
    assert plan.status["phase"] == "BackingOff" and plan.status["nodeDrain"] is None and plan.status["restarts"] == 1
