"""The Backfill decision (pure): job resolution, launch, state, progress and ETA."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.coordinator.core import joined, left
from kappa_operator.coordinator.groups import GroupProgress as Seen
from kappa_operator.coordinator.groups import owned
from kappa_operator.coordinator.messages import GroupSpec
from kappa_operator.coordinator.scopes import verify
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill, follow_step, submitted
from kappa_operator.reconcile.backfill.intent import DONE, NO_PACE, NONCE, PUBLISH, SAVED_JOB, saved_job
from kappa_operator.reconcile.backfill.progress import (
    byte_rate,
    group_declared_again,
    progress,
    progress_status,
    progress_update,
)
from kappa_operator.reconcile.backfill.publish import published, wants_publish_report
from kappa_operator.reconcile.backfill_queue import Queued
from kappa_operator.reconcile.failures import changes_nothing
from kappa_operator.reconcile.phases import MESSAGE_MAX, driver_pod, one_line, with_last_words
from kappa_operator.render.spark_application import Owner
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError, IncompleteBackfillError, WarmupError
from spark_app.contract.reports.publish import PublishReport, TableReport

ROOT = Path(__file__).resolve().parents[4]
NOW = "2026-11-21T10:00:00Z"
START, END = datetime(2026, 11, 1, 14, tzinfo=UTC), datetime(2026, 11, 1, 18, tzinfo=UTC)


def load(name: str, **meta: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"].update(meta)
    return data


def bf(status: dict[str, Any] | None = None, **spec: Any) -> Backfill:
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=2)
    data["spec"].update(spec)
    if status is not None:
        data["status"] = status
    return Backfill.model_validate(data)


NO_RESTART = {"restart": {"maxAttempts": 0}}
"""A backfill that stays Failed at its application's first failure (spec.restart)."""


JOB = StreamingJob.model_validate(load("rmi-streamingjob.yaml", uid="sj"))


def test_a_missing_job_waits_with_a_warning_once() -> None:
    plan = decide_backfill(bf(), None, None, None, NOW)
    assert plan.status["phase"] == "Pending" and plan.retry_after and plan.create_app is None
    assert [e.type for e in plan.events] == ["Warning"]
    again = decide_backfill(bf(plan.status), None, None, None, NOW)
    assert again.events == ()


def test_launch_renders_the_history_run_into_the_branch() -> None:
    plan = decide_backfill(bf(), JOB, None, "http://c:8471", NOW, admin_token="admin")
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
    app = decide_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    for state, phase in (("RUNNING", "Running"), ("COMPLETED", "Publishing"), ("FAILED", "Failed")):
        plan = decide_backfill(bf(**NO_RESTART), JOB, with_state(app, state), None, NOW)
        assert plan.status["phase"] == phase
    backing_off = decide_backfill(bf(), JOB, with_state(app, "FAILED"), None, NOW)
    assert backing_off.status["phase"] == "Running" and backing_off.status["restarts"] == 1, "spec.restart"
    done = decide_backfill(bf({"phase": "Succeeded"}), JOB, None, None, NOW)
    assert done.create_app is None, "a finished backfill whose application is gone is not rerun"


def test_the_first_event_of_a_just_submitted_application_changes_nothing() -> None:
    """Created by us, not yet taken by the Spark operator: no second Submitted Event and a
    status that changes nothing (not written); its first state is said once."""
    created = decide_backfill(bf(), JOB, None, None, NOW)
    assert created.create_app is not None
    status = {**created.status, "restartNonce": created.status.get("restartNonce", 0)}
    seen = decide_backfill(bf(status), JOB, {**created.create_app, "status": {}}, None, NOW)
    assert seen.events == () and seen.create_app is None and not seen.delete_app
    assert changes_nothing(status, seen.status)
    taken = decide_backfill(bf(status), JOB, with_state(created.create_app, "SUBMITTED"), None, NOW)
    assert taken.status["applicationState"] == "SUBMITTED" and [e.reason for e in taken.events] == ["Submitted"]


def test_launch_joins_the_namespaced_group_with_one_member_per_sink_and_source() -> None:
    plan = decide_backfill(bf(), JOB, None, "http://c:8471", NOW, admin_token="t")
    group = plan.join_group
    assert group is not None and group.name == "default.rmi-outage"
    assert set(group.members) == {f"rmi-outage/{k}/{s}" for k in JOB.spec.sinks for s in JOB.spec.sources}
    assert group.max_drift_us == 10 * 60 * 1_000_000
    cfg = json.loads(plan.config_map["data"]["job.json"])  # type: ignore[index]
    assert cfg["alignment"]["group"] == group.name and cfg["coordinator"]["url"] == "http://c:8471"
    assert cfg["trigger"]["kind"] == "availableNow"


@pytest.mark.parametrize("mode", ["unordered", "bounded"])
def test_an_unaligned_mode_declares_no_group_and_mounts_no_token(mode: str) -> None:
    data = load("rmi-backfill.yaml", uid="u", generation=1)
    data["spec"]["alignment"]["mode"] = mode
    plan = decide_backfill(Backfill.model_validate(data), JOB, None, "http://c:8471", NOW, admin_token="t")
    assert plan.join_group is None and "env" not in plan.create_app["spec"]["driver"]  # type: ignore[index]
    assert plan.secret is None
    cfg = json.loads(plan.config_map["data"]["job.json"])  # type: ignore[index]
    assert cfg["alignment"]["mode"] == mode and "coordinator" not in cfg


