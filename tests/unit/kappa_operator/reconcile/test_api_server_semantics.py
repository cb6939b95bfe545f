"""Issue 14, the decisions behind "behave as a real API server makes you" (pure): children named
per owner kind and owned by uid, conditions by the Kubernetes conventions, failures shown on the
object, a Backfill that outlives its StreamingJob, a spec the pipeline refuses said on the job."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.kube.events import KopfLogEvents
from kappa_operator.models.backfill import Backfill, BackfillRestart
from kappa_operator.models.common import Condition
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill
from kappa_operator.reconcile.backfill.intent import SAVED_JOB
from kappa_operator.reconcile.backfill.progress import progress_update
from kappa_operator.reconcile.conditions import Verdict, run_once, set_conditions
from kappa_operator.reconcile.failures import Failure, failure_status, with_recovery
from kappa_operator.reconcile.rewind import Observed, decide_rewind
from kappa_operator.reconcile.streaming_job import decide_streaming_job, owner_of
from kappa_operator.render.spark_application import DNS_LABEL_MAX, Owner, child_name
from kappa_operator.service.runner import RoutineSuccess, settings

ROOT = Path(__file__).resolve().parents[4]
NOW, LATER = "2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"


def load(example: str, **meta: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    data["metadata"].update(meta)
    return data


JOB = StreamingJob.model_validate(load("rmi-streamingjob.yaml", uid="job-uid", generation=1))


def backfill(status: dict[str, Any] | None = None, **meta: Any) -> Backfill:
    data = load("rmi-backfill.yaml", uid="bf-uid", generation=1, **meta)
    if status is not None:
        data["status"] = status
    return Backfill.model_validate(data)


def conds(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def app_in(plan_app: dict[str, Any], state: str) -> dict[str, Any]:
    return {**plan_app, "status": {"applicationState": {"state": state}}}


# --- defect 1: a Backfill named like its StreamingJob -------------------------------------------


def test_a_backfill_named_like_its_job_renders_other_child_names() -> None:
    same = backfill(name=JOB.metadata.name)
    bf_plan = decide_backfill(same, JOB, None, "http://c", NOW, admin_token="a")
    job_plan = decide_streaming_job(JOB, None, NOW)
    assert bf_plan.create_app is not None and job_plan.create_app is not None
    assert bf_plan.create_app["metadata"]["name"] != job_plan.create_app["metadata"]["name"]
    assert bf_plan.config_map["metadata"]["name"] != job_plan.config_map["metadata"]["name"]  # type: ignore[index]


def test_child_names_stay_dns_labels_and_distinct_when_shortened() -> None:
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    names = {child_name("Backfill", long_a), child_name("Backfill", long_b)}
    assert len(names) == 2
    for n in names:
        assert len(n + "-jobconfig") <= DNS_LABEL_MAX and len(n + "-coordinator") <= DNS_LABEL_MAX
    assert child_name("StreamingJob", "rmi") == "rmi", "a live job's application keeps its name across upgrades"


def test_ownership_is_by_kind_name_and_uid() -> None:
    job_app = decide_streaming_job(JOB, None, NOW).create_app
    assert job_app is not None
    assert owner_of(JOB).owns(job_app)
    assert not Owner("Backfill", JOB.metadata.name, "default", "bf-uid").owns(job_app), "another kind's child"
    assert not Owner("StreamingJob", JOB.metadata.name, "default", "other-uid").owns(job_app), "a namesake's"
    assert not owner_of(JOB).owns({"metadata": {"name": "rmi"}}), "an object nobody owns is not ours either"


# --- defect 2: conditions ----------------------------------------------------------------------


def test_a_submitted_backfill_is_not_ready_and_a_failed_one_never_is() -> None:
    submitted = decide_backfill(backfill(), JOB, None, "http://c", NOW)
    assert conds(submitted.status) == {"Ready": "False", "Progressing": "True", "Succeeded": "False", "Failed": "False"}
    app = submitted.create_app
    assert app is not None
    running = decide_backfill(backfill(submitted.status), JOB, app_in(app, "RUNNING"), "http://c", NOW)
    assert conds(running.status)["Ready"] == "False", "Ready means the result is ready"
    seen = backfill(running.status)
    never = seen.spec.model_copy(update={"restart": BackfillRestart(max_attempts=0)})
    no_restart = seen.model_copy(update={"spec": never})
    failed = decide_backfill(no_restart, JOB, app_in(app, "FAILED"), "http://c", LATER)
    assert conds(failed.status) == {"Ready": "False", "Progressing": "False", "Succeeded": "False", "Failed": "True"}
    for c in failed.status["conditions"]:
        assert c["reason"] and c["observedGeneration"] == 1


def test_condition_transition_times_move_only_on_a_status_change() -> None:
    first = set_conditions([], run_once("Running"), Verdict("Running", "Running", "m"), NOW, 1)
    second = set_conditions(first, run_once("Running"), Verdict("Running", "Running", "m2"), LATER, 2)
    by_type = {c.type: c for c in second}
    assert by_type["Progressing"].last_transition_time == NOW and by_type["Progressing"].message == "m2"
    assert by_type["Progressing"].observed_generation == 2
    done = {c.type: c for c in set_conditions(second, run_once("Succeeded"), Verdict("Succeeded", "R", "m"), LATER, 2)}
    assert done["Ready"].last_transition_time == LATER and done["Ready"].status == "True"


def test_a_rewind_reports_the_same_four_conditions() -> None:
    rw = Rewind.model_validate(load("rmi-rewind.yaml", uid="rw", generation=3))
    pending = decide_rewind(rw, Observed(job=None, app=None, chosen=(), downstream=()), NOW)
    assert conds(pending.status) == {"Ready": "False", "Progressing": "False", "Succeeded": "False", "Failed": "False"}
    assert {c["observedGeneration"] for c in pending.status["conditions"]} == {3}


# --- defect 3: errors reach the object -----------------------------------------------------------


def test_a_job_whose_config_the_pipeline_refuses_says_so_once_and_runs_nothing() -> None:
    data = load("rmi-streamingjob.yaml", uid="u", generation=2)
    source = next(iter(data["spec"]["sources"].values()))
    source["live"]["catalog"] = "nowhere"
    job = StreamingJob.model_validate(data)
    plan = decide_streaming_job(job, None, NOW)
    assert plan.create_app is None and plan.status["phase"] == "Failed"
    assert "nowhere" in plan.status["message"] and [e.reason for e in plan.events] == ["InvalidSpec"]
    again = decide_streaming_job(StreamingJob.model_validate({**data, "status": plan.status}), None, LATER)
    assert again.events == (), "one Event per distinct problem, not one per look"


def test_a_bad_edit_does_not_stop_a_running_job() -> None:
    app = decide_streaming_job(JOB, None, NOW).create_app
    assert app is not None
    data = load("rmi-streamingjob.yaml", uid="job-uid", generation=2)
    next(iter(data["spec"]["sources"].values()))["live"]["catalog"] = "nowhere"
    plan = decide_streaming_job(StreamingJob.model_validate(data), app_in(app, "RUNNING"), NOW)
    assert not plan.delete_app and "keeps running with the previous spec" in plan.status["message"]


def test_transient_failures_show_the_attempt_and_clear_on_success() -> None:
    running = {"phase": "Publishing", "conditions": []}
    failure = Failure("RetryingAfterError", "OSError: catalog unreachable", attempt=3)
    shown = failure_status("Backfill", running, failure, NOW, 4)
    assert "phase" not in shown and shown["retries"] == 3, "a transient failure moves no phase"
    assert "attempt 3" in shown["message"] and "catalog unreachable" in shown["lastError"]
    assert conds(shown)["Reconciling"] == "True"
    cleared = with_recovery(shown, {"phase": "Succeeded", "conditions": shown["conditions"]}, LATER, 4)
    assert cleared["retries"] is None and cleared["lastError"] is None
    assert conds(cleared)["Reconciling"] == "False"
    untouched = {"phase": "Running"}
    assert with_recovery({"phase": "Running"}, untouched, LATER, 4) is untouched


def test_permanent_failures_fail_the_object_and_stall_it() -> None:
    shown = failure_status("StreamingJob", None, Failure("InvalidSpec", "invalid StreamingJob: x", 1), NOW, 1)
    assert shown["phase"] == "Failed" and conds(shown) == {"Ready": "False", "Stalled": "True", "Reconciling": "False"}
    assert "attempt" not in shown["message"]
    long = failure_status("Rewind", {}, Failure("RetryingAfterError", "x" * 5000, 1), NOW, 1)
    assert len(long["lastError"]) <= 1024 and len(long["message"]) < 1100
    Condition.model_validate(long["conditions"][0])


# --- defect 7: the StreamingJob deleted while its Backfill runs --------------------------------


def test_a_backfill_keeps_its_job_and_finishes_without_it() -> None:
    launched = decide_backfill(backfill(), JOB, None, "http://c", NOW)
    assert launched.config_map is not None and launched.create_app is not None
    saved = StreamingJob.model_validate(json.loads(launched.config_map["data"][SAVED_JOB]))
    assert saved.spec == JOB.spec and saved.metadata.uid == JOB.metadata.uid
    running = backfill(launched.status)
    done = decide_backfill(running, saved, app_in(launched.create_app, "COMPLETED"), "http://c", LATER, job_saved=True)
    assert done.create_publish_app is not None or done.status["phase"] == "Succeeded", "it finishes with the kept copy"


def test_a_backfill_whose_job_is_gone_is_never_resubmitted_from_the_copy() -> None:
    launched = decide_backfill(backfill(), JOB, None, "http://c", NOW)
    plan = decide_backfill(backfill(launched.status), JOB, None, "http://c", LATER, job_saved=True)
    assert plan.create_app is None and plan.status["phase"] == "Failed"
    assert plan.leave_group is not None, "the alignment group is released"
    assert conds(plan.status)["Failed"] == "True" and [e.reason for e in plan.events] == ["JobDeleted"]


# --- defect 10: progress survives an operator restart, and says done when done --------------


def test_progress_keeps_its_last_values_until_drivers_report_again() -> None:
    now = datetime(2026, 11, 23, 10, tzinfo=UTC)
    start = datetime(2026, 11, 1, 14, tzinfo=UTC)
    half = int((start + timedelta(hours=2)).timestamp() * 1e6)
    running = backfill({"phase": "Running"})
    fields = progress_update(running, half, 0, now)
    assert fields is not None and fields["progress"] == "50%"
    seen = backfill({"phase": "Running", **fields})
    assert progress_update(seen, None, None, now) is None, "a restarted coordinator knows nothing: keep 50%"
    assert progress_update(seen, half, 0, now + timedelta(seconds=5)) is None, "unchanged: no write"


def test_routine_timer_successes_stay_out_of_the_log() -> None:
    keep = RoutineSuccess()

    def record(msg: str, level: int = logging.INFO) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", level, __file__, 1, msg, None, None)

    assert not keep.filter(record("Timer 'follow' succeeded."))
    assert keep.filter(record("Timer 'follow' failed temporarily: boom", logging.ERROR))
    assert keep.filter(record("Handler 'reconcile_backfill' succeeded."))
    assert not settings().posting.enabled, "kopf posts no Event itself (kappa_operator.kube.events does)"
    routed = [h for h in logging.getLogger("kopf.objects").handlers if isinstance(h, KopfLogEvents)]
    assert len(routed) == 1 and routed[0].level == logging.WARNING, "kopf's failures still become Events"


def test_status_has_one_writer_path() -> None:
    """Defect 10: no handler writes status through kopf's patch (a second writer beside
    ``record``); the only status call is ``Cluster.patch_status`` (the status subresource)."""
    handlers = ROOT / "operator" / "handlers"
    offenders = [
        f"{path.name}:{n}"
        for path in sorted(handlers.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "patch.status" in line or "patch_namespaced_custom_object_status" in line
    ]
    assert offenders == []
    writers = {ROOT / "operator" / "kube" / "api.py", handlers / "context.py"}
    assert all(w.is_file() and "patch_status(" in w.read_text() for w in writers)
    callers = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "operator").rglob("*.py"))
        if "patch_status(" in path.read_text()
        and path not in writers
        and path.relative_to(ROOT / "operator").parts[0] not in ("local", "demo", "local_cluster")
    ]
    assert callers == [], "status is written through handlers.context.record (or its failure path) only"
