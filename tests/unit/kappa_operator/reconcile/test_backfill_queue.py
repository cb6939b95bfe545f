"""Admission of Backfills (pure): limits across the cluster and per namespace, the queue's
order (priority, then age), no preemption, and the queue read from the objects alone; and
what a Backfill's reconcile does with the verdict (Queued with position and reason, then
Running once admitted), and with spec.dryRun (Planning -> Planned -> run)."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kappa_operator.handlers.backfill import candidate
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill
from kappa_operator.reconcile.backfill.dry_run import Planning
from kappa_operator.reconcile.backfill_queue import ACTIVE, Admitted, Candidate, Queued, QueueLimits, decide
from kappa_operator.reconcile.estimates import Run, eta, recorded, runs_from
from spark_app.contract.reports.run import RunReport, batch_costs

ROOT = Path(__file__).resolve().parents[4]
NOW = "2026-11-24T10:00:00Z"


def c(
    name: str, phase: str = "Pending", priority: int = 0, created: str = "2026-11-24T09:00:00Z", ns: str = "a"
) -> Candidate:
    return Candidate(ns, name, phase, priority, created)


def test_no_limits_admits_everything() -> None:
    running = [c(f"r{i}", "Running") for i in range(50)]
    assert decide(c("me"), running, QueueLimits()) == Admitted()


def test_the_cluster_limit_queues_with_position_and_reason() -> None:
    others = [c("r1", "Running"), c("r2", "Publishing"), c("done", "Succeeded"), c("failed", "Failed")]
    verdict = decide(c("me"), others, QueueLimits(max_concurrent=2))
    assert isinstance(verdict, Queued) and verdict.position == 1
    assert "backfills.maxConcurrent 2 reached" in verdict.reason and "position 1" in verdict.reason
    assert decide(c("me"), others[1:], QueueLimits(max_concurrent=2)) == Admitted(), "finished ones hold no slot"


def test_the_queue_is_priority_then_age_and_ahead_ones_take_the_slots_first() -> None:
    waiting = [
        c("old-low", "Queued", 0, "2026-11-24T08:00:00Z"),
        c("new-high", "Queued", 5, "2026-11-24T09:30:00Z"),
        c("old-high", "Queued", 5, "2026-11-24T09:00:00Z"),
    ]
    everyone = [c("r1", "Running"), *waiting]
    limits = QueueLimits(max_concurrent=2)
    verdicts = {w.name: decide(w, everyone, limits) for w in waiting}
    assert verdicts["old-high"] == Admitted(), "highest priority, oldest: the free slot is its"
    assert verdicts["new-high"] == Queued(2, verdicts["new-high"].reason)  # type: ignore[union-attr]
    assert verdicts["old-low"] == Queued(3, verdicts["old-low"].reason)  # type: ignore[union-attr]


def test_a_full_namespace_does_not_hold_back_another_namespace() -> None:
    everyone = [c("r1", "Running", ns="a"), c("ahead", "Queued", 9, ns="a"), c("me", "Queued", 0, ns="b")]
    limits = QueueLimits(max_concurrent=3, max_per_namespace=1)
    held = decide(everyone[1], everyone, limits)
    assert isinstance(held, Queued) and "maxConcurrentPerNamespace 1 reached in a" in held.reason
    assert decide(everyone[2], everyone, limits) == Admitted()


def test_not_ready_backfills_take_no_place_and_running_ones_are_never_preempted() -> None:
    everyone = [
        c("r1", "Running", priority=-100),
        Candidate("a", "dry", "Planned", 100, "", ready=False),
        Candidate("a", "no-job", "Pending", 100, "", ready=False),
    ]
    assert decide(c("me"), everyone, QueueLimits(max_concurrent=2)) == Admitted()
    assert isinstance(decide(c("vip", priority=1000), everyone, QueueLimits(max_concurrent=1)), Queued)


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 4),
    per_ns=st.one_of(st.none(), st.integers(1, 3)),
    backfills=st.lists(st.tuples(st.integers(-2, 2), st.sampled_from("ab"), st.booleans()), min_size=1, max_size=9),
)
def test_admitting_one_at_a_time_never_exceeds_the_limits_and_follows_the_queue(
    limit: int, per_ns: int | None, backfills: list[tuple[int, str, bool]]
) -> None:
    """Any interleaving of decisions, as concurrent reconciles would make them one at a time
    (the handler's lock): the limits hold, and whoever starts was first in the queue among
    those that fit."""
    objs = {
        f"b{i}": Candidate(ns, f"b{i}", "Running" if running else "Queued", prio, f"2026-11-24T09:{i:02d}:00Z")
        for i, (prio, ns, running) in enumerate(backfills)
    }
    limits = QueueLimits(max_concurrent=limit, max_per_namespace=per_ns)
    for _ in range(len(objs)):
        for name in sorted(objs):
            me = objs[name]
            if me.phase in ACTIVE:
                continue
            if decide(me, list(objs.values()), limits) == Admitted():
                objs[name] = Candidate(me.namespace, me.name, "Running", me.priority, me.created)
        running_new = [o for o in objs.values() if o.phase == "Running"]
        initially = sum(1 for b in backfills if b[2])
        assert len(running_new) <= max(limit, initially)
        if per_ns is not None:
            for ns in "ab":
                initially_ns = sum(1 for b in backfills if b[2] and b[1] == ns)
                assert sum(1 for o in running_new if o.namespace == ns) <= max(per_ns, initially_ns)


# --- the reconcile's side ------------------------------------------------------------------


def manifests(**spec: Any) -> tuple[Backfill, StreamingJob]:
    bf = yaml.safe_load((ROOT / "examples" / "rmi-backfill.yaml").read_text())
    bf["metadata"].update(uid="uid-bf-1234", generation=1, creationTimestamp="2026-11-24T09:00:00Z")
    bf["spec"].update(spec)
    job = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    job["metadata"]["uid"] = "uid-job"
    return Backfill.model_validate(bf), StreamingJob.model_validate(job)


def with_status(bf: Backfill, status: dict[str, Any]) -> Backfill:
    return Backfill.model_validate({**bf.model_dump(by_alias=True, exclude_none=True), "status": status})


def test_a_queued_backfill_waits_with_its_position_then_runs_once_admitted() -> None:
    bf, job = manifests(priority=3)
    q = Queued(2, "queued at position 2 (priority 3): backfills.maxConcurrent 2 reached (2 running or ahead)")
    plan = decide_backfill(bf, job, None, None, NOW, turn=q)
    assert plan.create_app is None and plan.config_map is None
    assert plan.status["phase"] == "Queued" and plan.status["queuePosition"] == 2
    assert plan.status["queuedSince"] == NOW and plan.status["message"] == q.reason
    assert [e.reason for e in plan.events] == ["Queued"]
    queued = with_status(bf, plan.status)
    again = decide_backfill(queued, job, None, None, "2026-11-24T10:05:00Z", turn=Queued(1, "position 1"))
    assert again.status["queuedSince"] == NOW and again.status["queuePosition"] == 1 and not again.events
    started = decide_backfill(queued, job, None, None, "2026-11-24T10:09:00Z", turn=Admitted())
    assert started.create_app is not None and started.status["phase"] == "Running"
    assert started.status["startedAt"] == "2026-11-24T10:09:00Z" and started.status["queuePosition"] is None


def test_candidates_are_read_from_the_objects_alone() -> None:
    body = {
        "metadata": {"namespace": "a", "name": "x", "creationTimestamp": "2026-11-24T09:00:00Z"},
        "spec": {"priority": 7, "dryRun": False},
        "status": {"phase": "Queued"},
    }
    assert candidate(body) == Candidate("a", "x", "Queued", 7, "2026-11-24T09:00:00Z", True)
    assert not candidate({**body, "spec": {"dryRun": True}}).ready
    assert candidate({"metadata": {"namespace": "a", "name": "new"}, "spec": {}}).phase == "Pending"
    missing = {**body, "status": {"phase": "Pending", "message": "StreamingJob rmi not found in a; waiting"}}
    assert not candidate(missing).ready


def report(**changes: Any) -> Any:
    from spark_app.contract.reports.plan import PlanReport, SourcePlan

    src = SourcePlan(
        source="playbacks",
        table="ingest.playbacks",
        snapshot_id=1,
        files=40,
        bytes=4_000_000,
        rows=1_200_000,
        rows_in_window=1_000_000,
        splits=30,
        max_split_span_s=300.0,
        out_of_order_s=120.0,
        has_statistics=True,
    )
    fields: dict[str, Any] = {
        "backfill": "default/rmi-outage",
        "state": "Planned",
        "sources": [src],
        "mode": "aligned",
        "max_drift_s": 300.0,
        "lateness_required_s": 600.0,
        "pipeline_lateness_s": 1800.0,
        "lateness_ok": True,
        "lateness_message": "watermark delay 30m >= maxDrift 5m + largest split span 5m",
        "max_drift_fitting_s": 1500.0,
        "expected_batches": 48,
        "peak_state_rows": 90_000,
        "state_horizon_s": 2400.0,
        "recommended_warmup_s": 2400.0,
        "rows_total": 1_200_000,
        "bytes_total": 4_000_000,
        "warnings": [],
        "planned_at": "2026-11-24T10:00:00Z",
    }
    return PlanReport.model_validate({**fields, **changes})


def app(state: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {}}, "status": {"applicationState": {"state": state}}}


def test_dry_run_plans_then_stays_planned_until_dry_run_is_false() -> None:
    bf, job = manifests(dryRun=True)
    first = decide_backfill(bf, job, None, None, NOW, planning=Planning())
    assert first.create_app is None and first.create_plan_app is not None and first.config_map is not None
    assert first.create_plan_app["metadata"]["name"] == "rmi-outage-backfill-plan"
    assert first.create_plan_app["spec"]["arguments"][0] == "plan" and first.status["phase"] == "Planning"
    bf = with_status(bf, first.status)
    running = decide_backfill(bf, job, None, None, NOW, planning=Planning(app("RUNNING")))
    assert running.status["phase"] == "Planning" and running.create_plan_app is None

    runs = (Run("default/earlier", 2_000_000, 100.0, 4, "2026-11-23T10:00:00Z"),)  # 5,000 rows/s per core
    done = decide_backfill(bf, job, None, None, NOW, planning=Planning(app("COMPLETED"), report(), runs))
    plan = done.status["plan"]
    assert done.status["phase"] == "Planned" and plan["expectedBatches"] == 48 and plan["rows"] == 1_200_000
    assert plan["latenessRequired"] == "10m" and plan["maxDriftFitting"] == "25m" and plan["latenessOk"]
    assert plan["eta"] == "0:01:00", "1.2M rows / (5,000 rows/s per core x 4 cores)"
    assert "default/earlier" in plan["etaBasis"] and "dryRun: false" in done.status["message"]
    planned = with_status(bf, done.status)
    assert decide_backfill(planned, job, None, None, NOW, planning=Planning(app("COMPLETED"), report())).status == (
        planned.status.model_dump(by_alias=True, exclude_none=True)  # type: ignore[union-attr]
    )
    go = Backfill.model_validate(
        {
            **planned.model_dump(by_alias=True, exclude_none=True),
            "spec": {**planned.spec.model_dump(by_alias=True), "dryRun": False},
        }
    )
    started = decide_backfill(go, job, None, None, NOW)
    assert started.create_app is not None and started.status["phase"] == "Running"


def test_a_plan_that_fails_the_guard_or_warns_says_so_in_events() -> None:
    bf, job = manifests(dryRun=True)
    bf = with_status(bf, {"phase": "Planning"})
    bad = report(lateness_ok=False, lateness_message="raise the watermark delay to at least 40m", warnings=["x"])
    done = decide_backfill(bf, job, None, None, NOW, planning=Planning(app("COMPLETED"), bad))
    reasons = [e.reason for e in done.events]
    assert reasons == ["Planned", "LatenessTooShort", "PlanWarning"]
    assert "no ETA (no calibration yet)" in done.status["message"]
    assert done.status["plan"]["etaBasis"].startswith("no calibration yet")
    lost = decide_backfill(bf, job, None, None, NOW, planning=Planning(app("FAILED")))
    assert lost.status["phase"] == "Planned" and "plan failed" in lost.status["message"]
    assert [e.reason for e in lost.events] == ["Planned", "PlanFailed"]


COMPLETED = {
    "metadata": {"annotations": {"kappa.dev/restart-nonce": "0"}},
    "status": {"applicationState": {"state": "COMPLETED"}},
}
"""Its application as the Spark operator reports it once its query ended."""


def planned_and_running(bf: Backfill, rows: int, batches: int, started: str) -> Backfill:
    """``bf`` planned (a dry run's status.plan) and then submitted at ``started``."""
    plan = {
        "files": 1,
        "bytes": 1,
        "rows": rows,
        "expectedBatches": batches,
        "peakStateRows": 1,
        "latenessRequired": "1m",
        "latenessOk": True,
        "latenessMessage": "ok",
        "etaBasis": "none",
        "plannedAt": NOW,
    }
    return with_status(bf, {"phase": "Running", "restartNonce": 0, "startedAt": started, "plan": plan})


def test_a_planned_backfill_that_succeeds_records_its_throughput() -> None:
    bf, job = manifests(publish={"enabled": False})
    bf = planned_and_running(bf, rows=3_600_000, batches=1, started="2026-11-24T09:00:00Z")
    done = decide_backfill(bf, job, COMPLETED, None, "2026-11-24T10:00:00Z")
    assert done.status["phase"] == "Succeeded" and done.record_calibration is not None
    cores = job.spec.executor.instances * job.spec.executor.cores
    assert done.status["calibration"] == {
        "rows": 3_600_000,
        "seconds": 3600.0,
        "cores": cores,
        "rowsPerSecondPerCore": round(1000 / cores, 1),
    }


def test_calibration_keeps_the_newest_runs_and_the_eta_uses_their_median() -> None:
    data: dict[str, Any] = {}
    for i in range(25):
        run = Run(f"ns/b{i}", 1000 * (i + 1), 10.0, 1, f"2026-11-24T09:{i:02d}:00Z")
        data = {k: v for k, v in recorded(data, f"uid-{i}", run).items() if v is not None}
    runs = runs_from(data)
    assert len(runs) == 20 and runs[0].backfill == "ns/b24" and runs[-1].backfill == "ns/b5"
    took, basis = eta(1_000_000, 2, runs)
    assert took is not None and "median of 5" in basis
    assert took.total_seconds() == pytest.approx(1_000_000 / (2300 * 2), abs=1), "median of b20..b24: 2,300 rows/s"
    assert runs_from({"junk": "not json", "half": '{"backfill": "x"}'}) == []
    assert eta(10, 1, [])[0] is None


def test_the_queue_order_is_total_and_stable() -> None:
    names = [
        c(f"b{i}", "Queued", p, f"2026-11-24T09:0{t}:00Z") for i, (p, t) in enumerate(itertools.product((0, 1), (1, 2)))
    ]
    order = [decide(b, names, QueueLimits(max_concurrent=0)) for b in names]
    positions = sorted(q.position for q in order if isinstance(q, Queued))
    assert positions == [1, 2, 3, 4]


def test_a_run_report_splits_the_calibration_and_the_eta_counts_batches() -> None:
    """A sparse and a dense backfill of the same batch count take about as long (the batches'
    fixed cost): the batch-aware ETA says so, rows per second alone is 10x off for one of them."""
    bf, job = manifests(publish={"enabled": False})
    cores = job.spec.executor.instances * job.spec.executor.cores
    # the dense calibration run: 11 batches of 45k rows at 1.2 s + 2 us/row, 2 triggers without rows
    progress = [{"numInputRows": 45_000 + 1000 * (i % 3), "durationMs": {"triggerExecution": 0}} for i in range(11)]
    for p in progress:
        p["durationMs"]["triggerExecution"] = round(1000 * (1.2 + 2e-6 * p["numInputRows"]))
    progress[0]["durationMs"]["triggerExecution"] += 1800  # the query's start, in its first trigger
    progress += [{"numInputRows": 0, "durationMs": {"triggerExecution": 300}}] * 2
    progress[5]["durationMs"]["triggerExecution"] += 2500  # a spike (a GC, a slow commit): not a cost
    costs = batch_costs(progress)
    assert costs.batches == 11 and costs.per_batch_s == pytest.approx(1.2, abs=0.01)
    assert costs.per_row_s == pytest.approx(2e-6, rel=0.02)
    assert costs.busy_s == pytest.approx(11 * 1.2 + 2e-6 * costs.rows + 1.8 + 2.5 + 0.6, abs=0.05)
    assert batch_costs([{"numInputRows": 10, "durationMs": {"triggerExecution": 500}}]).per_batch_s == 0.0
    assert batch_costs([]).batches == 0

    report = RunReport(backfill="b", seconds=costs.busy_s + 2, costs=costs, finished_at=datetime(2026, 11, 24, 10))
    bf = planned_and_running(bf, rows=costs.rows, batches=11, started="2026-11-24T09:59:40Z")
    done = decide_backfill(bf, job, COMPLETED, None, "2026-11-24T10:00:00Z", run_report=report)
    run = done.record_calibration
    assert run is not None and run.costs is not None and run.seconds == 20.0
    assert run.costs.outside_s == pytest.approx(20.0 - costs.busy_s, abs=0.01), "operator's wall minus batches"
    shown = done.status["calibration"]
    assert shown["batches"] == 11 and shown["secondsPerBatch"] == pytest.approx(1.2, abs=0.01)
    assert shown["coreMicrosecondsPerRow"] == pytest.approx(2 * cores, rel=0.02)
    (back,) = runs_from(recorded({}, "uid", run))
    assert back.costs == run.costs, "the costs survive the ConfigMap"

    # a sparse run of as many batches with a tenth of the rows: the same time outside batches
    # and per batch, a tenth of the rows' time (the calibration's spikes are not repeated)
    sparse_rows = costs.rows // 10
    sparse_s = run.costs.outside_s + 11 * 1.2 + sparse_rows * 2e-6
    took, basis = eta(sparse_rows, cores, [back], batches=11)
    assert took is not None and "11 batches" in basis and "core-us" in basis
    assert abs(took.total_seconds() - sparse_s) / sparse_s < 0.1
    by_rows, _ = eta(sparse_rows, cores, [back])  # no batch count: rows per second per core
    assert by_rows is not None and by_rows.total_seconds() < sparse_s / 5, "rows alone: far too fast"
    older = Run("ns/old", 1000, 10.0, 1, "2026-11-24T08:00:00Z")  # recorded before run reports
    assert "rows/s per core" in eta(1000, 1, [older], batches=3)[1]


def test_an_eta_comes_from_runs_of_the_planned_mode() -> None:
    """A bounded run is one batch query, an aligned run a stream: the ETA of a plan takes the
    costs of recorded runs of its own mode, and says so when there are none yet. The mode comes
    from the driver's run report and survives the ConfigMap."""
    bf, job = manifests(publish={"enabled": False})
    progress = [{"numInputRows": 10_000, "durationMs": {"triggerExecution": 1500 + 100 * i}} for i in range(8)]
    costs = batch_costs(progress)
    report = RunReport(
        backfill="b", seconds=costs.busy_s + 2, costs=costs, finished_at=datetime(2026, 11, 24, 10), mode="aligned"
    )
    bf = planned_and_running(bf, rows=costs.rows, batches=8, started="2026-11-24T09:59:40Z")
    run = decide_backfill(bf, job, COMPLETED, None, "2026-11-24T10:00:00Z", run_report=report).record_calibration
    assert run is not None and run.mode == "aligned"
    (aligned,) = runs_from(recorded({}, "uid", run))
    assert aligned.mode == "aligned"
    bounded = Run("ns/fast", 100_000, 5.0, 1, "2026-11-24T09:00:00Z", mode="bounded")
    runs = [aligned, bounded]

    took_bounded, basis = eta(100_000, 1, runs, batches=1, mode="bounded")
    assert took_bounded == timedelta(seconds=5) and "ns/fast" in basis and "ns/b" not in basis
    took_aligned, basis = eta(100_000, 1, runs, batches=8, mode="aligned")
    assert "8 batches" in basis and "ns/fast" not in basis
    assert took_aligned is not None and took_aligned > 2 * took_bounded
    _, basis = eta(100_000, 1, runs, batches=8, mode="strict")
    assert basis.startswith("no strict run recorded yet, from runs of other modes: ")


@pytest.mark.parametrize(
    "entry",
    [
        {"backfill": "ns/b", "rows": 10, "seconds": 1, "cores": 1, "at": 5},
        {"backfill": "ns/b", "rows": 10, "seconds": 1, "cores": 1, "at": None},
        {"backfill": 1, "rows": 10, "seconds": 1, "cores": 1, "at": "2026-11-24T09:00:00Z"},
        {"backfill": "ns/b", "rows": 0, "seconds": 1, "cores": 1, "at": "2026-11-24T09:00:00Z"},
        {"backfill": "ns/b", "rows": 10, "seconds": "Infinity", "cores": 1, "at": "2026-11-24T09:00:00Z"},
        {"backfill": "ns/b", "rows": 10, "seconds": -3, "cores": 1, "at": "2026-11-24T09:00:00Z"},
        {"backfill": "ns/b", "rows": 10, "seconds": 1, "cores": 0.5, "at": "2026-11-24T09:00:00Z"},
        {"backfill": "ns/b", "rows": 1e400, "seconds": 1, "cores": 1, "at": "2026-11-24T09:00:00Z"},
        ["not", "a", "dict"],
    ],
)
def test_a_calibration_entry_that_could_not_be_a_run_is_skipped(entry: Any) -> None:
    """The ConfigMap is anyone's to edit: a bad entry must not stop the operator planning or
    finishing a backfill (kopf would retry a raising handler forever)."""
    good = Run("ns/good", 1000, 10.0, 1, "2026-11-24T08:00:00Z")
    data = {"bad": json.dumps(entry), **recorded(None, "uid-good", good)}
    runs = runs_from(data)
    assert [r.backfill for r in runs] == ["ns/good"]
    took, _ = eta(5000, 2, runs, batches=3)
    assert took is not None and took.total_seconds() == 25
    assert recorded(data, "uid-next", good)  # recording the next run still works


def test_absurd_costs_are_dropped_and_an_eta_stays_a_duration() -> None:
    raw = {"backfill": "ns/b", "rows": 10, "seconds": 1, "cores": 1, "at": "2026-11-24T09:00:00Z"}
    nan = {**raw, "costs": {"batches": 1, "perBatchS": "NaN", "coreSPerRow": 0, "outsideS": 0}}
    (run,) = runs_from({"x": json.dumps(nan)})
    assert run.costs is None, "not finite: the run counts by its rows/s"
    huge = Run("ns/h", 1, 1e-9, 1, "2026-11-24T09:00:00Z")  # one row in a nanosecond: any ETA is tiny
    assert eta(10**18, 1, [huge])[0] is not None
    slow = Run("ns/s", 1, 1e12, 1, "2026-11-24T09:00:00Z")
    took, _ = eta(10**18, 1, [slow])
    assert took is not None and took.days <= 3650, "capped at ten years, not an OverflowError"


def test_a_succeeded_backfill_says_the_mode_its_driver_ran_and_why() -> None:
    """alignment.mode auto is resolved by the driver: status takes it from the run report,
    planned or not; a driver older than auto leaves no mode, and status says none."""
    bf, job = manifests(publish={"enabled": False})
    costs = batch_costs([{"numInputRows": 10, "durationMs": {"triggerExecution": 500}}])
    said = "every operator's batch result is its streaming one"
    report = RunReport(
        backfill="b", seconds=3, costs=costs, finished_at=datetime(2026, 11, 24, 10), mode="bounded", mode_reason=said
    )
    running = planned_and_running(bf, rows=10, batches=1, started="2026-11-24T09:59:40Z")
    done = decide_backfill(running, job, COMPLETED, None, "2026-11-24T10:00:00Z", run_report=report)
    assert (done.status["alignmentMode"], done.status["alignmentModeReason"]) == ("bounded", said)
    older = report.model_copy(update={"mode": None, "mode_reason": None})
    done = decide_backfill(running, job, COMPLETED, None, "2026-11-24T10:00:00Z", run_report=older)
    assert "alignmentMode" not in done.status