def test_a_completion_without_a_report_of_its_run_falls_back_to_the_publish_application_else_succeeds() -> None:
    """An application that completed and left no publish report (an image from before its driver
    published, or the report lost): the separate publish application validates and publishes."""
    app = decide_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert app is not None
    publishing = decide_backfill(bf({"phase": "Running"}), JOB, with_state(app, "COMPLETED"), "http://c", NOW)
    pub = publishing.create_publish_app
    assert pub is not None and publishing.status["phase"] == "Publishing" and publishing.leave_group is None
    assert "it left no publish report of this run" in publishing.status["message"]
    assert [e.reason for e in publishing.events] == ["Publishing"]
    owner = Owner("Backfill", "rmi-outage", "default", "bf-uid-1234")
    assert pub["metadata"]["name"] == owner.publish_app_name == "rmi-outage-backfill-publish"
    assert pub["metadata"]["ownerReferences"][0]["uid"] == "bf-uid-1234"
    assert pub["spec"]["arguments"][0] == "publish", "python -m spark_app publish --config ..."
    assert pub["spec"]["volumes"] == app["spec"]["volumes"], "the same JobConfig"
    assert "env" not in pub["spec"]["driver"], "no coordinator credential: publishing reports to nobody"
    assert publishing.status["publishApplicationName"] == owner.publish_app_name
    assert publishing.create_app is None and not publishing.delete_app
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=2)
    data["spec"]["publish"]["enabled"] = False
    no_publish = Backfill.model_validate(data)
    done = decide_backfill(no_publish, JOB, with_state(app, "COMPLETED"), "http://c", NOW)
    assert done.status["phase"] == "Succeeded" and done.create_publish_app is None
    assert done.leave_group is not None and done.leave_group.name == "default.rmi-outage"
    conds = {c["type"]: c["status"] for c in done.status["conditions"]}
    assert conds == {"Ready": "True", "Progressing": "False", "Succeeded": "True", "Failed": "False"}
    assert done.status["progress"] == "100%" and done.status["eta"] is None, "no stale ETA after completion"


def test_the_publish_settings_travel_in_the_job_config() -> None:
    app = decide_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert app is not None
    pub = decide_backfill(bf({"phase": "Running"}), JOB, with_state(app, "COMPLETED"), "http://c", NOW)
    assert pub.create_publish_app is not None
    cfg = decide_backfill(bf(), JOB, None, "http://c", NOW).config_map
    assert cfg is not None
    job = JobConfig.model_validate_json(cfg["data"]["job.json"])
    assert job.publish is not None and job.publish.tag == "default/rmi-outage"
    assert job.publish.min_match_ratio == bf().spec.publish.min_match_ratio


def report(state: str = "Published", error: str | None = None, **table: Any) -> PublishReport:
    t = TableReport(
        table="rmi.out",
        branch="backfill-rmi-outage",
        match_ratio=0.5,
        main_rows=6,
        branch_rows=8,
        matched=4,
        rows_removed=3,
        rows_added=5,
        snapshot_id=7,
        differing_keys=['{"playback_id": "p1"}'],
        **table,
    )
    return PublishReport(
        backfill="default/rmi-outage",
        state=state,  # type: ignore[arg-type]
        tables=[t] if state != "Failed" else [],
        error=error,
        started_at=START,
        finished_at=END,
    )


def apps() -> tuple[dict[str, Any], dict[str, Any]]:
    """The backfill's application (completed) and the publish application it leads to."""
    run = decide_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert run is not None
    pub = decide_backfill(bf({"phase": "Running"}), JOB, with_state(run, "COMPLETED"), "http://c", NOW)
    assert pub.create_publish_app is not None
    return with_state(run, "COMPLETED"), pub.create_publish_app


def publishing(app_state: str, rep: PublishReport | None) -> Any:
    run, pub = apps()
    status = {"phase": "Publishing", "restartNonce": 0}
    return decide_backfill(bf(status), JOB, run, "http://c", NOW, publish_app=with_state(pub, app_state), report=rep)


def test_publishing_follows_its_application_and_ends_on_its_report() -> None:
    running = publishing("RUNNING", None)
    assert running.status["phase"] == "Publishing" and running.create_publish_app is None
    assert running.status["publishApplicationState"] == "RUNNING" and "is RUNNING" in running.status["message"]

    ok = publishing("COMPLETED", report())
    assert ok.status["phase"] == "Succeeded" and ok.status["matchRatio"] == 0.5 and ok.leave_group is not None
    (table,) = ok.status["published"]
    assert (table["rowsRemoved"], table["rowsAdded"], table["snapshotId"]) == (3, 5, 7)
    assert (table["mainRows"], table["branchRows"], table["matched"]) == (6, 8, 4)
    assert table["differingKeys"] == ['{"playback_id": "p1"}']
    assert ok.events[0].reason == "Published" and ok.status["final"] is True

    refused = publishing("FAILED", report("Refused", "rmi.out: branch matches main at 0.5 < required 0.999"))
    assert refused.status["phase"] == "Failed" and refused.leave_group is None
    assert any(c["reason"] == "ValidationFailed" for c in refused.status["conditions"])
    assert "0.999" in refused.status["message"] and refused.events[0].type == "Warning"

    crashed = publishing("FAILED", report("Failed", "publish of backfill rmi-outage failed: OSError: catalog down"))
    assert crashed.status["phase"] == "Failed" and "catalog down" in crashed.status["message"]
    assert "rmi-outage-backfill-publish" in crashed.status["message"]
    assert crashed.events[0].reason == "PublishFailed"

    silent = publishing("FAILED", None)
    assert silent.status["phase"] == "Failed" and "without a report" in silent.status["message"]


def test_a_publish_in_progress_resumes_after_a_restart() -> None:
    """An operator restarted in Publishing, the publish application gone or never created:
    it is submitted (again); publishing twice commits once (the Spark side's tests)."""
    run = decide_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert run is not None
    plan = decide_backfill(bf({"phase": "Publishing", "restartNonce": 0}), JOB, with_state(run, "COMPLETED"), None, NOW)
    assert plan.create_publish_app is not None and plan.create_app is None and plan.status["phase"] == "Publishing"


def test_a_refused_publish_stays_failed_until_the_restart_nonce_changes() -> None:
    run, pub = apps()
    refused = publishing("COMPLETED", report("Refused", "below the gate"))
    failed = bf(refused.status | {"restartNonce": 0})
    again = decide_backfill(failed, JOB, run, None, NOW, publish_app=with_state(pub, "COMPLETED"))
    assert again.create_publish_app is None and again.status["phase"] == "Failed", "no publish loop on events"

    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=3)
    data["spec"]["restartNonce"] = 1
    data["status"] = refused.status | {"restartNonce": 0}
    retry = Backfill.model_validate(data)
    delete = decide_backfill(retry, JOB, run, None, NOW, publish_app=with_state(pub, "COMPLETED"))
    assert delete.delete_app and delete.delete_publish_app, "both applications of the old attempt go"
    resubmit = decide_backfill(retry, JOB, None, None, NOW)
    assert resubmit.create_app is not None, "then the query runs again from its checkpoint, and publishes again"


