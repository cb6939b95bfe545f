"""Backfill: resolve the job, join the alignment group, submit the history run, follow its
progress through the coordinator, publish when it completes, leave the group.

Intent goes into status before slow I/O (``Publishing`` before the publish), so an operator
restarted mid-way resumes from the recorded phase and every step is safe to repeat."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import kopf

from kappa_operator.handlers.context import (
    crash_point,
    ctx,
    exclusive,
    forget,
    log,
    observe,
    parse,
    post_events,
    record,
    referenced_job,
    reported,
)
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.publish import publish_backfill
from kappa_operator.reconcile.backfill import (
    SAVED_JOB,
    BackfillPlan,
    alignment_group,
    owner_of,
    plan_backfill,
    progress_update,
    published,
)
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.render.jobconfig import backfill_config, backfill_group, group_name
from kappa_operator.render.spark_application import Owner

KIND = "Backfill"
PLURAL = "backfills"
PROGRESS_INTERVAL = 5.0
"""Seconds between looks at a running backfill's group (and at a Pending one's job)."""


def _job(bf: Backfill) -> tuple[StreamingJob | None, bool]:
    """Its StreamingJob, and whether that is the copy kept at submission: a submitted backfill
    whose job was deleted finishes with what it was started with."""
    job = referenced_job(bf.metadata.namespace, bf.spec.job_ref.name)
    if job is not None or bf.status is None or bf.status.phase not in ("Running", "Publishing"):
        return job, False
    owner = owner_of(bf)
    cm = ctx().cluster().get_config_map(bf.metadata.namespace, owner.config_map_name, owner)
    saved = ((cm or {}).get("data") or {}).get(SAVED_JOB)
    if saved is None:
        return None, False
    return parse(StreamingJob, json.loads(saved)), True


def _plan(bf: Backfill, app: dict[str, Any] | None, job: StreamingJob | None, saved: bool) -> BackfillPlan:
    c = ctx()
    url = c.coordinator_url if c.groups is not None else None
    return plan_backfill(bf, job, app, url, now_rfc3339(), c.token, job_saved=saved)


def _app(bf: Backfill) -> dict[str, Any] | None:
    owner = owner_of(bf)
    return ctx().cluster().get_app(bf.metadata.namespace, owner.app_name, owner)


def act(plan: BackfillPlan, bf: Backfill, job: StreamingJob | None, body: Any) -> dict[str, Any]:
    """Carry out ``plan``; the status to record (a publish ends in a later status than planned)."""
    c = ctx()
    cluster, owner = c.cluster(), owner_of(bf)
    if plan.join_group is not None and c.groups is not None:
        c.groups.join(plan.join_group)  # before the driver can report into it
    if plan.delete_app:
        cluster.delete_app(owner.namespace, owner.app_name, owner)
    if plan.config_map is not None:
        cluster.apply_config_map(plan.config_map, owner)
    if plan.secret is not None:
        cluster.apply_secret(plan.secret, owner)
    if plan.create_app is not None:
        cluster.create_app(plan.create_app, owner)
        crash_point("exit-after-create-app")
    if plan.leave_group is not None and c.groups is not None:
        c.groups.leave(plan.leave_group.name, owner.name)
        cluster.delete_secret(owner.namespace, owner.token_secret_name, owner)  # the credential's job is done
    post_events(body, plan.events)
    status = plan.status
    if plan.publish and job is not None:
        record(KIND, body, status)  # intent first: a restart resumes the publish
        with exclusive("publish", owner.namespace, owner.name) as mine:
            if not mine:
                return status  # the application's event and the timer both got here: one publishes
            cfg = backfill_config(bf, job, None)
            outcome = publish_backfill(bf, cfg)
        return act(published(bf, outcome, alignment_group(cfg), now_rfc3339()), bf, job, body)
    observe(KIND, body, status)
    return status


def _reconcile(bf: Backfill, body: Any, app: dict[str, Any] | None) -> None:
    job, saved = _job(bf)
    status = act(_plan(bf, app, job, saved), bf, job, body)
    said = bool(bf.status and bf.status.job_deleted)
    if saved and not said:  # once, not on every event of the application
        msg = f"StreamingJob {bf.spec.job_ref.name} was deleted: finishing with the configuration kept at submission"
        kopf.event(body, type="Warning", reason="JobDeleted", message=msg)
        status = {**status, "jobDeleted": True}
    record(KIND, body, status)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@reported(KIND)
def reconcile_backfill(body: kopf.Body, **_: Any) -> None:
    bf = parse(Backfill, body)
    _reconcile(bf, body, _app(bf))


def application_changed(event: str, app: dict[str, Any], bf_body: dict[str, Any]) -> None:
    bf = parse(Backfill, bf_body)
    _reconcile(bf, bf_body, None if event == "DELETED" else app)


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=PROGRESS_INTERVAL,
    initial_delay=PROGRESS_INTERVAL,
    when=lambda status, **_: status.get("phase") in ("Pending", "Running", "Publishing"),
)
@reported(KIND)
def follow(body: kopf.Body, **_: Any) -> None:
    """Pending: look for the job again. Running: progress and ETA from the group's watermark.
    Publishing: a publish that raised (catalog unreachable) is tried again."""
    bf = parse(Backfill, body)
    if bf.status is None or bf.status.phase in ("Pending", "Publishing"):
        if (
            bf.status is not None
            and bf.status.phase == "Pending"
            and referenced_job(bf.metadata.namespace, bf.spec.job_ref.name) is None
        ):
            return  # still waiting: said once, nothing to write
        _reconcile(bf, body, _app(bf))
        return
    groups = ctx().groups
    seen = None if groups is None else groups.progress(backfill_group(bf), bf.metadata.name)
    fields = None if seen is None else progress_update(bf, seen.global_watermark_us, seen.lag_us, datetime.now(UTC))
    if fields is None:
        return
    record(KIND, body, fields)
    observe(KIND, body, {"phase": bf.status.phase, **fields})


@kopf.on.delete(GROUP, VERSION, PLURAL)
@reported(KIND)
def delete_backfill(body: kopf.Body, **_: Any) -> None:
    """Behind kopf's finalizer: stop a running application, leave the group, remove the
    credential. Only this Backfill's own children are touched (uid-checked). The branch and
    checkpoint stay (they are data; a person decides when to drop them)."""
    meta, spec = body["metadata"], body.get("spec") or {}  # not parsed: an invalid one must still go
    c = ctx()
    owner = Owner(KIND, meta["name"], meta["namespace"], meta.get("uid"))
    ns = owner.namespace
    running = (body.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    stopped = c.cluster().delete_app(ns, owner.app_name, owner)
    c.cluster().delete_config_map(ns, owner.config_map_name, owner)
    c.cluster().delete_secret(ns, owner.token_secret_name, owner)
    if c.groups is not None:
        c.groups.leave(group_name(ns, owner.name, (spec.get("alignment") or {}).get("group")), owner.name)
    if running and stopped:
        kopf.event(body, type="Normal", reason="Stopped", message=f"deleted: stopped SparkApplication {owner.app_name}")
    log.info("Backfill %s/%s deleted (branch and checkpoint kept)", ns, owner.name)
    forget(KIND, body)
