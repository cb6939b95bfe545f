"""Upgrades and snapshots through the operator as the chart installs it, on the real
kube-apiserver (issue 30 item 3). The tests play the Spark operator (application states) and
the driver: the driver's own code (``CheckpointExternalizer``) answers the requests of the
control ConfigMap the operator wrote, from a file holding what Kubernetes would mount, over a
Spark checkpoint on disk. The decisions are tested in tests/unit/kappa_operator/reconcile/test_upgrades.py; the driver's
answers with real Spark in tests/spark/test_snapshot_requests.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.checkpoint_data import write_checkpoint
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION
from spark_app.checkpoints.driver import CheckpointExternalizer
from spark_app.contract.checkpoints.snapshots import externalize, list_snapshots
from spark_app.contract.config import parse_config
from spark_app.contract.storage import open_location
from tests.cluster.spark_operator import SparkPlayer, create, example, get, spark_state, status

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ, APP = "StreamingJob", "SparkApplication"


def events(plane: ControlPlane, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = plane.admin.ok(plane.admin.get(f"/api/v1/namespaces/{namespace}/events"), "events")["items"]
    return [e for e in items if e["reason"] == reason]


def edit(plane: ControlPlane, namespace: str, name: str, spec: dict[str, Any]) -> None:
    plane.admin.ok(plane.admin.merge(path_of(SJ, namespace, name), {"spec": spec}), f"edit {name}")


def app_hash(plane: ControlPlane, namespace: str, name: str) -> str | None:
    app = get(plane, APP, namespace, name)
    return None if app is None else app["metadata"]["annotations"]["kappa.dev/config-hash"]


def running(plane: ControlPlane, ns: str, name: str) -> str:
    """Play the Spark operator until the job runs; its application's config hash."""
    digest = eventually(lambda: app_hash(plane, ns, name), "the application")
    spark_state(plane, ns, name, "RUNNING")
    eventually(lambda: status(plane, SJ, ns, name).get("phase") == "Running", "Running")
    return str(digest)