SUBMITTED_AT = "2026-11-21T09:00:00Z"
"""When the tests' current application was submitted (status.startedAt)."""


def driver_report(state: str = "Published", error: str | None = None, minutes: int = 30) -> PublishReport:
    """A report the backfill's driver wrote ``minutes`` after its submission (negative: before it)."""
    at = datetime(2026, 11, 21, 9, tzinfo=UTC) + timedelta(minutes=minutes)
    return report(state, error).model_copy(update={"started_at": at, "finished_at": at + timedelta(seconds=20)})


def completed(nonce: int = 0, **status: Any) -> tuple[Backfill, dict[str, Any]]:
    """A running backfill submitted at SUBMITTED_AT, and its application, completed."""
    running = {"phase": "Running", "restartNonce": nonce, "startedAt": SUBMITTED_AT, "applicationState": "RUNNING"}
    current = bf({**running, **status}, restartNonce=nonce)
    app = decide_backfill(bf(restartNonce=nonce), JOB, None, "http://c", NOW).create_app
    assert app is not None
    return current, with_state(app, "COMPLETED")


def after(current: Backfill, plan: Any = None, **spec: Any) -> Backfill:
    """``current`` with ``plan``'s status merged in, as the API server merges a status patch
    (None removes a field), and ``spec`` changed."""
    assert current.status is not None
    merged = {**current.status.model_dump(by_alias=True, exclude_none=True), **(plan.status if plan else {})}
    data = current.model_dump(by_alias=True, exclude_none=True)
    data["status"] = {k: v for k, v in merged.items() if v is not None}
    data["spec"].update(spec)
    return Backfill.model_validate(data)


def test_a_completed_backfill_ends_on_the_report_its_driver_left_without_a_publish_application() -> None:
    running, app = completed()
    assert wants_publish_report(running, app, None), "the handler reads the report once the application completed"
    assert not wants_publish_report(running, with_state(app, "RUNNING"), None), "never while it runs"
    plan = decide_backfill(running, JOB, app, "http://c", NOW, report=driver_report())
    assert plan.status["phase"] == "Succeeded" and plan.create_publish_app is None and not plan.delete_app
    assert plan.create_app is None and plan.leave_group is not None and plan.delete_secret
    (table,) = plan.status["published"]
    assert (table["rowsRemoved"], table["rowsAdded"], table["snapshotId"]) == (3, 5, 7)
    assert plan.status["matchRatio"] == 0.5 and plan.status["applicationState"] == "COMPLETED"
    assert plan.status["publishApplicationName"] is None, "no publish application ran"
    assert [e.reason for e in plan.events] == ["Published"]
    assert not wants_publish_report(after(running, plan), app, None), "Succeeded: never read again"


def test_a_refused_validation_in_the_driver_fails_the_backfill_without_a_restart() -> None:
    running, app = completed()
    refused = decide_backfill(running, JOB, app, "http://c", NOW, report=driver_report("Refused", "below the gate"))
    assert refused.status["phase"] == "Failed" and refused.status["message"] == "publish refused: below the gate"
    assert any(c["reason"] == "ValidationFailed" for c in refused.status["conditions"])
    assert refused.create_publish_app is None and refused.create_app is None and not refused.delete_app
    assert refused.leave_group is None, "its group is kept for a resubmission"
    failed = after(running, refused)
    assert not wants_publish_report(failed, app, None)
    again = decide_backfill(failed, JOB, app, "http://c", NOW)
    assert again.status["phase"] == "Failed" and again.create_app is None and not again.delete_app, "kept as it is"
    assert again.create_publish_app is None and again.events == ()


def test_a_failed_report_of_a_completed_driver_is_a_publish_failure_naming_its_application() -> None:
    running, app = completed()
    error = "publish of backfill rmi-outage failed: OSError: catalog down"
    plan = decide_backfill(running, JOB, app, "http://c", NOW, report=driver_report("Failed", error))
    assert plan.status["phase"] == "Failed" and plan.events[0].reason == "PublishFailed"
    assert "SparkApplication rmi-outage-backfill: publish of backfill" in plan.status["message"]


def test_a_report_of_an_earlier_attempt_is_not_this_runs_the_publish_application_runs() -> None:
    """A driver from an image before publish ran in it neither clears nor writes the report: the
    one on storage is an earlier attempt's (written before this application was submitted)."""
    running, app = completed()
    stale = decide_backfill(running, JOB, app, "http://c", NOW, report=driver_report("Refused", "old", minutes=-60))
    assert stale.create_publish_app is not None and stale.status["phase"] == "Publishing"
    publishing = after(running, stale)
    pub = with_state(stale.create_publish_app, "FAILED")
    assert wants_publish_report(publishing, app, pub), "the publish application ended: its report"
    silent = decide_backfill(publishing, JOB, app, "http://c", NOW, publish_app=pub, report=driver_report(minutes=-60))
    assert silent.status["phase"] == "Failed" and "without a report" in silent.status["message"]


def test_a_refused_publish_runs_again_in_the_resubmitted_application_after_a_restart_nonce_bump() -> None:
    running, app = completed()
    refused = decide_backfill(running, JOB, app, "http://c", NOW, report=driver_report("Refused", "below the gate"))
    bumped = after(running, refused, restartNonce=1)
    assert not wants_publish_report(bumped, app, None), "the old attempt's application: not read"
    delete = decide_backfill(bumped, JOB, app, "http://c", NOW)
    assert delete.delete_app and not delete.delete_publish_app and delete.create_publish_app is None
    resubmit = decide_backfill(after(bumped, delete), JOB, None, "http://c", NOW)
    assert resubmit.create_app is not None and resubmit.create_app["metadata"]["annotations"][NONCE] == "1"
    assert resubmit.create_app["spec"]["arguments"] == ["--config", "/etc/kappa/job.json"], "the run, which publishes"
    assert resubmit.status["startedAt"] == NOW and resubmit.status["restartNonce"] == 1
    assert "then validating it against main and publishing" in resubmit.status["message"]
    submitted_again = after(bumped, resubmit)
    running_again = decide_backfill(submitted_again, JOB, with_state(resubmit.create_app, "RUNNING"), "http://c", NOW)
    rerun = after(submitted_again, running_again)
    new_app = with_state(resubmit.create_app, "COMPLETED")
    assert wants_publish_report(rerun, new_app, None)
    old = driver_report("Refused", "below the gate")  # written before the resubmission: not this run's
    assert decide_backfill(rerun, JOB, new_app, "http://c", NOW, report=old).create_publish_app is not None
    later = datetime(2026, 11, 21, 10, 5, tzinfo=UTC)
    ok = driver_report().model_copy(update={"started_at": later, "finished_at": later})
    done = decide_backfill(rerun, JOB, new_app, "http://c", NOW, report=ok)
    assert done.status["phase"] == "Succeeded" and done.create_publish_app is None


