"""A blueGreen upgrade step by step, as the decision makes it from what it observed: each
step's status recorded with the objects it creates or removes, green's config, the switch and
the promotion onto green's checkpoint; and the ways it ends with blue still serving."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.blue_green_steps import GreenSeen
from kappa_operator.reconcile.job_intent import JobIntent
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, job_hash, streaming_job_config
from spark_app.contract.reports.blue_green import SeamReport, SinkSeam, StepReport, SwitchedTable
from spark_app.contract.reports.progress import ProgressReport
from spark_app.contract.reports.publish import TableReport
from tests.unit.kappa_operator.reconcile.test_upgrades import merged

ROOT = Path(__file__).resolve().parents[4]
T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
SINK = "attributed_plays"
TABLE = "marts.attributed_plays_kafka_new"
LIVE = "s3a://lake/checkpoints/rmi-kafka-new/live"
GREEN = "s3a://lake/checkpoints/rmi-kafka-new/green-g2"


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "kafka-rmi-bootstrap-streamingjob.yaml").read_text())
    data["metadata"].update(uid="u1", generation=1, annotations={})
    data["spec"]["upgrade"] = {"mode": "blueGreen", "overlap": "10m", "catchUp": "30m"}
    data["spec"].pop("bootstrap")  # blue read Kafka from the start; green bootstraps all the same
    return data


def job(data: dict[str, Any], status: dict[str, Any] | None, generation: int) -> StreamingJob:
    data = json.loads(json.dumps(data))
    data["metadata"]["generation"] = generation
    if status is not None:
        data["status"] = status
    return StreamingJob.model_validate(data)


def with_state(app: dict[str, Any], state: str, error: str | None = None) -> dict[str, Any]:
    return {**app, "status": {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}}}


def running_v1() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    data = manifest()
    created = decide_streaming_job(job(data, None, 1), None, at(0))
    assert created.create_app is not None
    app = with_state(created.create_app, "RUNNING")
    status = merged(merged(None, created), decide_streaming_job(job(data, merged(None, created), 1), app, at(0)))
    assert status["phase"] == "Running" and status["lastStableSpec"]
    return data, status, app


def v2(data: dict[str, Any]) -> dict[str, Any]:
    edited = json.loads(json.dumps(data))
    edited["spec"]["image"] = "ghcr.io/kappa-dev/kappa-spark:0.2.0"
    edited["spec"]["pipelineArgs"] = {"lateness": "2 hours", "attribution_window": "20 minutes"}
    return edited


def progress(minutes: float, lateness_s: float | None = None) -> dict[str, ProgressReport]:
    wm = T0 + timedelta(minutes=minutes)
    return {SINK: ProgressReport(sink=SINK, batch_id=3, at=wm, watermark=wm, lookahead_s=0.0, lateness_s=lateness_s)}


def report(step: str, state: str, **fields: Any) -> StepReport:
    return StepReport(step=step, state=state, started_at=T0, finished_at=T0, **fields)  # type: ignore[arg-type]


class Walk:
    """One job through its upgrade: each decision's status merged in, as the API server would."""

    def __init__(self) -> None:
        data, self.status, self.blue = running_v1()
        self.data = v2(data)
        self.blue_app: dict[str, Any] | None = self.blue
        self.generation = 2

    def decide(self, minutes: float, seen: GreenSeen | None = None, app: Any = "blue") -> JobIntent:
        current = self.blue_app if app == "blue" else app
        plan = decide_streaming_job(job(self.data, self.status, self.generation), current, at(minutes), green=seen)
        self.status = merged(self.status, plan)
        if plan.move_checkpoint:
            self.data["metadata"]["annotations"][CHECKPOINT_ANNOTATION] = plan.move_checkpoint
        return plan

    @property
    def step(self) -> str:
        return self.status["upgrade"]["step"]


