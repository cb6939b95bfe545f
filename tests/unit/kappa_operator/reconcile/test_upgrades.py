"""Issue 30 item 3: upgrades and snapshots like the Flink Kubernetes Operator's (pure
decisions). Each upgrade mode keeps or drops state as promised; a trigger nonce asks the
running driver for a snapshot, whose answer lands in the history; snapshot-then-upgrade waits
for it; a failed upgrade rolls back to the last stable spec (and, in snapshot mode, to the
snapshot, through a Rewind)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import RestorePointStatus
from kappa_operator.reconcile.initial_snapshot import InitialSeen
from kappa_operator.reconcile.job_intent import JobIntent
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, job_hash, streaming_job_config
from spark_app.contract.reports.restore import RestoreReport
from spark_app.contract.snapshot_requests import Answer

ROOT = Path(__file__).resolve().parents[4]
T0 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
SINK = "attributed_plays"


def rfc(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def at(minutes: float) -> str:
    return rfc(T0 + timedelta(minutes=minutes))


def manifest(**spec: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    data["metadata"].update(uid="u1", generation=1, annotations={})
    data["spec"].update(spec)
    return data


def job(data: dict[str, Any], status: dict[str, Any] | None = None, generation: int | None = None) -> StreamingJob:
    data = json.loads(json.dumps(data))
    if generation is not None:
        data["metadata"]["generation"] = generation
    if status is not None:
        data["status"] = status
    return StreamingJob.model_validate(data)


def app_of(plan: JobIntent, state: str = "RUNNING", error: str | None = None) -> dict[str, Any]:
    assert plan.create_app is not None
    app_state = {"state": state, **({"errorMessage": error} if error else {})}
    return {**plan.create_app, "status": {"applicationState": app_state}}


def merged(status: dict[str, Any] | None, plan: JobIntent) -> dict[str, Any]:
    """The status after the plan's merge patch, as the API server applies it (RFC 7386: objects
    merged key by key at every depth, None removes a field, a list replaces the list)."""
    return merge_patch(status or {}, plan.status)


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_patch(out[k], v)
        elif isinstance(v, dict):
            out[k] = merge_patch({}, v)
        else:
            out[k] = v
    return out


def running(data: dict[str, Any], minutes: float = 0, generation: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job of ``data`` whose application runs: (its status, its application)."""
    j = job(data, generation=generation)
    created = decide_streaming_job(j, None, at(minutes))
    status = merged(None, created)
    app = app_of(created)
    status = merged(status, decide_streaming_job(job(data, status, generation), app, at(minutes)))
    return status, app


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def test_running_records_the_last_stable_spec() -> None:
    data = manifest()
    status, _ = running(data)
    stable = job_hash(job(data), streaming_job_config(job(data)))
    assert status["phase"] == "Running" and status["lastStableHash"] == stable
    assert json.loads(status["lastStableSpec"])["pipeline"] == data["spec"]["pipeline"]


def test_last_state_restarts_from_the_same_checkpoint_and_reports_the_upgrade() -> None:
    data = manifest()
    status, app = running(data)
    data["spec"]["pipelineArgs"] = {"lateness": "45 minutes"}
    edited = job(data, status, generation=2)
    plan = decide_streaming_job(edited, app, at(1))
    assert plan.delete_app and plan.move_checkpoint is None and plan.create_rewind is None
    assert plan.status["upgrade"]["mode"] == "last-state" and plan.status["upgrade"]["step"] == "Starting"
    status = merged(status, plan)
    created = decide_streaming_job(job(data, status, 2), None, at(2))
    assert streaming_job_config(job(data, status, 2)).checkpoint.location.endswith("/live"), "state kept"
    done = decide_streaming_job(job(data, merged(status, created), 2), app_of(created), at(3))
    assert done.status["upgrade"] is None and [e.reason for e in done.events][-1] == "Upgraded"
    assert done.status["lastStableHash"] == job_hash(edited, streaming_job_config(edited))