def test_the_application_says_what_its_driver_publishes_with() -> None:
    app = decide_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert app is not None
    assert json.loads(app["metadata"]["annotations"][PUBLISH]) == {"minMatchRatio": 0.999, "tag": "default/rmi-outage"}
    quiet = decide_backfill(bf(publish={"enabled": False}), JOB, None, "http://c", NOW).create_app
    assert quiet is not None and PUBLISH not in quiet["metadata"]["annotations"], "its driver does not publish"


def test_publish_settings_changed_before_completion_apply_through_the_publish_application() -> None:
    """spec.publish may change until the run completes: the driver's publish (with the settings
    it was submitted with) is not the one asked for any more, so the publish application runs
    with the new ones (a second publish of the same branch commits nothing new)."""
    running, app = completed()
    lowered = after(running, publish={"enabled": True, "minMatchRatio": 0.4})
    plan = decide_backfill(lowered, JOB, app, "http://c", NOW, report=driver_report("Refused", "below the gate"))
    assert plan.create_publish_app is not None and plan.status["phase"] == "Publishing"
    assert "its publish settings changed since it was submitted" in plan.status["message"]
    assert plan.config_map is not None, "its JobConfig rewritten first: the publish application reads it"
    assert json.loads(plan.config_map["data"]["job.json"])["publish"]["minMatchRatio"] == 0.4
    assert SAVED_JOB in plan.config_map["data"], "the job's copy kept"

    quiet = decide_backfill(bf(publish={"enabled": False}), JOB, None, "http://c", NOW).create_app
    assert quiet is not None
    enabled_since = with_state(quiet, "COMPLETED")
    assert wants_publish_report(running, enabled_since, None)
    plan = decide_backfill(running, JOB, enabled_since, "http://c", NOW)
    assert plan.create_publish_app is not None, "enabled after submission: published when it completes"


def test_publish_disabled_while_running_says_what_the_driver_did() -> None:
    """A driver publishes with the settings it was submitted with: disabled since, the operator
    still reads its report and says that main changed; refused or absent, nothing changed."""
    running, app = completed()
    disabled = after(running, publish={"enabled": False})
    assert wants_publish_report(disabled, app, None), "its driver was asked to publish"
    done = decide_backfill(disabled, JOB, app, "http://c", NOW, report=driver_report())
    assert done.status["phase"] == "Succeeded" and done.status["message"].startswith("published backfill-rmi-outage")
    for rep in (driver_report("Refused", "below the gate"), None):
        kept = decide_backfill(disabled, JOB, app, "http://c", NOW, report=rep)
        assert kept.status["phase"] == "Succeeded" and "publish is not enabled" in kept.status["message"]
        assert kept.create_publish_app is None and kept.leave_group is not None
    quiet = decide_backfill(bf(publish={"enabled": False}), JOB, None, "http://c", NOW).create_app
    assert quiet is not None
    never = bf({"phase": "Running", "restartNonce": 0}, publish={"enabled": False})
    assert not wants_publish_report(never, with_state(quiet, "COMPLETED"), None), "nothing to read"


def test_a_running_backfill_whose_last_decision_failed_is_decided_again_by_its_timer() -> None:
    """Its completed application's report was unreadable (storage down): the event's failure is
    shown in status (retries), and the timer decides again instead of only sampling progress."""
    running = bf({"phase": "Running", "restartNonce": 0, "retries": 1, "lastError": "OSError: unreachable"})
    assert follow_step(running, job_listed=True) == "reconcile"


def test_published_with_a_not_final_branch_says_so() -> None:
    """The run could not close every result (history too short, sessions still open): the
    publish succeeds but status, message and an event say what is not final."""
    note = "not yet final: 4 windows or sessions of out that start in the window ..."
    done = published(bf({"phase": "Publishing"}), report(not_final=[note]), None, NOW)
    assert done.status["phase"] == "Succeeded" and done.status["final"] is False
    assert f"rmi.out: {note}" in done.status["message"]
    assert [(e.type, e.reason) for e in done.events] == [("Normal", "Published"), ("Warning", "NotFinal")]


def test_a_failed_backfill_stays_failed_until_the_restart_nonce_changes() -> None:
    app = decide_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None and app["metadata"]["annotations"][NONCE] == "0"
    running = bf({"phase": "Running", "restartNonce": 0}, **NO_RESTART)
    failed = decide_backfill(running, JOB, with_state(app, "FAILED"), None, NOW)
    assert failed.status["phase"] == "Failed" and "restartNonce" in failed.status["message"]
    assert failed.join_group is None, "a failed backfill keeps its group but does not re-declare it"
    gone = decide_backfill(bf({"phase": "Failed", "restartNonce": 0}), JOB, None, None, NOW)
    assert gone.create_app is None and gone.status["phase"] == "Failed"

    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=3)
    data["spec"]["restartNonce"] = 1
    data["status"] = {"phase": "Failed", "restartNonce": 0, "restarts": 3}
    retry = Backfill.model_validate(data)
    delete = decide_backfill(retry, JOB, with_state(app, "FAILED"), None, NOW)
    assert delete.delete_app and delete.create_app is None, "the old application goes first"
    again = decide_backfill(retry, JOB, None, None, NOW)
    assert again.create_app is not None and again.create_app["metadata"]["annotations"][NONCE] == "1"
    assert again.status["restartNonce"] == 1 and again.status["checkpoint"].endswith("rmi-outage-bf-uid-1")
    assert again.events[0].message.startswith("resubmitted")
    assert again.status["restarts"] == 0, "a new restartNonce has its own spec.restart attempts"


# --- the StreamingJob deleted under a submitted backfill ---------------------------------------


def kept_copy() -> StreamingJob:
    """The job as a backfill's ConfigMap keeps it (what the handler reads once the job is gone)."""
    return StreamingJob.model_validate(json.loads(saved_job(JOB)))


