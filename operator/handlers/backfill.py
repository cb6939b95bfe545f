"""Backfill: resolve the job, join the alignment group, submit the history run, follow its
progress through the coordinator, publish when it completes, leave the group.

Intent goes into status before slow I/O (``Publishing`` before the publish), so an operator
restarted mid-way resumes from the recorded phase and every step is safe to repeat."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers.context import (
    counted,
    crash_point,
    ctx,
    exclusive,
    forget,
    log,
    observe,
    parse,
    post_events,
    referenced_job,
)
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.publish import publish_backfill
from kappa_operator.reconcile.backfill import BackfillPlan, alignment_group, plan_backfill, progress_status, published
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.render.jobconfig import backfill_config, backfill_group
from kappa_operator.render.spark_application import MANAGED_BY

KIND = "Backfill"
PLURAL = "backfills"
PROGRESS_INTERVAL = 5.0
"""Seconds between looks at a running backfill's group (and at a Pending one's job)."""


def _job(bf: Backfill) -> StreamingJob | None:
    return referenced_job(bf.metadata.namespace, bf.spec.job_ref.name)


def _plan(bf: Backfill, app: dict[str, Any] | None, job: StreamingJob | None) -> BackfillPlan:
    c = ctx()
    url = c.coordinator_url if c.groups is not None else None
    return plan_backfill(bf, job, app, url, now_rfc3339(), c.token_secret)


def act(plan: BackfillPlan, bf: Backfill, job: StreamingJob | None, body: Any) -> dict[str, Any]:
    """Carry out ``plan``; the status to record (a publish ends in a later status than planned)."""
    c = ctx()
    cluster, ns, name = c.cluster(), bf.metadata.namespace, bf.metadata.name
    if plan.join_group is not None and c.groups is not None:
        c.groups.join(plan.join_group)  # before the driver can report into it
    if plan.delete_app:
        cluster.delete_app(ns, name)
    if plan.config_map is not None:
        cluster.apply_config_map(plan.config_map)
    if plan.create_app is not None:
        if plan.join_group is not None and c.token:
            cluster.apply_secret(ns, c.token_secret, {"token": c.token}, MANAGED_BY)
        cluster.create_app(plan.create_app)
        crash_point("exit-after-create-app")
    if plan.leave_group is not None and c.groups is not None:
        c.groups.leave(plan.leave_group.name, name)
    post_events(body, plan.events)
    status = plan.status
    if plan.publish and job is not None:
        cluster.patch_status(PLURAL, ns, name, status)  # intent first: a restart resumes the publish
        with exclusive("publish", ns, name) as mine:
            if not mine:
                return status  # the application's event and the timer both got here: one publishes
            cfg = backfill_config(bf, job, None)
            outcome = publish_backfill(bf, cfg)
        return act(published(bf, outcome, alignment_group(cfg), now_rfc3339()), bf, job, body)
    observe(KIND, body, status)
    return status


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@counted(KIND)
def reconcile_backfill(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    bf = parse(Backfill, body)
    job = _job(bf)
    app = ctx().cluster().get_app(bf.metadata.namespace, bf.metadata.name)
    plan = _plan(bf, app, job)
    patch.status.update(act(plan, bf, job, body))


def application_changed(event: str, app: dict[str, Any], bf_body: dict[str, Any]) -> None:
    bf = parse(Backfill, bf_body)
    job = _job(bf)
    plan = _plan(bf, None if event == "DELETED" else app, job)
    status = act(plan, bf, job, bf_body)
    ctx().cluster().patch_status(PLURAL, bf.metadata.namespace, bf.metadata.name, status)


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=PROGRESS_INTERVAL,
    initial_delay=PROGRESS_INTERVAL,
    when=lambda status, **_: status.get("phase") in ("Pending", "Running", "Publishing"),
)
@counted(KIND)
def follow(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Pending: look for the job again. Running: progress and ETA from the group's watermark.
    Publishing: a publish that raised (catalog unreachable) is tried again."""
    bf = parse(Backfill, body)
    if bf.status is None or bf.status.phase in ("Pending", "Publishing"):
        job = _job(bf)
        if job is not None:
            app = ctx().cluster().get_app(bf.metadata.namespace, bf.metadata.name)
            patch.status.update(act(_plan(bf, app, job), bf, job, body))
        return
    groups = ctx().groups
    seen = None if groups is None else groups.progress(backfill_group(bf), bf.metadata.name)
    if seen is None:
        return
    fields = progress_status(bf, seen.global_watermark_us, seen.lag_us, datetime.now(UTC))
    current = bf.status.model_dump(by_alias=True)
    if fields["progressRatio"] == current.get("progressRatio") and fields["alignmentLag"] == current.get(
        "alignmentLag"
    ):
        return  # unchanged: no write (a thousand backfills must not patch every few seconds)
    patch.status.update(fields)
    observe(KIND, body, {"phase": bf.status.phase, **fields})


@kopf.on.delete(GROUP, VERSION, PLURAL)
@counted(KIND)
def delete_backfill(body: kopf.Body, **_: Any) -> None:
    """Behind kopf's finalizer: stop a running application, leave the group. The branch and
    checkpoint stay (they are data; a person decides when to drop them)."""
    bf = parse(Backfill, body)
    c = ctx()
    ns, name = bf.metadata.namespace, bf.metadata.name
    running = (bf.status.phase if bf.status else None) not in ("Succeeded", "Failed")
    c.cluster().delete_app(ns, name)
    c.cluster().delete_config_map(ns, f"{name}-jobconfig")
    if c.groups is not None:
        c.groups.leave(backfill_group(bf), name)
    if running:
        kopf.event(body, type="Normal", reason="Stopped", message=f"deleted: stopped SparkApplication {name}")
    log.info("backfill %s/%s deleted (branch and checkpoint kept)", ns, name)
    forget(KIND, body)