def test_a_trigger_nonce_is_answered_by_the_driver_into_the_snapshot_history(
    control_plane: ControlPlane, watched: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, watched
    ck, ext = tmp_path / "ck", tmp_path / "ext"
    job = example("rmi-streamingjob.yaml", ns, checkpoints={"location": str(ck), "externalLocation": str(ext)})
    sink = next(iter(job["spec"]["sinks"]))
    create(plane, job)
    running(plane, ns, "rmi")
    app = get(plane, APP, ns, "rmi")
    assert app is not None
    control = {"name": "kappa-control", "configMap": {"name": "rmi-control", "optional": True}}
    assert control in app["spec"]["volumes"], "the driver mounts the control ConfigMap"

    edit(plane, ns, "rmi", {"snapshotTriggerNonce": 1})
    cm = eventually(lambda: get(plane, "ConfigMap", ns, "rmi-control"), "the control ConfigMap")

    def requested() -> dict[str, Any] | None:
        c = get(plane, "ConfigMap", ns, "rmi-control") or {}
        return c if "trigger-1" in (c.get("data") or {}).get("snapshot-requests", "") else None

    cm = eventually(requested, "the request in the control ConfigMap")
    assert cm["metadata"]["ownerReferences"][0]["kind"] == SJ

    # the driver: its checkpoint, its config as rendered, the ConfigMap's key as Kubernetes mounts it
    write_checkpoint(ck / "live" / sink, "q-live", batches=3, minute=0)
    mounted = tmp_path / "control" / "snapshot-requests"
    mounted.parent.mkdir()
    mounted.write_text(cm["data"]["snapshot-requests"])
    rendered = get(plane, "ConfigMap", ns, "rmi-jobconfig")
    assert rendered is not None
    cfg = json.loads(rendered["data"]["job.json"])
    assert cfg["checkpoint"]["external"]["requestsFile"] == "/etc/kappa/control/snapshot-requests"
    cfg["checkpoint"]["external"]["requestsFile"] = str(mounted)
    driver = CheckpointExternalizer(parse_config(cfg))
    assert driver.look_for_requests() == [sink]
    driver.schedule(sink)
    driver.finish()

    def taken() -> dict[str, Any] | None:
        for entry in status(plane, SJ, ns, "rmi").get("snapshots") or []:
            if entry["nonce"] == "trigger-1" and entry.get("takenAt"):
                return dict(entry)
        return None

    entry = eventually(taken, "the snapshot in status.snapshots", timeout=60)
    assert entry["batchIds"] == {sink: 2} and entry["reason"] == "trigger" and entry["location"] == str(ext)
    assert status(plane, SJ, ns, "rmi")["snapshotTriggerNonce"] == 1
    assert events(plane, ns, "SnapshotTaken"), "an Event says so"


def test_a_stateless_upgrade_moves_the_checkpoint_and_a_failed_one_rolls_back(
    control_plane: ControlPlane, watched: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, watched
    upgrade = {"mode": "stateless", "rollback": True, "readyTimeout": "5m"}
    job = example("rmi-streamingjob.yaml", ns, "rmi-up", checkpoints={"location": str(tmp_path)}, upgrade=upgrade)
    create(plane, job)
    stable = running(plane, ns, "rmi-up")

    edit(plane, ns, "rmi-up", {"pipelineArgs": {"lateness": "45 minutes"}})

    def moved() -> dict[str, Any] | None:
        body = get(plane, SJ, ns, "rmi-up") or {}
        return body if (body["metadata"].get("annotations") or {}).get(CHECKPOINT_ANNOTATION) else None

    body = eventually(moved, "the checkpoint moved")
    assert body["metadata"]["annotations"][CHECKPOINT_ANNOTATION] == f"{tmp_path}/live-g2"
    upgraded = eventually(lambda: (h := app_hash(plane, ns, "rmi-up")) not in (None, stable) and h, "the new app")
    rendered = get(plane, "ConfigMap", ns, "rmi-up-jobconfig")
    assert rendered is not None
    assert json.loads(rendered["data"]["job.json"])["checkpoint"]["location"] == f"{tmp_path}/live-g2"

    spark_state(plane, ns, "rmi-up", "FAILED", "ImportError: lateness")
    eventually(lambda: app_hash(plane, ns, "rmi-up") not in (None, upgraded) and True, "an application of the old spec")
    assert app_hash(plane, ns, "rmi-up") != upgraded
    s = status(plane, SJ, ns, "rmi-up")
    assert s["upgrade"]["step"] == "RolledBack" and s["rolledBackGeneration"] == 2
    assert events(plane, ns, "RolledBack")[0]["type"] == "Warning"
    assert s["lastStableHash"] != upgraded


def test_a_new_job_starts_from_a_named_snapshot_of_another_job(
    control_plane: ControlPlane, watched: str, tmp_path: Path
) -> None:
    """``initialSnapshot`` (Flink's initialSavepointPath): the restore application runs for real
    (``python -m spark_app restore``), copies batch 1 of the other job's snapshots into the new
    job's live checkpoint, touches nothing of the other job's; then the job's application starts."""
    plane, ns = control_plane, watched
    sink = next(iter(example("rmi-streamingjob.yaml", ns)["spec"]["sinks"]))
    old_live, old_ext = tmp_path / "old" / "live" / sink, tmp_path / "old-snapshots"
    write_checkpoint(old_live, "q-old", batches=3, minute=0)
    for batch in range(3):
        externalize(open_location(str(old_live)), open_location(str(old_ext / sink)), batch_id=batch)
    ck = tmp_path / "new"
    job = example(
        "rmi-streamingjob.yaml",
        ns,
        "rmi-from",
        checkpoints={"location": str(ck)},
        initialSnapshot={"location": str(old_ext), "batchId": 1},
    )
    with SparkPlayer(plane, ns, "restore", tmp_path) as spark:
        create(plane, job)
        eventually(lambda: app_hash(plane, ns, "rmi-from"), "the job's application, once restored", timeout=120)
    assert spark.ran == [("rmi-from-restore", 0)], "one restore application, run to the end"
    s = status(plane, SJ, ns, "rmi-from")
    assert s["initialSnapshotRestored"] is True and s["phase"] == "Submitted"
    assert [(p["sink"], p["batchId"], p["queryId"]) for p in s["initialRestore"]] == [(sink, 1, "q-old")]
    restored = ck / "live" / sink
    assert sorted(p.name for p in (restored / "commits").iterdir()) == ["0", "1"], "resumes after batch 1"
    assert [m.batch_id for m in list_snapshots(open_location(str(old_ext / sink)))] == [0, 1, 2], "copied only"
    eventually(lambda: get(plane, APP, ns, "rmi-from-restore") is None, "the restore application removed")
    assert events(plane, ns, "InitialSnapshotRestored")