def merged(*statuses: dict[str, Any]) -> dict[str, Any]:
    """Status as the server keeps it: each write is a merge patch over the one before."""
    out: dict[str, Any] = {}
    for s in statuses:
        out = {**out, **s}
    return out


def bumped(status: dict[str, Any], nonce: int = 1) -> Backfill:
    """The backfill after a person bumped spec.restartNonce to ``nonce``."""
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=3)
    data["spec"]["restartNonce"] = nonce
    data["status"] = status
    return Backfill.model_validate(data)


def test_a_failed_backfill_whose_job_was_deleted_resumes_from_the_kept_copy() -> None:
    """Its message said "bump spec.restartNonce to resume": with the job gone, the bump deletes
    the failed application, then submits from the copy kept at submission (same checkpoint and
    branch, a new credential, its group joined), instead of waiting in Pending for the job."""
    launched = decide_backfill(bf(), JOB, None, "http://c", NOW, admin_token="admin")
    assert launched.create_app is not None
    failed = decide_backfill(
        bf(launched.status, **NO_RESTART), JOB, with_state(launched.create_app, "FAILED"), "http://c", NOW
    )
    assert failed.status["phase"] == "Failed" and failed.delete_secret, "no driver left to present the credential"

    copy = kept_copy()
    retry = bumped(merged(launched.status, failed.status))
    delete = decide_backfill(retry, copy, with_state(launched.create_app, "FAILED"), "http://c", NOW, "admin", True)
    assert delete.delete_app and delete.create_app is None and delete.status["phase"] == "Running"
    assert delete.status["jobDeleted"] is True
    assert [(e.type, e.reason) for e in delete.events] == [("Warning", "JobDeleted"), ("Normal", "Restarting")]

    again = decide_backfill(bumped(merged(launched.status, delete.status)), copy, None, "http://c", NOW, "admin", True)
    assert again.create_app is not None and again.create_app["metadata"]["annotations"][NONCE] == "1"
    assert again.status["phase"] == "Running" and again.status["restartNonce"] == 1
    assert again.status["checkpoint"] == launched.status["checkpoint"], "resumes from its own checkpoint"
    assert again.create_app["spec"] == launched.create_app["spec"], "rendered from the copy as it was"
    assert again.config_map is not None and again.config_map["data"][SAVED_JOB] == saved_job(JOB), "copy kept"
    assert again.secret is not None and again.join_group == launched.join_group and not again.delete_secret
    assert [e.reason for e in again.events] == ["Submitted"], "the deletion was said once, before"
    assert "kept at submission" in again.events[0].message


def test_a_backfill_stuck_pending_by_the_old_operator_resumes_from_the_kept_copy() -> None:
    """A failed backfill bumped while its job was gone was left Pending (JobNotFound) by the
    previous operator, its failed application still there: it was submitted (restartNonce is
    recorded), so the kept copy is used and it restarts rather than waiting."""
    stuck = bumped({"phase": "Pending", "restartNonce": 0, "message": "StreamingJob rmi not found in default"})
    assert submitted(stuck) and follow_step(stuck, job_listed=False) == "reconcile"
    app = decide_backfill(bf(), JOB, None, "http://c", NOW).create_app
    assert app is not None
    restart = decide_backfill(stuck, kept_copy(), with_state(app, "FAILED"), "http://c", NOW, "admin", True)
    assert restart.delete_app and restart.status["phase"] == "Running"


def test_a_backfill_whose_job_and_application_are_gone_fails_and_lets_go() -> None:
    """Nobody asked for this run (same restartNonce): it is not started from the copy, it fails
    with JobDeleted once, leaves its group and drops its credential; a bump resumes it."""
    launched = decide_backfill(bf(), JOB, None, "http://c", NOW, admin_token="admin")
    gone = decide_backfill(bf(launched.status), kept_copy(), None, "http://c", NOW, "admin", True)
    assert gone.status["phase"] == "Failed" and gone.create_app is None
    assert gone.leave_group == launched.join_group and gone.delete_secret
    assert [(e.type, e.reason) for e in gone.events] == [("Warning", "JobDeleted")], "one Warning, not two"
    assert gone.status["jobDeleted"] is True and "bump spec.restartNonce" in gone.status["message"]
    assert any(c["reason"] == "JobDeleted" for c in gone.status["conditions"])

    now = merged(launched.status, gone.status)
    stays = decide_backfill(bf(now), kept_copy(), None, "http://c", NOW, "admin", True)
    assert stays.status["phase"] == "Failed" and stays.create_app is None and stays.events == ()
    resumed = decide_backfill(bumped(now), kept_copy(), None, "http://c", NOW, "admin", True)
    assert resumed.create_app is not None and resumed.join_group is not None and resumed.secret is not None


def test_a_running_backfill_says_once_that_its_job_was_deleted_and_goes_on() -> None:
    launched = decide_backfill(bf(), JOB, None, "http://c", NOW)
    assert launched.create_app is not None
    running = with_state(launched.create_app, "RUNNING")
    told = decide_backfill(bf(launched.status), kept_copy(), running, "http://c", NOW, job_saved=True)
    assert told.status["phase"] == "Running" and told.status["jobDeleted"] is True
    assert told.delete_app is False and told.leave_group is None and not told.delete_secret
    (warning,) = [e for e in told.events if e.reason == "JobDeleted"]
    assert warning.type == "Warning" and "going on with the configuration kept at submission" in warning.message
    again = decide_backfill(
        bf(merged(launched.status, told.status)), kept_copy(), running, "http://c", NOW, job_saved=True
    )
    assert all(e.reason != "JobDeleted" for e in again.events)
    with_job = decide_backfill(bf(launched.status), JOB, running, "http://c", NOW)
    assert "jobDeleted" not in with_job.status and all(e.reason != "JobDeleted" for e in with_job.events)


