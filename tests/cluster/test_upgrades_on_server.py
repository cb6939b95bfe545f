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
from tests.cluster.spark_operator import SparkPlayer, absent, create, example, get, spark_state, status

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


def blue_green_job(ns: str, name: str, where: Path) -> dict[str, Any]:
    """The Kafka rmi example as a blueGreen job (blue reads Kafka from the start; green
    bootstraps from the topics' archives all the same)."""
    job = example(
        "kafka-rmi-bootstrap-streamingjob.yaml",
        ns,
        name,
        checkpoints={"location": str(where)},
        upgrade={"mode": "blueGreen", "overlap": "10m", "catchUp": "30m"},
    )
    job["spec"].pop("bootstrap")
    return job


def step_report(green: Path, step: str, state: str, **fields: Any) -> None:
    """What the step application's driver leaves (``spark_app.apps.blue_green``), with its own writer."""
    from datetime import UTC, datetime

    from spark_app.contract.reports.blue_green import StepReport, write_step_report

    now = datetime.now(UTC)
    write_step_report(str(green), StepReport(step=step, state=state, started_at=now, finished_at=now, **fields))  # type: ignore[arg-type]


def step_app_runs(plane: ControlPlane, ns: str, name: str, command: str) -> dict[str, Any]:
    """The step application of ``command``, once the operator created it (a previous step's first removed)."""

    def created() -> dict[str, Any] | None:
        app = get(plane, APP, ns, name)
        return app if app is not None and app["spec"]["arguments"][0] == command else None

    return dict(eventually(created, f"the {command} application", timeout=60))


def step_of(plane: ControlPlane, ns: str, name: str, step: str) -> dict[str, Any] | None:
    up = status(plane, SJ, ns, name).get("upgrade") or {}
    return up if up.get("step") == step else None


def test_a_blue_green_upgrade_goes_step_by_step_to_green_on_its_own_checkpoint(
    control_plane: ControlPlane, watched: str, tmp_path: Path
) -> None:
    """The object sequence on the real API server, the drivers played with their own report
    writers: green beside blue, the compare application, blue stopped, green stopped, the
    switch application, then the job's own application on green's checkpoint."""
    from datetime import UTC, datetime

    from spark_app.contract.reports.blue_green import SEAM_REL, SeamReport, SinkSeam
    from spark_app.contract.reports.progress import ProgressReport, report_name
    from spark_app.contract.reports.publish import TableReport
    from spark_app.contract.storage import REPORT_DIR

    plane, ns, name = control_plane, watched, "rmi-bg"
    create(plane, blue_green_job(ns, name, tmp_path))
    running(plane, ns, name)
    blue_uid = get(plane, APP, ns, name)["metadata"]["uid"]  # type: ignore[index]
    edit(plane, ns, name, {"image": "ghcr.io/kappa-dev/kappa-spark:0.2.0"})

    green_app = eventually(lambda: get(plane, APP, ns, f"{name}-green"), "green's application")
    assert green_app["metadata"]["ownerReferences"][0]["kind"] == SJ
    up = eventually(lambda: step_of(plane, ns, name, "GreenStarting"), "GreenStarting")
    green = Path(up["greenCheckpoint"])
    assert green == tmp_path / "green-g2" and up["branch"] == f"green-{name}-g2"
    cfg = json.loads(get(plane, "ConfigMap", ns, f"{name}-green-jobconfig")["data"]["job.json"])  # type: ignore[index]
    assert cfg["green"]["blueCheckpoint"] == f"{tmp_path}/live" and cfg["checkpoint"]["location"] == str(green)
    spark_state(plane, ns, f"{name}-green", "RUNNING")
    eventually(lambda: step_of(plane, ns, name, "CatchingUp"), "CatchingUp")

    sink = "attributed_plays"
    now = datetime.now(UTC)
    for base in (tmp_path / "live", green):  # each driver's progress, as its listener writes it
        (base / REPORT_DIR).mkdir(parents=True, exist_ok=True)
        report = ProgressReport(sink=sink, batch_id=5, at=now, watermark=now, lookahead_s=0.0)
        (base / REPORT_DIR / report_name(sink)).write_text(report.model_dump_json())
    up = eventually(lambda: step_of(plane, ns, name, "Comparing"), "Comparing", timeout=60)
    assert up["compareStart"] < up["compareEnd"]
    compare = step_app_runs(plane, ns, f"{name}-bluegreen", "compare")
    assert compare["metadata"]["labels"]["kappa.dev/role"] == "step"
    table = TableReport(table="marts.attributed_plays_kafka_new", branch=up["branch"], match_ratio=1.0,
                        main_rows=4, branch_rows=4, matched=4)  # fmt: skip
    step_report(green, "compare", "Matched", tables=[table])
    spark_state(plane, ns, f"{name}-bluegreen", "COMPLETED")
    eventually(lambda: absent(plane, APP, ns, name), "blue stopped")
    eventually(lambda: step_of(plane, ns, name, "Draining"), "Draining (no driver pod left)")

    def seam() -> dict[str, Any] | None:  # green's Trailer looks every trigger
        at_seam = SeamReport(at=datetime.now(UTC), sinks={sink: SinkSeam(blue_batch=5, green_batch=7, at_seam=True)})
        (green / SEAM_REL).write_text(at_seam.model_dump_json())
        return step_of(plane, ns, name, "Switching")

    eventually(seam, "Switching", timeout=60)
    eventually(lambda: absent(plane, APP, ns, f"{name}-green"), "green stopped")
    step_app_runs(plane, ns, f"{name}-bluegreen", "switch")
    from spark_app.contract.reports.blue_green import SwitchedTable

    switched = SwitchedTable(sink=sink, table=table.table, rows_removed=2, rows_added=3, snapshot_id=41)
    step_report(green, "switch", "Switched", switched=[switched], boundary=now)
    spark_state(plane, ns, f"{name}-bluegreen", "COMPLETED")

    promoted = eventually(lambda: get(plane, APP, ns, name), "the job's application on green's checkpoint", timeout=60)
    assert promoted["metadata"]["uid"] != blue_uid
    body = get(plane, SJ, ns, name)
    assert body is not None and body["metadata"]["annotations"][CHECKPOINT_ANNOTATION] == str(green)
    rendered = json.loads(get(plane, "ConfigMap", ns, f"{name}-jobconfig")["data"]["job.json"])  # type: ignore[index]
    assert rendered["checkpoint"]["location"] == str(green) and "branch" not in rendered["sinks"][sink]
    spark_state(plane, ns, name, "RUNNING")
    eventually(lambda: "upgrade" not in status(plane, SJ, ns, name), "the upgrade ended")
    for reason in ("GreenStarted", "GreenRunning", "CaughtUp", "Compared", "BlueStopped", "Switched", "Upgraded"):
        assert any(e["involvedObject"]["name"] == name for e in events(plane, ns, reason)), reason
    eventually(lambda: absent(plane, "ConfigMap", ns, f"{name}-green-jobconfig"), "green's ConfigMap removed")
    assert absent(plane, APP, ns, f"{name}-bluegreen")


