"""The Backfill decision (pure): job resolution, launch, state, progress and ETA."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.coordinator.core import GroupSpec, joined, left
from kappa_operator.coordinator.groups import owned
from kappa_operator.coordinator.scopes import verify
from kappa_operator.models.backfill import Backfill, PublishedTable
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill import NONCE, Outcome, plan_backfill, progress, progress_status, published

ROOT = Path(__file__).resolve().parents[2]
NOW = "2026-11-21T10:00:00Z"
START, END = datetime(2026, 11, 1, 14, tzinfo=UTC), datetime(2026, 11, 1, 18, tzinfo=UTC)


def load(name: str, **meta: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"].update(meta)
    return data


def bf(status: dict[str, Any] | None = None) -> Backfill:
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=2)
    if status is not None:
        data["status"] = status
    return Backfill.model_validate(data)


JOB = StreamingJob.model_validate(load("rmi-streamingjob.yaml", uid="sj"))


def test_a_missing_job_waits_with_a_warning_once() -> None:
    plan = plan_backfill(bf(), None, None, None, NOW)
    assert plan.status["phase"] == "Pending" and plan.retry_after and plan.create_app is None
    assert [e.type for e in plan.events] == ["Warning"]
    again = plan_backfill(bf(plan.status), None, None, None, NOW)
    assert again.events == ()


def test_launch_renders_the_history_run_into_the_branch() -> None:
    plan = plan_backfill(bf(), JOB, None, "http://c:8471", NOW, admin_token="admin")
    assert plan.create_app is not None and plan.config_map is not None and plan.secret is not None
    spec = plan.create_app["spec"]
    assert spec["restartPolicy"] == {"type": "Never"}
    assert plan.create_app["metadata"]["name"] == "rmi-outage-backfill", "never the StreamingJob's name"
    secret = plan.secret["metadata"]["name"]
    assert spec["driver"]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == secret == "rmi-outage-backfill-coordinator"
    assert plan.secret["metadata"]["ownerReferences"][0]["uid"] == "bf-uid-1234"
    scope = verify("admin", plan.secret["stringData"]["token"])
    assert scope is not None and scope.groups == {"default.rmi-outage"}, "a credential for its own group only"
    assert plan.status["phase"] == "Running" and plan.status["branch"] == "backfill-rmi-outage"
    assert plan.status["checkpoint"].endswith("/backfills/rmi-outage-bf-uid-1")


def with_state(app: dict[str, Any], state: str) -> dict[str, Any]:
    return {**app, "status": {"applicationState": {"state": state}}}


def test_application_states_become_backfill_phases() -> None:
    app = plan_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    for state, phase in (("RUNNING", "Running"), ("COMPLETED", "Publishing"), ("FAILED", "Failed")):
        plan = plan_backfill(bf(), JOB, with_state(app, state), None, NOW)
        assert plan.status["phase"] == phase
    done = plan_backfill(bf({"phase": "Succeeded"}), JOB, None, None, NOW)
    assert done.create_app is None, "a finished backfill whose application is gone is not rerun"


def test_launch_joins_the_namespaced_group_with_one_member_per_sink_and_source() -> None:
    plan = plan_backfill(bf(), JOB, None, "http://c:8471", NOW, admin_token="t")
    group = plan.join_group
    assert group is not None and group.name == "default.rmi-outage"
    assert set(group.members) == {f"rmi-outage/{k}/{s}" for k in JOB.spec.sinks for s in JOB.spec.sources}
    assert group.max_drift_us == 10 * 60 * 1_000_000
    cfg = json.loads(plan.config_map["data"]["job.json"])  # type: ignore[index]
    assert cfg["alignment"]["group"] == group.name and cfg["coordinator"]["url"] == "http://c:8471"
    assert cfg["trigger"]["kind"] == "availableNow"


def test_unordered_declares_no_group_and_mounts_no_token() -> None:
    data = load("rmi-backfill.yaml", uid="u", generation=1)
    data["spec"]["alignment"]["mode"] = "unordered"
    plan = plan_backfill(Backfill.model_validate(data), JOB, None, "http://c:8471", NOW, admin_token="t")
    assert plan.join_group is None and "env" not in plan.create_app["spec"]["driver"]  # type: ignore[index]
    assert plan.secret is None


def test_completion_publishes_when_enabled_else_succeeds_and_leaves_the_group() -> None:
    app = plan_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert app is not None
    publishing = plan_backfill(bf({"phase": "Running"}), JOB, with_state(app, "COMPLETED"), "http://c", NOW)
    assert publishing.publish and publishing.status["phase"] == "Publishing" and publishing.leave_group is None
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=2)
    data["spec"]["publish"]["enabled"] = False
    no_publish = Backfill.model_validate(data)
    done = plan_backfill(no_publish, JOB, with_state(app, "COMPLETED"), "http://c", NOW)
    assert done.status["phase"] == "Succeeded" and not done.publish
    assert done.leave_group is not None and done.leave_group.name == "default.rmi-outage"
    conds = {c["type"]: c["status"] for c in done.status["conditions"]}
    assert conds == {"Ready": "True", "Progressing": "False", "Succeeded": "True", "Failed": "False"}
    assert done.status["progress"] == "100%" and done.status["eta"] is None, "no stale ETA after completion"


def test_a_publish_in_progress_resumes_after_a_restart() -> None:
    plan = plan_backfill(bf({"phase": "Publishing"}), JOB, None, "http://c", NOW)
    assert plan.publish and plan.create_app is None and plan.status["phase"] == "Publishing"


def test_published_outcomes() -> None:
    table = PublishedTable(table="rmi.out", match_ratio=1.0, rows_removed=3, rows_added=5, snapshot_id=7)
    group = plan_backfill(bf(), JOB, None, "http://c", NOW).join_group
    ok = published(bf({"phase": "Publishing"}), Outcome([table], None), group, NOW)
    assert ok.status["phase"] == "Succeeded" and ok.status["matchRatio"] == 1.0 and ok.leave_group == group
    assert ok.status["published"][0]["rowsAdded"] == 5 and ok.events[0].reason == "Published"
    refused = published(bf({"phase": "Publishing"}), Outcome([], "match 0.5 < 0.999"), group, NOW)
    assert refused.status["phase"] == "Failed" and refused.leave_group is None
    assert refused.events[0].type == "Warning" and "0.999" in refused.status["message"]
    assert ok.status["final"] is True


def test_a_published_branch_that_is_not_final_says_so() -> None:
    """The run could not close every result (history too short, sessions still open): the
    publish succeeds but status, message and an event say what is not final."""
    table = PublishedTable(table="rmi.out", match_ratio=1.0, rows_removed=3, rows_added=5, snapshot_id=7)
    note = "rmi.out: not yet final: 4 windows or sessions of out that start in the window ..."
    done = published(bf({"phase": "Publishing"}), Outcome([table], None, (note,)), None, NOW)
    assert done.status["phase"] == "Succeeded" and done.status["final"] is False
    assert note in done.status["message"]
    assert [(e.type, e.reason) for e in done.events] == [("Normal", "Published"), ("Warning", "NotFinal")]


def test_a_failed_backfill_stays_failed_until_the_restart_nonce_changes() -> None:
    app = plan_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None and app["metadata"]["annotations"][NONCE] == "0"
    failed = plan_backfill(bf({"phase": "Running", "restartNonce": 0}), JOB, with_state(app, "FAILED"), None, NOW)
    assert failed.status["phase"] == "Failed" and "restartNonce" in failed.status["message"]
    assert failed.join_group is None, "a failed backfill keeps its group but does not re-declare it"
    gone = plan_backfill(bf({"phase": "Failed", "restartNonce": 0}), JOB, None, None, NOW)
    assert gone.create_app is None and gone.status["phase"] == "Failed"

    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=3)
    data["spec"]["restartNonce"] = 1
    data["status"] = {"phase": "Failed", "restartNonce": 0}
    retry = Backfill.model_validate(data)
    delete = plan_backfill(retry, JOB, with_state(app, "FAILED"), None, NOW)
    assert delete.delete_app and delete.create_app is None, "the old application goes first"
    again = plan_backfill(retry, JOB, None, None, NOW)
    assert again.create_app is not None and again.create_app["metadata"]["annotations"][NONCE] == "1"
    assert again.status["restartNonce"] == 1 and again.status["checkpoint"].endswith("rmi-outage-bf-uid-1")
    assert again.events[0].message.startswith("resubmitted")


def test_an_unknown_source_override_fails_with_the_field_and_no_application() -> None:
    data = load("rmi-backfill.yaml", uid="u", generation=1)
    data["spec"]["sources"] = {"nope": {"filter": "x > 1"}}
    plan = plan_backfill(Backfill.model_validate(data), JOB, None, None, NOW)
    assert plan.status["phase"] == "Failed" and plan.create_app is None
    assert "spec.sources" in plan.status["message"] and "nope" in plan.status["message"]


def test_group_membership_is_shared_not_replaced() -> None:
    a = GroupSpec(name="g", members=("a/s/x", "a/s/y"), max_drift_us=600)
    b = GroupSpec(name="g", members=("b/s/x",), max_drift_us=300)
    both = joined(joined(None, a), b)
    assert both.members == ("a/s/x", "a/s/y", "b/s/x") and both.max_drift_us == 300
    assert joined(both, a) == both, "joining again is a no-op (a restarted operator re-joins)"
    rest = left(both, owned(both.members, "a"))
    assert rest is not None and rest.members == ("b/s/x",)
    assert left(rest, owned(rest.members, "b")) is None


def test_progress_and_eta() -> None:
    now = datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert progress(START, END, None, None, now).ratio == 0.0
    half = progress(START, END, START + timedelta(hours=2), None, now)
    assert half.percent == "50%" and half.eta is None
    later = progress(START, END, START + timedelta(hours=3), (now, 0.5), now + timedelta(minutes=10))
    assert later.percent == "75%" and later.eta == timedelta(minutes=10)  # 25% per 10 min
    assert progress(START, END, END + timedelta(hours=1), None, now).ratio == 1.0


def test_progress_status_uses_the_previous_observation_for_the_eta() -> None:
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    us = int((START + timedelta(hours=1)).timestamp() * 1e6)
    first = progress_status(bf({"phase": "Running"}), us, 90_000_000, t0)
    assert first["progress"] == "25%" and first["alignmentLag"] == "90s" and first["eta"] is None
    us2 = int((START + timedelta(hours=2)).timestamp() * 1e6)
    second = progress_status(bf({"phase": "Running", **first}), us2, 0, t0 + timedelta(minutes=5))
    assert second["progress"] == "50%" and second["eta"] == "0:10:00"
    assert progress_status(bf(), -(2**62), None, t0)["globalWatermark"] is None, "held: no watermark yet"