def test_a_failed_backfill_drops_its_credential_only_once_nothing_runs() -> None:
    launched = decide_backfill(bf(), JOB, None, "http://c", NOW, admin_token="admin")
    assert launched.create_app is not None
    app = launched.create_app
    running = bf(launched.status, **NO_RESTART)
    assert not decide_backfill(running, JOB, with_state(app, "RUNNING"), "http://c", NOW).delete_secret
    backing_off = decide_backfill(bf(launched.status), JOB, with_state(app, "FAILED"), "http://c", NOW)
    assert not backing_off.delete_secret, "its restart presents it again"
    assert decide_backfill(running, JOB, with_state(app, "FAILED"), "http://c", NOW).delete_secret
    failing = decide_backfill(running, JOB, with_state(app, "FAILING"), "http://c", NOW)
    assert failing.status["phase"] == "Failed" and not failing.delete_secret, "its driver may still be up"
    assert decide_backfill(bf({"phase": "Failed", "restartNonce": 0}), JOB, None, None, NOW).delete_secret
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=2)
    data["spec"]["sources"] = {"nope": {"filter": "x > 1"}}
    data["status"] = launched.status
    invalid = decide_backfill(Backfill.model_validate(data), JOB, with_state(app, "RUNNING"), "http://c", NOW)
    assert invalid.status["phase"] == "Failed" and not invalid.delete_secret, "a running driver keeps it"
    restarting = decide_backfill(bumped(launched.status), JOB, with_state(app, "FAILED"), "http://c", NOW)
    assert restarting.delete_app and not restarting.delete_secret, "resubmission re-applies it"


def test_the_periodic_look_reacts_to_a_deleted_job_within_a_tick() -> None:
    running = bf({"phase": "Running", "restartNonce": 0})
    assert follow_step(running, job_listed=True) == "progress"
    assert follow_step(running, job_listed=False) == "reconcile", "not when its application next changes"
    told = bf({"phase": "Running", "restartNonce": 0, "jobDeleted": True})
    assert follow_step(told, job_listed=False) == "progress", "said once; then only progress"
    never = bf({"phase": "Pending"})
    assert not submitted(never) and follow_step(never, job_listed=False) == "wait"
    assert follow_step(never, job_listed=True) == "reconcile"
    for phase in ("Queued", "Planning", "Publishing"):
        assert follow_step(bf({"phase": phase}), job_listed=False) == "reconcile"
    assert follow_step(bf(), job_listed=False) == "reconcile"
    assert not submitted(bf({"phase": "Succeeded", "restartNonce": 0})), "a succeeded one needs no job"


def test_an_unknown_source_override_fails_with_the_field_and_no_application() -> None:
    data = load("rmi-backfill.yaml", uid="u", generation=1)
    data["spec"]["sources"] = {"nope": {"filter": "x > 1"}}
    plan = decide_backfill(Backfill.model_validate(data), JOB, None, None, NOW)
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


def test_the_first_observation_after_a_restart_gives_no_eta_and_the_next_a_true_one() -> None:
    """A restart between two observations made the rate near zero and the ETA months: the
    restart drops the observation (``NO_PACE``), so the pace starts again after it."""
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    us = int((START + timedelta(hours=1)).timestamp() * 1e6)
    before = progress_status(bf({"phase": "Running"}), us, 0, t0)
    restarted = {k: v for k, v in {**before, **NO_PACE}.items() if v is not None}
    after = int((START + timedelta(hours=1, seconds=30)).timestamp() * 1e6)
    first = progress_status(bf({"phase": "Running", **restarted}), after, 0, t0 + timedelta(minutes=6))
    assert first["eta"] is None, "no stale observation to take a rate from"
    us2 = int((START + timedelta(hours=2)).timestamp() * 1e6)
    second = progress_status(bf({"phase": "Running", **first}), us2, 0, t0 + timedelta(minutes=11))
    assert second["eta"] is not None and timedelta(minutes=5) < parse_eta(second["eta"]) < timedelta(minutes=15)


def parse_eta(text: str) -> timedelta:
    hours, minutes, seconds = (int(float(x)) for x in text.split(", ")[-1].split(":"))
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def test_progress_status_uses_the_previous_observation_for_the_eta() -> None:
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    us = int((START + timedelta(hours=1)).timestamp() * 1e6)
    first = progress_status(bf({"phase": "Running"}), us, 90_000_000, t0)
    assert first["progress"] == "25%" and first["alignmentLag"] == "90s" and first["eta"] is None
    us2 = int((START + timedelta(hours=2)).timestamp() * 1e6)
    second = progress_status(bf({"phase": "Running", **first}), us2, 0, t0 + timedelta(minutes=5))
    assert second["progress"] == "50%" and second["eta"] == "0:10:00"
    assert progress_status(bf(), -(2**62), None, t0)["globalWatermark"] is None, "held: no watermark yet"


def test_the_read_rate_is_shown_and_a_change_of_rate_alone_is_written() -> None:
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    us = int((START + timedelta(hours=1)).timestamp() * 1e6)
    older = Seen(us, 0, False)  # a Spark side that does not report reads: no read fields at all
    assert not {"readRate", "readBytes"} & set(progress_status(bf({"phase": "Running"}), us, 0, t0, older))
    first = Seen(us, 0, False, read_bytes=5_000_000, read_files=3)  # one sample: totals, no rate yet
    shown = progress_update(bf({"phase": "Running"}), us, 0, t0, first)
    assert shown is not None
    assert (shown["readBytes"], shown["readFiles"], shown["readRate"]) == (5_000_000, 3, None)
    fast = Seen(us, 0, False, read_bytes=9_000_000, read_files=5, read_bytes_per_s=48_200_000.0, read_files_per_s=3.1)
    again = progress_update(bf({"phase": "Running", **shown}), us, 0, t0 + timedelta(seconds=5), fast)
    assert again is not None, "the same progress but a new read rate is written"
    assert again["readRate"] == "48.2 MB/s, 3.10 files/s" and again["readBytesPerSecond"] == 48_200_000.0
    assert progress_update(bf({"phase": "Running", **again}), us, 0, t0 + timedelta(seconds=10), fast) is None
    assert [byte_rate(x) for x in (999, 1000, 2_500_000, 7.5e9, 1.2e13)] == [
        "999 B/s",
        "1.0 kB/s",
        "2.5 MB/s",
        "7.5 GB/s",
        "12000.0 GB/s",
    ]