def green_beside_blue(plane: ControlPlane, ns: str, name: str, where: Path, change: dict[str, Any]) -> dict[str, Any]:
    """Blue running, then ``change`` applied: returns blue's application once green's exists."""
    create(plane, blue_green_job(ns, name, where))
    running(plane, ns, name)
    blue = get(plane, APP, ns, name)
    assert blue is not None
    edit(plane, ns, name, change)
    eventually(lambda: get(plane, APP, ns, f"{name}-green"), "green's application")
    return blue


def test_a_green_that_fails_to_submit_is_removed_and_blue_never_stops(
    control_plane: ControlPlane, watched: str, tmp_path: Path
) -> None:
    plane, ns, name = control_plane, watched, "rmi-bg-fail"
    blue = green_beside_blue(plane, ns, name, tmp_path, {"pipeline": "spark_app.examples.rmi_v3:pipeline"})
    blue_uid = blue["metadata"]["uid"]
    spark_state(plane, ns, f"{name}-green", "SUBMISSION_FAILED", "No module named 'spark_app.examples.rmi_v3'")
    up = eventually(lambda: step_of(plane, ns, name, "Discarding"), "Discarding")
    assert "rmi_v3" in up["reason"]
    step_app_runs(plane, ns, f"{name}-bluegreen", "discard")
    eventually(lambda: absent(plane, APP, ns, f"{name}-green"), "green removed")
    step_report(tmp_path / "green-g2", "discard", "Discarded", removed=[])
    spark_state(plane, ns, f"{name}-bluegreen", "COMPLETED")
    eventually(lambda: step_of(plane, ns, name, "GreenRemoved"), "GreenRemoved")
    s = status(plane, SJ, ns, name)
    assert s["rolledBackGeneration"] == 2 and s["phase"] == "Running"
    assert get(plane, APP, ns, name)["metadata"]["uid"] == blue_uid, "blue's application never stopped"  # type: ignore[index]
    assert events(plane, ns, "GreenRemoved")[0]["type"] == "Warning"


def test_a_suspend_before_the_switch_removes_green_then_blue_resumes_and_upgrades_again(
    control_plane: ControlPlane, watched: str, tmp_path: Path
) -> None:
    """Suspended while green starts: green goes first, then blue; resumed, blue's spec runs on
    blue's checkpoint (the new code does not restore its state) and the edit upgrades again."""
    plane, ns, name = control_plane, watched, "rmi-bg-suspend"
    blue = green_beside_blue(plane, ns, name, tmp_path, {"image": "ghcr.io/kappa-dev/kappa-spark:0.2.0"})
    edit(plane, ns, name, {"suspend": True})
    up = eventually(lambda: step_of(plane, ns, name, "Discarding"), "Discarding")
    assert "spec.suspend" in up["reason"]
    assert get(plane, APP, ns, name) is not None, "blue runs until green is gone"
    step_app_runs(plane, ns, f"{name}-bluegreen", "discard")
    eventually(lambda: absent(plane, APP, ns, f"{name}-green"), "green removed")
    step_report(tmp_path / "green-g2", "discard", "Discarded", removed=[])
    spark_state(plane, ns, f"{name}-bluegreen", "COMPLETED")
    eventually(lambda: absent(plane, APP, ns, name), "blue stopped as asked")
    eventually(lambda: status(plane, SJ, ns, name).get("phase") == "Suspended", "Suspended")

    edit(plane, ns, name, {"suspend": False})
    resumed = eventually(lambda: get(plane, APP, ns, name), "the job's application again")
    assert resumed["spec"]["image"] == blue["spec"]["image"], "the spec that last ran, on its own checkpoint"
    assert events(plane, ns, "ResumedOnBlue")
    spark_state(plane, ns, name, "RUNNING")
    eventually(lambda: step_of(plane, ns, name, "GreenStarting"), "the edit upgrades blue/green again")
    assert get(plane, APP, ns, f"{name}-green")["spec"]["image"] == "ghcr.io/kappa-dev/kappa-spark:0.2.0"  # type: ignore[index]