def test_stateless_starts_on_an_empty_checkpoint() -> None:
    data = manifest(upgrade={"mode": "stateless"})
    status, app = running(data)
    data["spec"]["pipelineArgs"] = {"lateness": "45 minutes"}
    plan = decide_streaming_job(job(data, status, generation=2), app, at(1))
    assert plan.delete_app and plan.move_checkpoint == "s3a://lake/checkpoints/rmi/live-g2"
    data["metadata"]["annotations"] = {CHECKPOINT_ANNOTATION: plan.move_checkpoint}
    status = merged(status, plan)
    again = decide_streaming_job(job(data, status, 2), app, at(1))
    assert again.move_checkpoint is None, "moved once"
    created = decide_streaming_job(job(data, status, 2), None, at(2))
    cfg = json.loads(created.config_map["data"]["job.json"]) if created.config_map else {}
    assert cfg["checkpoint"]["location"] == "s3a://lake/checkpoints/rmi/live-g2", "state dropped: a new checkpoint"
    assert created.create_app is not None
    to_hash = status["upgrade"]["toHash"]
    assert created.create_app["metadata"]["annotations"]["kappa.dev/config-hash"] == to_hash, "the upgrade's config"


def answer(nonce: str, batch: int, minutes: float) -> dict[str, dict[str, Answer]]:
    t = T0 + timedelta(minutes=minutes)
    return {nonce: {SINK: Answer(nonce=nonce, sink=SINK, batch_id=batch, committed_at=t, taken_at=t)}}


def test_a_trigger_nonce_asks_the_driver_and_its_answer_lands_in_the_history() -> None:
    data = manifest()
    status, app = running(data)
    data["spec"]["snapshotTriggerNonce"] = 7
    plan = decide_streaming_job(job(data, status), app, at(1))
    assert plan.control_map is not None
    assert json.loads(plan.control_map["data"]["snapshot-requests"]) == {"nonces": ["trigger-7"]}
    assert plan.status["snapshotTriggerNonce"] == 7 and not plan.delete_app
    (entry,) = plan.status["snapshots"]
    assert entry["reason"] == "trigger" and "takenAt" not in entry
    status = merged(status, plan)
    assert decide_streaming_job(job(data, status), app, at(1)).control_map is None, "asked once"
    taken = decide_streaming_job(job(data, status), app, at(2), answer("trigger-7", 41, 1.5))
    (entry,) = taken.status["snapshots"]
    assert entry["batchIds"] == {SINK: 41} and entry["takenAt"] == at(1.5) and entry["location"].startswith("s3://")
    assert ("Normal", "SnapshotTaken") in [(e.type, e.reason) for e in taken.events]


def test_an_unanswered_request_is_given_up_and_said() -> None:
    data = manifest(snapshotTriggerNonce=1, upgrade={"snapshotTimeout": "5m"})
    status, app = running(data)
    late = decide_streaming_job(job(data, status), app, at(6))
    (entry,) = late.status["snapshots"]
    assert "not taken within 5m" in entry["error"] and [e.reason for e in late.events] == ["SnapshotFailed"]


def test_snapshot_then_upgrade_waits_for_the_snapshot() -> None:
    data = manifest(upgrade={"mode": "snapshot"})
    status, app = running(data)
    data["spec"]["pipelineArgs"] = {"lateness": "45 minutes"}
    edited = job(data, status, generation=2)
    nonce = f"upgrade-{job_hash(edited, streaming_job_config(edited))}"
    plan = decide_streaming_job(edited, app, at(1))
    assert not plan.delete_app, "the previous spec runs until the snapshot is taken"
    assert plan.status["phase"] == "Upgrading" and plan.status["upgrade"]["step"] == "Snapshotting"
    assert plan.control_map is not None and nonce in plan.control_map["data"]["snapshot-requests"]
    assert conditions(plan.status)["Ready"] == "True", "it still runs"
    status = merged(status, plan)
    waiting = decide_streaming_job(job(data, status, 2), app, at(2))
    assert not waiting.delete_app and waiting.events == ()
    go = decide_streaming_job(job(data, status, 2), app, at(3), answer(nonce, 12, 2.5))
    assert (
        go.delete_app and go.status["upgrade"]["step"] == "Starting" and go.status["upgrade"]["snapshotNonce"] == nonce
    )
    assert go.status["snapshots"][0]["batchIds"] == {SINK: 12}