def test_what_was_read_is_shown_while_held_and_once_finished() -> None:
    """A held group (a member not reported yet) or a finished one has no progress to show, but
    its reads still move; a finished backfill shows no read rate left over from its last sample."""
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    running = bf({"phase": "Running", "readBytes": 5_000_000, "readFiles": 3, "readRate": "1.0 MB/s, 1.00 files/s"})
    finished = Seen(None, None, True, read_bytes=9_000_000, read_files=5, read_bytes_per_s=0.0, read_files_per_s=0.0)
    fields = progress_update(running, None, None, t0, finished)
    assert fields is not None and "progress" not in fields, "no progress while there is no watermark"
    assert (fields["readBytes"], fields["readRate"]) == (9_000_000, "0 B/s, 0.00 files/s")
    assert progress_update(bf({"phase": "Running", **fields}), None, None, t0, finished) is None, "unchanged"
    assert progress_update(running, None, None, t0, Seen(None, None, False)) is None, "no reads reported"
    assert {"readRate", "readBytesPerSecond"} <= {k for k, v in DONE.items() if v is None}


def test_a_group_held_for_members_that_have_not_reported_again_says_so_until_they_have() -> None:
    """After an operator failover the new leader's coordinator has no report of any member:
    every source holds at its last bound until all have reported again (issue 62). Status says
    which ones it waits for, and stops saying it once they have."""
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    running = bf({"phase": "Running", "progress": "25%", "progressRatio": 0.25, "alignmentLag": "0s"})
    waiting = Seen(None, None, False, waiting_for=("rmi-outage/attributed_plays/playbacks",))
    held = progress_update(running, None, None, t0, waiting)
    assert held is not None and "progress" not in held, "the last progress stays shown"
    assert held["alignmentHeld"].startswith("waiting for 1 member(s) to report (rmi-outage/attributed_plays/playbacks)")
    assert progress_update(bf({"phase": "Running", **held}), None, None, t0, waiting) is None, "unchanged"
    us = int((START + timedelta(hours=1)).timestamp() * 1e6)
    back = progress_update(bf({"phase": "Running", **held}), us, 0, t0 + timedelta(seconds=5), Seen(us, 0, False))
    assert back is not None and back["alignmentHeld"] is None, "cleared once every member reported"
    said = group_declared_again("kappa-kappa-operator-7d9c-x2")
    assert said.reason == "AlignmentGroupDeclaredAgain" and "replica kappa-kappa-operator-7d9c-x2 leads" in said.message


# --- a failed application run again by itself (spec.restart) ---------------------------------


def merged_status(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in {**before, **after}.items() if v is not None}


