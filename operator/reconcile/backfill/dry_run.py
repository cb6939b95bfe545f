"""``spec.dryRun`` (pure): the plan application run once from Iceberg metadata, then the Backfill
stays Planned with its report in ``status.plan`` (and the Events a person reads in `kubectl
describe`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.intent import SAVED_JOB, BackfillIntent, StatusAt, owner_of, saved_job
from kappa_operator.reconcile.estimates import Run, executor_cores, failed_plan, plan_status
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.phases import ENDED, app_message, app_state
from kappa_operator.render.jobconfig import config_hash
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    config_map,
    job_launch,
    spark_application,
)
from spark_app.contract.config import JobConfig
from spark_app.contract.reports.plan import PlanReport


@dataclass(frozen=True)
class Planning:
    """What planning needs to know: the plan application, its report (once it ended), and the
    throughput of the namespace's finished backfills (for the ETA)."""

    app: dict[str, Any] | None = None
    report: PlanReport | None = None
    runs: tuple[Run, ...] = ()


def planning_step(
    bf: Backfill, job: StreamingJob, cfg: JobConfig, status: StatusAt, planning: Planning, extra: dict[str, Any]
) -> BackfillIntent:
    """spec.dryRun: run the plan application once, then stay Planned with its report in
    status.plan until dryRun is set to false."""
    owner = owner_of(bf)
    extra = {**extra, "planApplicationName": owner.plan_app_name}
    if bf.status is not None and bf.status.phase == "Planned" and bf.status.plan is not None:
        return BackfillIntent(status=status.kept())
    if planning.app is None:
        launch = job_launch(job, BACKFILL_RESTART, bf.spec.image, None, bf.spec.driver, bf.spec.executor)
        created = spark_application(owner, cfg, launch, config_hash(cfg), command="plan")
        msg = f"planning from Iceberg metadata (SparkApplication {owner.plan_app_name})"
        return BackfillIntent(
            config_map=config_map(owner, cfg, {SAVED_JOB: saved_job(job)}),
            create_plan_app=created,
            status=status("Planning", "Planning", msg, planApplicationState="", **extra),
            events=(Event("Normal", "Planning", msg),),
        )
    state = app_state(planning.app) or ""
    extra["planApplicationState"] = state
    if state not in ENDED:
        msg = f"planning: SparkApplication {owner.plan_app_name} is {state or 'submitted'}"
        return BackfillIntent(status=status("Planning", "Planning", msg, **extra))
    if planning.report is None:
        why = app_message(planning.app) or f"it ended {state} without a report"
        plan = failed_plan(f"SparkApplication {owner.plan_app_name}: {why}", status.now)
    else:
        plan = plan_status(planning.report, executor_cores(job), list(planning.runs), status.now)
    return BackfillIntent(
        status=status("Planned", "Planned", planned_message(plan), plan=plan, **extra), events=plan_events(plan)
    )


def planned_message(plan: dict[str, Any]) -> str:
    if plan.get("error"):
        return (
            f"plan failed: {plan['error']}; set spec.dryRun: false to run it anyway (the lateness guard checks at "
            "start)"
        )
    verdict = "lateness ok" if plan["latenessOk"] else "the lateness guard would refuse it"
    took = f"ETA {plan['eta']}" if plan.get("eta") else "no ETA (no calibration yet)"
    return (
        f"planned: {plan['rows']:,} rows in {plan['files']} files, {plan['expectedBatches']} micro-batches, peak state "
        f"~{plan['peakStateRows']:,} rows, {verdict}, {took}; set spec.dryRun: false to run it"
    )


def plan_events(plan: dict[str, Any]) -> tuple[Event, ...]:
    """What `kubectl describe` shows of a plan: its warnings, and a lateness refusal with the fix."""
    events = [Event("Normal", "Planned", planned_message(plan))]
    if plan.get("error"):
        events.append(Event("Warning", "PlanFailed", plan["error"]))
    elif not plan["latenessOk"]:
        events.append(Event("Warning", "LatenessTooShort", plan["latenessMessage"]))
    events += [Event("Warning", "PlanWarning", w) for w in plan.get("warnings", [])]
    return tuple(events)