def test_green_starts_beside_blue_from_the_history_into_a_branch() -> None:
    w = Walk()
    plan = w.decide(1)
    assert w.step == "GreenStarting" and not plan.delete_app, "blue keeps running"
    assert plan.green is not None
    cm, app = plan.green
    assert (cm["metadata"]["name"], app["metadata"]["name"]) == ("rmi-kafka-new-green-jobconfig", "rmi-kafka-new-green")
    assert app["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert app["spec"]["restartPolicy"]["type"] == "OnFailure", "a killed green driver runs again from its checkpoint"
    assert app["spec"]["image"] == "ghcr.io/kappa-dev/kappa-spark:0.2.0"
    cfg = json.loads(cm["data"]["job.json"])
    assert cfg["checkpoint"] == {"location": GREEN}
    assert cfg["sinks"][SINK]["branch"] == "green-rmi-kafka-new-g2"
    assert cfg["green"]["blueCheckpoint"] == LIVE and cfg["green"]["upgrade"] == "default/rmi-kafka-new g2"
    assert cfg["bootstrap"]["from"].startswith("2026-12-04T09:31:00"), "three overlaps of history before its start"
    assert set(cfg["bootstrap"]["archives"]) == {"impressions", "playbacks"}
    assert [e.reason for e in plan.events] == ["GreenStarted"]
    up = w.status["upgrade"]
    assert (up["fromHash"], up["generation"], up["greenCheckpoint"]) == (w.status["lastStableHash"], 2, GREEN)


def test_a_whole_upgrade_switches_then_runs_green_as_the_job() -> None:
    w = Walk()
    w.decide(1)
    assert w.decide(2, GreenSeen(green_app=None)).green is not None, "created again when it is not there"
    green = with_state(decide_streaming_job(job(w.data, w.status, 2), w.blue, at(2)).green[1], "SUBMITTED")  # type: ignore[index]
    assert w.decide(2, GreenSeen(green_app=green)) == JobIntent(), "waits for RUNNING"
    green = with_state(green, "RUNNING")
    w.decide(3, GreenSeen(green_app=green))
    assert w.step == "CatchingUp"

    behind = GreenSeen(green_app=green, green_reports=progress(-40), blue_reports=progress(0))
    assert w.decide(5, behind) == JobIntent(), "green's watermark far behind blue's"
    caught = GreenSeen(green_app=green, green_reports=progress(0), blue_reports=progress(0.5))
    plan = w.decide(6, caught)
    assert w.step == "Comparing"
    up = w.status["upgrade"]
    assert (up["compareStart"], up["compareEnd"]) == ("2026-12-04T09:50:00Z", "2026-12-04T10:00:00Z")
    assert plan.step_app is not None
    cm, step_app = plan.step_app
    assert step_app["metadata"]["name"] == "rmi-kafka-new-bluegreen"
    assert step_app["spec"]["arguments"][0] == "compare"
    assert step_app["metadata"]["labels"]["kappa.dev/step"] == "compare"
    assert json.loads(cm["data"]["job.json"])["green"]["compareWindow"]["start"].startswith("2026-12-04T09:50:00")

    compared = TableReport(
        table=TABLE, branch="green-rmi-kafka-new-g2", match_ratio=1.0, main_rows=10, branch_rows=10, matched=10
    )
    running_step = with_state(step_app, "RUNNING")
    assert w.decide(7, GreenSeen(green_app=green, step_app=running_step)) == JobIntent()
    done = with_state(step_app, "COMPLETED")
    plan = w.decide(
        8, GreenSeen(green_app=green, step_app=done, step_report=report("compare", "Matched", tables=[compared]))
    )
    assert w.step == "StoppingBlue" and plan.delete_app and plan.delete_step
    assert w.status["upgrade"]["tables"][0]["matchRatio"] == 1.0

    w.blue_app = None
    assert w.decide(9, GreenSeen(green_app=green, blue_driver_left=True)) == JobIntent(), "blue's driver still there"
    assert w.decide(9, GreenSeen(green_app=green)).create_app is None, "blue is not started again"
    assert w.step == "Draining"
    drained_at = T0 + timedelta(minutes=9)
    before = SeamReport(
        at=drained_at - timedelta(seconds=5), sinks={SINK: SinkSeam(blue_batch=7, green_batch=9, at_seam=True)}
    )
    assert w.decide(10, GreenSeen(green_app=green, seam=before)) == JobIntent(), "a look from before blue stopped"
    behind_seam = SeamReport(
        at=drained_at + timedelta(seconds=30), sinks={SINK: SinkSeam(blue_batch=7, green_batch=8, at_seam=False)}
    )
    assert w.decide(10, GreenSeen(green_app=green, seam=behind_seam)) == JobIntent()
    seam = SeamReport(
        at=drained_at + timedelta(seconds=60), sinks={SINK: SinkSeam(blue_batch=7, green_batch=9, at_seam=True)}
    )
    plan = w.decide(11, GreenSeen(green_app=green, seam=seam))
    assert w.step == "Switching" and plan.delete_green

    assert w.decide(11, GreenSeen(green_app=None, green_driver_left=True)) == JobIntent(), (
        "nothing writes at the switch"
    )
    plan = w.decide(12, GreenSeen())
    assert plan.step_app is not None and plan.step_app[1]["spec"]["arguments"][0] == "switch"
    switch_app = with_state(plan.step_app[1], "COMPLETED")
    boundary = T0 - timedelta(minutes=1)
    switched = report(
        "switch",
        "Switched",
        boundary=boundary,
        switched=[SwitchedTable(sink=SINK, table=TABLE, rows_removed=3, rows_added=4, snapshot_id=77)],
    )
    plan = w.decide(13, GreenSeen(step_app=switch_app, step_report=switched))
    assert w.step == "Promoting" and plan.move_checkpoint == GREEN and plan.delete_step
    up = w.status["upgrade"]
    assert up["boundary"] == "2026-12-04T09:59:00Z"
    assert up["tables"] == [
        {"table": TABLE, "matchRatio": 1.0, "mainRows": 10, "branchRows": 10, "matched": 10, "differingKeys": [],
         "newColumns": [], "rowsRemoved": 3, "rowsAdded": 4, "snapshotId": 77}
    ]  # fmt: skip
    assert [e.reason for e in plan.events] == ["Switched"]

    created = w.decide(14, None, app=None)
    assert created.create_app is not None and created.config_map is not None
    assert created.create_app["metadata"]["name"] == "rmi-kafka-new", "the job's own application, on green's state"
    promoted = json.loads(created.config_map["data"]["job.json"])
    assert promoted["checkpoint"]["location"] == GREEN and "green" not in promoted
    assert promoted["sinks"][SINK].get("branch") is None, "main"
    digest = job_hash(job(w.data, w.status, 2), streaming_job_config(job(w.data, w.status, 2)))
    assert created.create_app["metadata"]["annotations"]["kappa.dev/config-hash"] == digest
    finished = w.decide(15, None, app=with_state(created.create_app, "RUNNING"))
    assert "upgrade" not in w.status and [e.reason for e in finished.events][-1] == "Upgraded"
    assert finished.delete_maps == ("rmi-kafka-new-green-jobconfig", "rmi-kafka-new-bluegreen-jobconfig")
    assert w.status["lastStableHash"] == digest
    settled = w.decide(16, None, app=with_state(created.create_app, "RUNNING"))
    assert settled.green is None and "upgrade" not in w.status, "green's recorded spec is the job's: no new upgrade"


def test_output_beyond_the_ratio_removes_green_and_blue_goes_on() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"].update(step="Comparing", compareStart=at(-10), compareEnd=at(0))
    step_app = w.decide(2, GreenSeen(green_app={"metadata": {}})).step_app
    assert step_app is not None
    refused = report("compare", "Refused", error=f"green's output differs: {TABLE}: 0.4000 (keys [1])")
    done = with_state(step_app[1], "COMPLETED")
    plan = w.decide(3, GreenSeen(green_app={"metadata": {}}, step_app=done, step_report=refused))
    assert w.step == "Discarding" and plan.delete_green and plan.delete_step and not plan.delete_app
    assert TABLE in w.status["upgrade"]["reason"] and w.status["rolledBackGeneration"] == 2
    assert [e.reason for e in plan.events] == ["GreenRemoved"]
    plan = w.decide(4, GreenSeen())
    assert plan.step_app is not None and plan.step_app[1]["spec"]["arguments"][0] == "discard"
    discarded = report("discard", "Discarded", removed=[f"{TABLE}@green-rmi-kafka-new-g2"])
    plan = w.decide(5, GreenSeen(step_app=with_state(plan.step_app[1], "COMPLETED"), step_report=discarded))
    assert w.step == "GreenRemoved" and plan.delete_step
    assert w.status["phase"] == "Running", "the upgrade's end and blue's phase in one write"
    after = w.decide(6)
    assert not after.delete_app and after.create_app is None and after.green is None, "blue runs on, untouched"
    assert w.status["phase"] == "Running"


def test_a_green_that_fails_to_start_is_removed_with_the_drivers_words() -> None:
    w = Walk()
    plan = w.decide(1)
    assert plan.green is not None
    failed = with_state(plan.green[1], "SUBMISSION_FAILED", "no module named spark_app.examples.rmi_v3")
    w.decide(2, GreenSeen(green_app=failed))
    assert w.step == "Discarding" and "rmi_v3" in w.status["upgrade"]["reason"]


def test_a_green_that_does_not_catch_up_in_time_is_removed() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "CatchingUp"
    green = {"metadata": {}, "status": {"applicationState": {"state": "RUNNING"}}}
    slow = GreenSeen(green_app=green, green_reports=progress(-50), blue_reports=progress(0))
    assert w.decide(20, slow) == JobIntent()
    w.decide(32, slow)
    assert w.step == "Discarding" and "catchUp 30m" in w.status["upgrade"]["reason"]


def test_a_caught_up_green_without_a_window_to_compare_says_so_then_is_removed_naming_the_overlap() -> None:
    """A v2 that waits an hour longer for late rows: its watermark is within that of blue's
    (caught up), but its complete output (from historyFrom + overlap) is not final in both yet."""
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "CatchingUp"
    green = {"metadata": {}, "status": {"applicationState": {"state": "RUNNING"}}}
    late = GreenSeen(green_app=green, green_reports=progress(-25, lateness_s=3600), blue_reports=progress(0, 0))
    w.decide(5, late)
    assert w.step == "CatchingUp" and "waiting for both versions' output to be final" in w.status["message"]
    assert w.decide(6, late) == JobIntent(), "said once"
    later = GreenSeen(green_app=green, green_reports=progress(-24, lateness_s=3600), blue_reports=progress(1, 0))
    assert w.decide(7, later) == JobIntent(), "said once, though the watermarks moved"
    w.decide(32, late)
    assert w.step == "Discarding", w.status["upgrade"]
    assert "give upgrade.overlap at least half of the added lateness" in w.status["upgrade"]["reason"]


def test_an_edit_during_the_catch_up_abandons_green_for_the_new_edit() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "CatchingUp"
    w.data["spec"]["pipelineArgs"] = {"lateness": "2 hours", "attribution_window": "25 minutes"}
    w.decide(2, GreenSeen(green_app={"metadata": {}}))
    assert w.step == "Discarding" and "edited again" in w.status["upgrade"]["reason"]


def test_an_edit_that_changes_what_green_would_read_or_write_is_refused_and_blue_runs() -> None:
    w = Walk()
    w.data["spec"]["sinks"][SINK]["table"] = "marts.elsewhere"
    plan = w.decide(1)
    assert w.step == "Refused" and plan.green is None and not plan.delete_app
    assert "sinks.attributed_plays.table differs" in w.status["upgrade"]["reason"]
    assert [e.reason for e in plan.events] == ["UpgradeRefused"]
    again = w.decide(2)
    assert again.green is None and not again.delete_app and w.step == "Refused", "said once; blue runs"


def test_the_model_refuses_sinks_and_sources_that_cannot_switch_by_name() -> None:
    data = manifest()
    data["spec"]["sinks"][SINK] = {"kind": "parquet", "path": "s3a://lake/out"}
    with pytest.raises(ValidationError, match=r"sinks\.attributed_plays is a parquet sink"):
        job(data, None, 1)
    data = manifest()
    data["spec"]["sources"]["impressions"]["live"] = {"kind": "icebergLive", "table": "ingest.impressions"}
    with pytest.raises(ValidationError, match=r"sources\.impressions is icebergLive with history default/"):
        job(data, None, 1)
    data["spec"]["sources"]["impressions"]["history"]["table"] = "ingest.impressions"
    assert job(data, None, 1).spec.upgrade.mode == "blueGreen", "its own history: green reads it up to blue's place"


def test_green_counts_its_history_back_from_blues_watermark_not_the_clock() -> None:
    w = Walk()
    w.status["progress"] = [{"sink": SINK, "at": at(0), "watermark": "2026-11-01T14:07:30Z"}]
    plan = w.decide(1)
    assert plan.green is not None
    assert w.status["upgrade"]["historyFrom"] == "2026-11-01T13:37:00Z", "a job replaying November"


def test_a_suspend_before_the_switch_gives_the_upgrade_up_and_resumes_on_blue() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "CatchingUp"
    w.data["spec"]["suspend"], w.generation = True, 3
    plan = w.decide(2, GreenSeen(green_app={"metadata": {}}))
    assert w.step == "Discarding" and plan.delete_green and not plan.delete_app, "blue stops after green is gone"
    assert "spec.suspend asks the job to stop" in w.status["upgrade"]["reason"]
    plan = w.decide(3, GreenSeen())
    assert plan.step_app is not None
    discarded = report("discard", "Discarded", removed=[f"{TABLE}@green-rmi-kafka-new-g2"])
    w.decide(4, GreenSeen(step_app=with_state(plan.step_app[1], "COMPLETED"), step_report=discarded))
    assert w.step == "GreenRemoved"
    stopped = w.decide(5)
    assert stopped.delete_app and w.status["phase"] == "Suspended"

    w.data["spec"]["suspend"], w.generation = False, 4
    resumed = w.decide(6, app=None)
    assert resumed.create_app is not None, "blue's checkpoint holds v1's state: v1 resumes on it, not v2"
    assert resumed.create_app["spec"]["image"] != w.data["spec"]["image"]
    assert [e.reason for e in resumed.events] == ["Submitted", "ResumedOnBlue"]
    assert w.status["configHash"] == w.status["lastStableHash"]
    starting = w.decide(6.5, app=with_state(resumed.create_app, "SUBMITTED"))
    assert starting.green is None and w.step == "GreenRemoved", "green starts beside a running blue only"
    assert w.status["configHash"] == w.status["lastStableHash"] and w.status["phase"] != "Failed"
    w.decide(7, app=with_state(resumed.create_app, "RUNNING"))
    assert w.step == "GreenStarting", "the edit upgrades blue/green once blue runs"


def test_a_rewind_during_the_switch_waits_for_it_and_says_so_once() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "Draining"
    w.status["upgrade"]["steps"].append({"step": "Draining", "at": at(9)})
    w.blue_app = None
    w.data["metadata"]["annotations"]["kappa.dev/paused-by"] = "Rewind/before-outage"
    green = {"metadata": {}, "status": {"applicationState": {"state": "RUNNING"}}}
    waiting = w.decide(9.5, GreenSeen(green_app=green))
    assert w.step == "Draining" and [e.reason for e in waiting.events] == ["StopWaits"]
    assert w.status["upgrade"]["held"].startswith("Rewind/before-outage")
    assert "waits for the switch" in w.status["message"]
    seam = SeamReport(at=T0 + timedelta(minutes=10), sinks={SINK: SinkSeam(blue_batch=7, green_batch=9, at_seam=True)})
    plan = w.decide(11, GreenSeen(green_app=green, seam=seam))
    assert w.step == "Switching" and plan.delete_green, "the switch goes forward"
    assert "StopWaits" not in [e.reason for e in plan.events], "said once"
    w.status["upgrade"]["step"] = "Promoting"  # recorded; the checkpoint's annotation not yet moved
    repaired = w.decide(12, None, app=None)
    assert repaired.move_checkpoint == GREEN and repaired.create_app is None, "the annotation first"
    ended = w.decide(12, None, app=None)
    assert ended.create_app is None, "the Rewind's pause holds the promoted job"
    assert "upgrade" not in w.status and w.status["lastStableHash"] == w.status["configHash"], "green's spec ran last"
    assert [e.reason for e in ended.events] == ["Upgraded"]
    assert w.decide(12.1, None, app=None).create_app is None
    assert w.status["phase"] == "Rewinding"


def draining(w: Walk) -> dict[str, Any]:
    """``w`` recorded at Draining (blue stopped); green's application, running."""
    w.status["upgrade"]["step"] = "Draining"
    w.status["upgrade"]["steps"].append({"step": "Draining", "at": at(9)})
    w.blue_app = None
    return {"metadata": {}, "status": {"applicationState": {"state": "RUNNING"}}}


def test_an_edit_during_the_switch_waits_and_upgrades_from_greens_spec_once_green_runs() -> None:
    """Blue is stopped: only forward is safe. The promoted application runs green's spec (v3's
    code never starts on v2's checkpoint), then v3 upgrades blue/green from it."""
    w = Walk()
    w.decide(1)
    green_spec = w.status["upgrade"]["greenSpec"]
    green = draining(w)
    w.data["spec"]["pipelineArgs"] = {"lateness": "2 hours", "attribution_window": "25 minutes"}
    w.generation = 3
    said = w.decide(9.5, GreenSeen(green_app=green))
    assert w.step == "Draining", "not abandoned"
    assert "the edit of generation 3 waits for the switch under way (step Draining)" in w.status["message"]
    assert [e.reason for e in said.events] == ["EditWaits"]
    assert w.decide(9.6, GreenSeen(green_app=green)) == JobIntent(), "said once"
    w.status["upgrade"]["step"] = "Promoting"
    w.data["metadata"]["annotations"][CHECKPOINT_ANNOTATION] = GREEN
    created = w.decide(12, None, app=None)
    assert created.create_app is not None and created.config_map is not None
    promoted = json.loads(created.config_map["data"]["job.json"])
    assert promoted["checkpoint"]["location"] == GREEN
    assert promoted["pipelineArgs"]["attribution_window"] == "20 minutes", "green's spec, not the edit"
    w.decide(13, None, app=with_state(created.create_app, "RUNNING"))
    assert "upgrade" not in w.status and json.loads(w.status["lastStableSpec"]) == json.loads(green_spec)
    w.decide(14, None, app=with_state(created.create_app, "RUNNING"))
    assert w.step == "GreenStarting" and w.status["upgrade"]["generation"] == 3, "the edit upgrades from green's"
    assert "25 minutes" in w.status["upgrade"]["greenSpec"]


def test_the_promotion_moves_the_checkpoint_again_when_the_leader_died_before_it() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "Promoting"  # recorded; the annotation never written
    w.blue_app = None
    repaired = w.decide(12, None, app=None)
    assert repaired.move_checkpoint == GREEN and repaired.create_app is None and repaired.delete_step
    created = w.decide(12.1, None, app=None)
    assert created.config_map is not None
    assert json.loads(created.config_map["data"]["job.json"])["checkpoint"]["location"] == GREEN


def test_a_blue_that_fails_before_the_switch_gives_the_upgrade_up() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "CatchingUp"
    w.blue_app = with_state(w.blue, "FAILED", "executor lost")
    plan = w.decide(3, GreenSeen(green_app={"metadata": {}}))
    assert w.step == "Discarding" and plan.delete_green and not plan.delete_app
    assert "ended FAILED (executor lost)" in w.status["upgrade"]["reason"]


def test_a_failed_step_runs_again_after_a_backoff_and_a_discard_gives_up_naming_the_branch() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"].update(step="Discarding", reason="green's output differs")
    plan = w.decide(2, GreenSeen())
    assert plan.step_app is not None
    failed = with_state(plan.step_app[1], "FAILED", "catalog unreachable")
    w.decide(3, GreenSeen(step_app=failed))
    assert w.status["upgrade"]["stepAttempts"] == 1 and w.status["upgrade"]["retryAt"] == at(3.5)
    assert w.decide(3.2, GreenSeen()) == JobIntent(), "the backoff"
    assert w.decide(3.5, GreenSeen()).step_app is not None
    w.decide(4, GreenSeen(step_app=failed))
    assert w.status["upgrade"]["retryAt"] == at(5), "doubled"
    w.decide(6, GreenSeen(step_app=failed))
    plan = w.decide(20, GreenSeen())
    assert w.step == "GreenRemoved" and plan.step_app is None
    assert "green-rmi-kafka-new-g2 could not be removed from marts.attributed_plays_kafka_new" in w.status["message"]
    assert [e.reason for e in plan.events] == ["UpgradeAbandoned"]


def test_a_new_upgrade_keeps_nothing_of_the_last_ones_record() -> None:
    w = Walk()
    w.decide(1)
    w.status["upgrade"].update(step="GreenRemoved", reason="differs", held="spec.suspend", boundary=at(0))
    w.data["spec"]["pipelineArgs"] = {"lateness": "2 hours", "attribution_window": "25 minutes"}
    w.generation = 3
    w.decide(2)
    up = w.status["upgrade"]
    assert up["step"] == "GreenStarting" and up["generation"] == 3
    assert not {"reason", "held", "boundary"} & set(up), up


def test_a_green_that_waits_longer_for_late_rows_is_caught_up_by_the_lateness_it_adds() -> None:
    """v2 waits 2 hours for late rows, v1 30 minutes: green's watermark trails its input 90
    minutes more than blue's, and is caught up there (else it never would be)."""
    w = Walk()
    w.decide(1)
    w.status["upgrade"]["step"] = "CatchingUp"
    green = {"metadata": {}, "status": {"applicationState": {"state": "RUNNING"}}}
    behind = GreenSeen(green_app=green, green_reports=progress(25, 7200.0), blue_reports=progress(120, 1800.0))
    assert w.decide(5, behind) == JobIntent(), "more behind than the lateness added"
    level = GreenSeen(green_app=green, green_reports=progress(31, 7200.0), blue_reports=progress(120, 1800.0))
    w.decide(6, level)
    assert w.step == "Comparing"