def test_a_failed_application_is_run_again_from_its_checkpoint_after_a_growing_delay_then_stays_failed() -> None:
    """Its driver pod deleted or its node lost: a new application from the same checkpoint and
    branch after 10 s, 20 s, 40 s; the fourth failure in a row stays Failed. Each step is in
    status before any I/O, so a second look at the same failed application counts nothing
    twice, and the timer finds a restart that is due."""
    launched = decide_backfill(bf(), JOB, None, "http://c", NOW, admin_token="admin")
    app, state = launched.create_app, launched.status
    assert app is not None
    clock = datetime(2026, 11, 21, 10, tzinfo=UTC)
    for attempt, delay in ((1, 10), (2, 20), (3, 40)):
        now = clock.strftime("%Y-%m-%dT%H:%M:%SZ")
        off = decide_backfill(bf(state), JOB, with_state(app, "FAILED"), "http://c", now)
        assert off.status["phase"] == "Running" and off.status["restarts"] == attempt, off.status
        assert off.status["eta"] is None, "nothing runs: no ETA"
        assert off.status["progressAt"] is None, "nor an observation to take the next rate from"
        assert off.delete_app is False and off.create_app is None and not off.delete_secret
        due = clock + timedelta(seconds=delay)
        assert off.status["nextRestartAt"] == due.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert [e.reason for e in off.events] == ["BackingOff"]
        state = merged_status(state, off.status)
        assert follow_step(bf(state), job_listed=True) == "reconcile", "the timer looks at a backing-off one"
        again = decide_backfill(bf(state), JOB, with_state(app, "FAILING"), "http://c", now)
        assert again.status == {} and not again.delete_app, "the same failure, seen again, waits"
        restart_at = due.strftime("%Y-%m-%dT%H:%M:%SZ")
        deleting = decide_backfill(bf(state), JOB, with_state(app, "FAILED"), "http://c", restart_at)
        assert deleting.delete_app and deleting.status["phase"] == "Running"
        assert f"restart {attempt} " in deleting.status["message"]
        state = merged_status(state, deleting.status)
        state.pop("nextRestartAt", None)
        still = decide_backfill(bf(state), JOB, with_state(app, "FAILED"), "http://c", restart_at)
        assert still.delete_app and still.status == {}, "its deletion under way: no second count"
        full = Queued(5, "queued at position 5 (priority 0): backfills.maxConcurrent 4 reached")
        created = decide_backfill(bf(state), JOB, None, "http://c", restart_at, admin_token="admin", turn=full)
        assert created.create_app is not None, "a restart keeps the queue's slot it was admitted to"
        assert "restarts" not in created.status, "a restart keeps its count"
        assert created.create_app["spec"] == app["spec"], "the same application, from the same checkpoint"
        assert created.status["checkpoint"] == launched.status["checkpoint"]
        state = merged_status(state, created.status)
        assert state["restarts"] == attempt
        clock = due + timedelta(minutes=1)
    now = clock.strftime("%Y-%m-%dT%H:%M:%SZ")
    failed = decide_backfill(bf(state), JOB, with_state(app, "FAILED"), "http://c", now)
    assert failed.status["phase"] == "Failed" and failed.delete_secret
    assert "not restarted again after 3 restarts" in failed.status["message"]
    assert "bump spec.restartNonce" in failed.status["message"]
    state = merged_status(state, failed.status)
    later = (clock + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert decide_backfill(bf(state), JOB, with_state(app, "FAILED"), "http://c", later).create_app is None


SUBMITTED_TWICE = "failed to submit spark application: failed to run spark-submit: driver pod already exist"
"""The Spark operator's error when a submission finds the application's driver pod there."""


def test_a_submission_that_found_its_driver_pod_is_restarted_without_counting_it() -> None:
    """The Spark operator submitted the application twice (its controller moved while the
    restart was submitted: kubeflow/spark-operator#2788), or met the last run's driver pod still
    going: the submission failed, not the job. After 3 restarts, the limit, it is restarted
    again with the same count; any other failure then fails the backfill."""
    app = decide_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    status = {"phase": "Running", "restartNonce": 0, "restarts": 3, "startedAt": "2026-11-21T09:59:00Z"}
    refused = {**app, "status": {"applicationState": {"state": "FAILED", "errorMessage": SUBMITTED_TWICE}}}
    off = decide_backfill(bf(status), JOB, refused, None, NOW)
    assert off.status["phase"] == "Running" and off.status["restarts"] == 3, off.status
    assert "driver pod already exist" in off.status["message"] and "not counted" in off.status["message"]
    assert off.status["nextRestartAt"] == "2026-11-21T10:00:40Z", "the same attempt's backoff"
    failed = decide_backfill(bf(status), JOB, with_state(app, "FAILED"), None, NOW)
    assert failed.status["phase"] == "Failed", "another failure counts"


def test_a_restart_waits_for_the_failed_runs_driver_pod_to_go() -> None:
    """Its application deleted, the old driver pod still terminating: a new application now
    would fail its submission on that pod. The timer looks again until it is gone."""
    status: dict[str, Any] = {"phase": "Running", "restartNonce": 0, "restarts": 1, "startedAt": NOW}
    status["conditions"] = [{"type": "Progressing", "status": "True", "reason": "Restarting"}]
    waiting = decide_backfill(bf(status), JOB, None, None, NOW, driver_left=True)
    assert waiting.create_app is None and waiting.status == {} and not waiting.delete_app
    assert follow_step(bf(status), job_listed=True) == "reconcile", "the timer looks again"
    created = decide_backfill(bf(status), JOB, None, None, NOW, driver_left=False)
    assert created.create_app is not None and created.status["phase"] == "Running"


def test_a_failure_after_the_application_ran_reset_after_is_a_first_failure_again() -> None:
    status = {"phase": "Running", "restartNonce": 0, "restarts": 3, "startedAt": "2026-11-21T09:00:00Z"}
    app = decide_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    off = decide_backfill(bf(status), JOB, with_state(app, "FAILED"), None, NOW)
    assert off.status["restarts"] == 1, "it ran an hour (resetAfter 30m): the failure is a first one"
    soon = {**status, "startedAt": "2026-11-21T09:50:00Z"}
    assert decide_backfill(bf(soon), JOB, with_state(app, "FAILED"), None, NOW).status["phase"] == "Failed"


def test_a_failed_drivers_last_words_follow_the_spark_operators_message() -> None:
    """The Spark operator says only the exit code; the driver's termination message (its
    error, written by spark_app) is what a person acts on."""
    app = decide_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    failed = {
        **app,
        "status": {
            "applicationState": {"state": "FAILED", "errorMessage": "driver container failed with ExitCode: 1"},
            "driverInfo": {"podName": "rmi-outage-backfill-driver"},
        },
    }
    assert driver_pod(failed) == "rmi-outage-backfill-driver"
    assert driver_pod(with_state(app, "RUNNING")) is None, "a running driver is not asked"
    words = "job rmi failed: ModuleNotFoundError: No module named 'pipelines'"
    seen = with_last_words(failed, words)
    plan = decide_backfill(bf(**NO_RESTART), JOB, seen, None, NOW)
    assert plan.status["message"].startswith(f"driver container failed with ExitCode: 1: {words}")
    assert with_last_words(failed, None) is failed


def test_a_driver_that_refused_its_configuration_fails_the_backfill_without_a_restart() -> None:
    """Exit code 2 (a warm-up shorter than the pipeline's look-back, a pipeline module missing
    from the image): a restart from the same spec would refuse it again; the Backfill is
    Failed at once, its checkpoint and branch kept for a restartNonce after the fix. A driver
    that failed (exit code 1) is restarted as before."""
    app = decide_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    said = "driver container failed with ExitCode: 2, Reason: Error: window.warmup is 0s but the pipeline looks back"
    refused = {**app, "status": {"applicationState": {"state": "FAILED", "errorMessage": said}}}
    plan = decide_backfill(bf({"phase": "Running", "restartNonce": 0}), JOB, refused, None, NOW)
    assert plan.status["phase"] == "Failed" and reason_of(plan.status) == "ConfigRefused", plan.status
    assert "restarts" not in plan.status and not plan.delete_app and [e.reason for e in plan.events] == ["Failed"]
    assert plan.status["message"].startswith(said) and "bump spec.restartNonce" in plan.status["message"]
    crashed = {**app, "status": {"applicationState": {"state": "FAILED", "errorMessage": "ExitCode: 1"}}}
    crashed["status"]["applicationState"]["errorMessage"] = said.replace("ExitCode: 2", "ExitCode: 1")
    assert decide_backfill(bf({"phase": "Running"}), JOB, crashed, None, NOW).status["restarts"] == 1


@pytest.mark.parametrize(("raised", "code"), [(ConfigError, 2), (WarmupError, 2), (IncompleteBackfillError, 1)])
def test_spark_app_exits_2_only_for_what_a_restart_would_repeat(
    raised: type[Exception], code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the operator reads to restart or not: a driver that ended early (held by its
    group while the coordinator restarted) resumes from its checkpoint; a wrong spec does not."""
    import spark_app.__main__ as entry

    def refuse(_: str) -> None:
        raise raised("as raised")

    monkeypatch.setattr(entry, "load_config", refuse)
    monkeypatch.setattr(entry, "TERMINATION_LOG", "/nonexistent/termination-log")
    assert entry.main(["run", "--config", "job.json"]) == code


def test_an_applications_message_is_one_line_of_bounded_length_keeping_what_failed_and_the_last_error() -> None:
    frames = "\tat io.netty.channel.nio.NioIoHandler.run(NioIoHandler.java:484)\n" * 50 + "\t... 12 more\n"
    output = (
        "failed to run spark-submit for SparkApplication default/x:\n"
        + "26/11/27 08:18:20 INFO Client: a log line of spark-submit\n" * 100
        + "Exception in thread main KubernetesClientException: Failure executing: POST\n"
        + frames
        + "Caused by: java.lang.IllegalArgumentException: Invalid value: 'lots'\n"
        + frames
    )
    line = one_line(output)
    assert "\n" not in line and len(line) <= MESSAGE_MAX and "NioIoHandler" not in line, "no stack frames"
    assert line.startswith("failed to run spark-submit") and line.endswith("Invalid value: 'lots'")
    assert one_line("short\n message") == "short message"


def reason_of(status: dict[str, Any]) -> str:
    return next(c["reason"] for c in status["conditions"] if c["type"] == "Ready")