def test_no_snapshot_no_upgrade_the_previous_spec_keeps_running() -> None:
    data = manifest(upgrade={"mode": "snapshot", "snapshotTimeout": "5m"})
    status, app = running(data)
    data["spec"]["pipelineArgs"] = {"lateness": "45 minutes"}
    status = merged(status, decide_streaming_job(job(data, status, 2), app, at(1)))
    failed = decide_streaming_job(job(data, status, 2), app, at(7))
    assert not failed.delete_app and failed.status["upgrade"]["step"] == "SnapshotFailed"
    assert "UpgradeFailed" in [e.reason for e in failed.events]
    status = merged(status, failed)
    assert decide_streaming_job(job(data, status, 2), app, at(8)).delete_app is False, "said once, not retried"


def upgraded(data: dict[str, Any], mode: str = "last-state") -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A running job of ``data`` (rollback on) edited to a new spec whose application was just
    created: (the edited manifest, its status, the new application)."""
    data["spec"]["upgrade"] = {"mode": mode, "rollback": True, "readyTimeout": "5m"}
    status, app = running(data)
    edited = json.loads(json.dumps(data))
    edited["spec"]["pipelineArgs"] = {"lateness": "45 minutes"}
    answers = None
    if mode == "snapshot":
        first = decide_streaming_job(job(edited, status, 2), app, at(1))
        status = merged(status, first)
        answers = answer(first.status["upgrade"]["snapshotNonce"], 12, 1.5)
    plan = decide_streaming_job(job(edited, status, 2), app, at(2), answers)
    assert plan.delete_app
    status = merged(status, plan)
    created = decide_streaming_job(job(edited, status, 2), None, at(3))
    return edited, merged(status, created), app_of(created, "SUBMITTED")


def test_a_failed_upgrade_rolls_back_to_the_last_stable_spec() -> None:
    data = manifest()
    stable_hash = job_hash(job(data), streaming_job_config(job(data)))
    edited, status, new_app = upgraded(data)
    new_app["status"]["applicationState"] = {"state": "FAILED", "errorMessage": "ImportError: no module lateness"}
    plan = decide_streaming_job(job(edited, status, 2), new_app, at(4))
    assert plan.delete_app and plan.create_rewind is None
    assert plan.status["rolledBackGeneration"] == 2 and plan.status["upgrade"]["step"] == "RolledBack"
    assert "ImportError" not in plan.status["message"] and "rolled back to config" in plan.status["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "RolledBack")]
    status = merged(status, plan)
    again = decide_streaming_job(job(edited, status, 2), None, at(5))
    assert again.create_app is not None
    assert again.create_app["metadata"]["annotations"]["kappa.dev/config-hash"] == stable_hash, "the last stable spec"
    status = merged(status, again)
    runs = decide_streaming_job(job(edited, status, 2), app_of(again), at(6))
    assert runs.status["phase"] == "Running" and runs.delete_app is False
    edited["spec"]["pipelineArgs"] = {"lateness": "50 minutes"}
    fixed = decide_streaming_job(job(edited, merged(status, runs), 3), app_of(again), at(7))
    assert fixed.delete_app and fixed.status["upgrade"]["step"] == "Starting", "an edit is a new upgrade"


def test_an_upgrade_that_never_runs_rolls_back_after_the_ready_timeout() -> None:
    edited, status, new_app = upgraded(manifest())
    assert decide_streaming_job(job(edited, status, 2), new_app, at(6)).delete_app is False, "within 5m"
    late = decide_streaming_job(job(edited, status, 2), new_app, at(9))
    assert late.delete_app and "did not reach RUNNING within 5m" in late.status["message"]


def test_without_rollback_a_failed_upgrade_backs_off() -> None:
    data = manifest()
    edited, status, new_app = upgraded(data)
    edited["spec"]["upgrade"]["rollback"] = False
    new_app["status"]["applicationState"] = {"state": "FAILED"}
    plan = decide_streaming_job(job(edited, status, 2), new_app, at(4))
    assert plan.status["phase"] == "BackingOff" and "rolledBackGeneration" not in plan.status


def test_a_snapshot_upgrade_rolls_back_to_its_snapshot_through_a_rewind() -> None:
    edited, status, new_app = upgraded(manifest(), mode="snapshot")
    new_app["status"]["applicationState"] = {"state": "FAILED"}
    plan = decide_streaming_job(job(edited, status, 2), new_app, at(4))
    rewind = plan.create_rewind
    assert rewind is not None and rewind["kind"] == "Rewind" and rewind["metadata"]["name"] == "rmi-rollback-g2"
    assert rewind["spec"] == {"jobRef": {"name": "rmi"}, "target": {"batchId": 12}, "resetSinks": True}
    assert rewind["metadata"]["ownerReferences"][0]["uid"] == "u1"


def test_a_new_job_restores_its_initial_snapshot_before_its_first_run() -> None:
    data = manifest(initialSnapshot={"location": "s3://lake/kappa-snapshots/old-rmi", "batchId": 41})
    point = RestorePointStatus(sink=SINK, batch_id=41, committed_at="2026-11-26T09:00:00.000000Z", query_id="q-old")
    first = decide_streaming_job(job(data), None, at(0), initial=InitialSeen(points=[point]))
    assert first.create_app is None and first.restore is not None
    cm, restorer = first.restore
    assert restorer["metadata"]["name"] == "rmi-restore" and restorer["spec"]["arguments"][0] == "restore"
    assert restorer["spec"]["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"] == "rmi-restore-jobconfig"
    cfg = json.loads(cm["data"]["job.json"])
    assert cfg["checkpoint"]["location"] == "s3a://lake/checkpoints/rmi/live"
    assert cfg["checkpoint"]["external"]["location"] == "s3://lake/kappa-snapshots/old-rmi"
    assert cfg["restore"]["copyOnly"] is True and cfg["restore"]["resetSinks"] is False, "the other job untouched"
    assert first.status["phase"] == "Restoring" and first.status["initialRestore"][0]["batchId"] == 41
    status = merged(None, first)
    ran = {**restorer, "status": {"applicationState": {"state": "COMPLETED"}}}
    report = RestoreReport(rewind="x", state="Restored", sinks=[], started_at=T0, finished_at=T0)
    done = decide_streaming_job(job(data, status), None, at(1), initial=InitialSeen(restore_app=ran, report=report))
    assert done.delete_restore and done.create_app is not None and done.status["initialSnapshotRestored"] is True
    status = merged(status, done)
    later = decide_streaming_job(job(data, {**status, "phase": "Suspended"}), None, at(2))
    assert later.restore is None and later.create_app is not None, "restored once, never again"


def test_a_missing_or_failed_initial_snapshot_is_said() -> None:
    data = manifest(initialSnapshot={"location": "s3://lake/none", "time": "2026-11-26T09:00:00Z"})
    missing = decide_streaming_job(job(data), None, at(0), initial=InitialSeen(points="sink x: no snapshot"))
    assert missing.status["phase"] == "Failed" and missing.create_app is None and missing.restore is None
    assert [e.reason for e in missing.events] == ["InitialSnapshotMissing"]
    point = RestorePointStatus(sink=SINK, batch_id=1, committed_at="2026-11-26T08:00:00.000000Z", query_id="q")
    status = merged(None, decide_streaming_job(job(data), None, at(0), initial=InitialSeen(points=[point])))
    failed_app = {"metadata": {"name": "rmi-restore"}, "status": {"applicationState": {"state": "FAILED"}}}
    bad = RestoreReport(rewind="x", state="Failed", sinks=[], error="snapshot gone", started_at=T0, finished_at=T0)
    failed = decide_streaming_job(
        job(data, status), None, at(1), initial=InitialSeen(restore_app=failed_app, report=bad)
    )
    assert failed.status["phase"] == "Failed" and "snapshot gone" in failed.status["message"]
    assert failed.create_app is None
