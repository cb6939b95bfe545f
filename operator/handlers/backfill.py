"""Backfill: resolve the job, join the alignment group, submit the history run, follow its
progress through the coordinator, end on the publish report its driver leaves when it
completes (or on the report of a separate publish application, where the completed run left
none: ``reconcile.backfill``), leave the group.

The operator never reads the backfill's rows: validation and publish run in Spark (the
backfill's own driver, ``spark_app.apps.publish.run_and_publish``, or the publish application,
``python -m spark_app publish``); this handler reads their report, a few KB next to the
checkpoint, only when the decision needs it (``wants_publish_report``). Every step is safe to
repeat after an operator restart: the phase recorded says where it was, a report is read again,
and a publish run twice commits once."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from kappa_operator.coordinator.groups import GroupProgress, Groups
from kappa_operator.handlers import followers
from kappa_operator.handlers.context import (
    crash_point,
    ctx,
    forget,
    log,
    observe,
    parse,
    post_event,
    post_events,
    record,
    referenced_job,
    reported,
    with_driver_words,
)
from kappa_operator.handlers.nodes import clear_lost_pods, driver_left
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill, follow_step, submitted
from kappa_operator.reconcile.backfill.dry_run import Planning
from kappa_operator.reconcile.backfill.intent import SAVED_JOB, BackfillIntent, owner_of
from kappa_operator.reconcile.backfill.progress import group_declared_again, progress_update
from kappa_operator.reconcile.backfill.publish import wants_publish_report
from kappa_operator.reconcile.backfill_queue import Admitted, Candidate, Queued, decide
from kappa_operator.reconcile.estimates import CONFIG_MAP, recorded, runs_from
from kappa_operator.reconcile.external_calls import calls_status, calls_update, due
from kappa_operator.reconcile.phases import ENDED, app_state, now_rfc3339
from kappa_operator.render.jobconfig import backfill_config, backfill_group, group_name
from kappa_operator.render.spark_application import Owner
from spark_app.contract.reports.external_calls import read_report as read_calls_report
from spark_app.contract.reports.plan import read_report as read_plan_report
from spark_app.contract.reports.publish import PublishReport, read_report
from spark_app.contract.reports.run import RunReport
from spark_app.contract.reports.run import read_report as read_run_report

KIND = "Backfill"
PLURAL = "backfills"
PROGRESS_INTERVAL = 5.0
"""Seconds between looks at a running backfill's group (and at a Pending one's job, a Queued
one's place, a Planning one's application)."""
FOLLOWED = ("Pending", "Planning", "Queued", "Running", "Publishing")
ADMISSION = threading.Lock()
"""One queue decision (and its submission) at a time in this process: two backfills
reconciled at once must not both take the last slot. The operator runs as one replica."""
JOB_GONE = threading.Lock()
"""Held while a backfill first finds its job deleted: the timer and an application event may
both find it at once, and it is said once (each re-reads the object under it)."""


@kopf.index(GROUP, VERSION, "streamingjobs")
async def streaming_jobs(namespace: str, name: str, **_: Any) -> dict[tuple[str, str], None]:
    """The StreamingJobs that exist, by (namespace, name): kopf keeps this from the watch it
    already runs (no request, no RBAC beyond it) and drops a job when it is deleted, so a
    running backfill's timer learns of the deletion within a tick. Async because it does no
    I/O: a sync index runs in kopf's thread pool, and each StreamingJob event then waited
    behind the blocking handlers there (200 CRs at once: p99 9.1 s -> 5.8 s)."""
    return {(namespace, name): None}


def _job(bf: Backfill) -> tuple[StreamingJob | None, bool]:
    """Its StreamingJob, and whether that is the copy kept at submission: a submitted backfill
    whose job was deleted finishes with what it was started with."""
    job = referenced_job(bf.metadata.namespace, bf.spec.job_ref.name)
    if job is not None or not submitted(bf):
        return job, False
    owner = owner_of(bf)
    cm = ctx().cluster().get_config_map(bf.metadata.namespace, owner.config_map_name, owner)
    saved = ((cm or {}).get("data") or {}).get(SAVED_JOB)
    if saved is None:
        return None, False
    return parse(StreamingJob, json.loads(saved)), True


def _report(
    bf: Backfill, job: StreamingJob | None, app: dict[str, Any] | None, publish_app: dict[str, Any] | None
) -> PublishReport | None:
    """The publish report, once the backfill's application completed (its driver published)
    or the separate publish application ended (a KB object next to the backfill's checkpoint:
    the only thing of the data plane the operator reads). Unreadable storage raises: the
    decision is retried, never made without the report."""
    if job is None or not wants_publish_report(bf, app, publish_app):
        return None
    return read_report(backfill_config(bf, job, None))


def _run_report(bf: Backfill, job: StreamingJob | None, app: dict[str, Any] | None) -> RunReport | None:
    """A backfill's driver report (a KB next to its checkpoint), once its application completed
    and until it succeeded: the mode it ran in (status), and, planned, its costs calibrate the
    namespace's next ETAs."""
    status = bf.status
    if job is None or app is None or app_state(app) != "COMPLETED" or status is None:
        return None
    if status.phase == "Succeeded":
        return None
    try:
        return read_run_report(backfill_config(bf, job, None))
    except Exception as exc:  # an ETA basis is not worth failing a finished backfill over
        log.warning("Backfill %s/%s: run report unreadable: %s", bf.metadata.namespace, bf.metadata.name, exc)
        return None


def _planning(bf: Backfill, job: StreamingJob | None, app: dict[str, Any] | None) -> Planning | None:
    """spec.dryRun before submission: the plan application, its report once it ended (a KB
    next to the checkpoint), and the namespace's calibration runs for the ETA."""
    if not bf.spec.dry_run or app is not None or job is None:
        return None
    owner, cluster = owner_of(bf), ctx().cluster()
    plan_app = cluster.get_app(owner.namespace, owner.plan_app_name, owner)
    if plan_app is None or app_state(plan_app) not in ENDED:
        return Planning(plan_app)
    report = read_plan_report(backfill_config(bf, job, None))
    runs = runs_from(cluster.shared_config_map_data(owner.namespace, CONFIG_MAP))
    return Planning(plan_app, report, tuple(runs))


def candidate(body: dict[str, Any]) -> Candidate:
    """A Backfill as the queue sees it (from the object alone: the queue is rebuilt from the
    objects after an operator restart)."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    phase = status.get("phase") or "Pending"
    waiting_for_job = phase == "Pending" and "not found" in str(status.get("message") or "")
    return Candidate(
        namespace=meta["namespace"],
        name=meta["name"],
        phase=phase,
        priority=int(spec.get("priority") or 0),
        created=str(meta.get("creationTimestamp") or ""),
        ready=not spec.get("dryRun") and not waiting_for_job and not meta.get("deletionTimestamp"),
    )


def _queue_turn(bf: Backfill, body: Any, app: dict[str, Any] | None) -> Admitted | Queued | None:
    """Whether a backfill about to be submitted may start (None: no limits, or not about to)."""
    c = ctx()
    if c.queue_limits.unlimited or app is not None or bf.spec.dry_run:
        return None
    everyone = [candidate(b) for b in c.cluster().list_watched(PLURAL, c.namespaces)]
    return decide(candidate(dict(body)), everyone, c.queue_limits)


def _intent(
    bf: Backfill,
    body: Any,
    apps: tuple[dict[str, Any] | None, dict[str, Any] | None],
    job: StreamingJob | None,
    saved: bool,
) -> BackfillIntent:
    c = ctx()
    url = c.coordinator_url if c.groups is not None else None
    app, publish_app = apps
    report = _report(bf, job, app, publish_app)
    return decide_backfill(
        bf,
        job,
        app,
        url,
        now_rfc3339(),
        c.token,
        saved,
        publish_app,
        report,
        planning=_planning(bf, job, app),
        turn=_queue_turn(bf, body, app) if job is not None else None,
        run_report=_run_report(bf, job, app),
        driver_left=_driver_left(bf, app),
    )


def _driver_left(bf: Backfill, app: dict[str, Any] | None) -> bool:
    """Whether a driver pod of its gone application still exists, read only while it runs (a
    restart's new application waits for it: ``decide_backfill``)."""
    if app is not None or bf.status is None or bf.status.phase != "Running":
        return False
    return driver_left(bf.metadata.namespace, owner_of(bf).app_name)


def _apps(bf: Backfill) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The backfill's application and its publish application."""
    owner, cluster = owner_of(bf), ctx().cluster()
    ns = bf.metadata.namespace
    return cluster.get_app(ns, owner.app_name, owner), cluster.get_app(ns, owner.publish_app_name, owner)


def act(intent: BackfillIntent, bf: Backfill, job: StreamingJob | None, body: Any) -> dict[str, Any]:
    """Carry out ``intent``; the status to record (a publish ends in a later status than planned)."""
    c = ctx()
    cluster, owner = c.cluster(), owner_of(bf)
    if intent.join_group is not None and c.groups is not None:
        anew = c.groups.join(intent.join_group)  # before the driver can report into it
        if anew and bf.status is not None and bf.status.phase == "Running":
            post_events(body, (group_declared_again(c.replica),))
    if intent.delete_app:
        cluster.delete_app(owner.namespace, owner.app_name, owner)
    if intent.delete_publish_app:
        cluster.delete_app(owner.namespace, owner.publish_app_name, owner)
    if intent.config_map is not None:
        cluster.apply_config_map(intent.config_map, owner)
    if intent.create_plan_app is not None:
        record(KIND, body, intent.status)  # intent first: a restart finds Planning and the app
        cluster.create_app(intent.create_plan_app, owner)
    if intent.secret is not None:
        cluster.apply_secret(intent.secret, owner)
    if intent.create_app is not None:
        cluster.create_app(intent.create_app, owner)
        crash_point("exit-after-create-app")
    if intent.create_publish_app is not None:
        record(KIND, body, intent.status)  # intent first: a restart finds Publishing and the app
        cluster.create_app(intent.create_publish_app, owner)
    if intent.leave_group is not None and c.groups is not None:
        c.groups.leave(intent.leave_group.name, owner.name)
    if intent.delete_secret:
        cluster.delete_secret(owner.namespace, owner.token_secret_name, owner)  # the credential's job is done
    if intent.record_calibration is not None:
        runs = cluster.shared_config_map_data(owner.namespace, CONFIG_MAP)
        key = bf.metadata.uid or bf.metadata.name
        cluster.merge_shared_config_map(owner.namespace, CONFIG_MAP, recorded(runs, key, intent.record_calibration))
    post_events(body, intent.events)
    observe(KIND, body, intent.status)
    return intent.status


Apps = tuple[dict[str, Any] | None, dict[str, Any] | None]


def _reconcile(bf: Backfill, body: Any, apps: Apps) -> None:
    if apps[0] is None and not bf.spec.dry_run and not ctx().queue_limits.unlimited:
        with ADMISSION:  # decide and record (Running or Queued) before another one decides
            _reconcile_one(bf, body, apps)
    else:
        _reconcile_one(bf, body, apps)


def _reconcile_one(bf: Backfill, body: Any, apps: Apps) -> None:
    recorded = bf.status.application_state if bf.status else None
    apps = (with_driver_words(apps[0], bf.metadata.namespace, recorded), apps[1])
    job, saved = _job(bf)
    if saved and not (bf.status and bf.status.job_deleted):
        with JOB_GONE:  # the first to find the job gone says so; the others see it recorded
            fresh = ctx().cluster().get_resource(PLURAL, bf.metadata.namespace, bf.metadata.name)
            if fresh is None or fresh["metadata"].get("deletionTimestamp"):
                return  # deleted meanwhile, or being deleted: its deletion handler stops it, nothing to say
            bf = parse(Backfill, fresh)
            record(KIND, fresh, act(_intent(bf, fresh, apps, job, saved), bf, job, fresh))
        return
    record(KIND, body, act(_intent(bf, body, apps, job, saved), bf, job, body))


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@reported(KIND)
def reconcile_backfill(body: kopf.Body, **_: Any) -> None:
    bf = parse(Backfill, body)
    _reconcile(bf, body, _apps(bf))


def application_changed(event: str, app: dict[str, Any], bf_body: dict[str, Any]) -> None:
    """Either of its applications moved: the one in the event as it is now, the other read
    (not the one in the event again: at 200 backfills at once each read is felt)."""
    bf = parse(Backfill, bf_body)
    owner, cluster = owner_of(bf), ctx().cluster()
    ns, name = bf.metadata.namespace, app["metadata"]["name"]
    seen = None if event == "DELETED" else app
    if name == owner.publish_app_name:
        _reconcile(bf, bf_body, (cluster.get_app(ns, owner.app_name, owner), seen))
    elif name == owner.app_name:
        _reconcile(bf, bf_body, (seen, cluster.get_app(ns, owner.publish_app_name, owner)))
    else:  # the plan application: both read
        _reconcile(bf, bf_body, _apps(bf))


@followers.every(
    PLURAL,
    PROGRESS_INTERVAL,
    initial_delay=PROGRESS_INTERVAL,
    when=lambda body: (body.get("status") or {}).get("phase") in FOLLOWED,
)
@reported(KIND)
def follow(body: kopf.Body, streaming_jobs: kopf.Index[tuple[str, str], None], **_: Any) -> None:
    """Pending: look for the job again. Queued: a slot may have freed (a backfill ended).
    Planning and Publishing: their application, in case one of its events was missed.
    Running: progress and ETA from the group's watermark, or, its job deleted, say so now, or,
    its last decision failed (its completed driver's report unreadable), decide again."""
    if ctx().lost_nodes:  # a node stopped answering: a pod of this backfill's left on it goes now
        clear_lost_pods(KIND, body)
    meta = body["metadata"]
    uid = memo_key(meta.get("uid"), meta["namespace"], meta["name"])
    groups = ctx().groups
    quiet = QUIET.pop(uid, None)
    if quiet is not None and quiet.still(meta.get("resourceVersion"), streaming_jobs, groups, meta["name"]):
        QUIET[uid] = quiet  # the inputs of the last look, which wrote nothing: it would decide the same
        return
    bf = parse(Backfill, body)
    job = (bf.metadata.namespace, bf.spec.job_ref.name)
    step = follow_step(bf, job in streaming_jobs)
    if step == "wait":
        QUIET[uid] = Quiet(meta.get("resourceVersion"), job, False, None, None)
        return  # still waiting for its job: said once, nothing to write
    if step == "reconcile" or bf.status is None:
        _reconcile(bf, body, _apps(bf))
        return
    group = backfill_group(bf)
    seen = None if groups is None else groups.progress(group, bf.metadata.name)
    fields = (
        None if seen is None else progress_update(bf, seen.global_watermark_us, seen.lag_us, datetime.now(UTC), seen)
    )
    calls = _external_calls(bf)
    if calls is not None:
        fields = {**(fields or {}), "externalCalls": calls}
    if fields is None:
        if bf.status.external_calls is None:  # a report read every 30 s is an input of its own
            QUIET[uid] = Quiet(meta.get("resourceVersion"), job, True, group, seen)
        return
    record(KIND, body, fields)
    observe(KIND, body, {"phase": bf.status.phase, **fields})


@dataclass(frozen=True)
class Quiet:
    """What a look that wrote nothing was decided on: the object's version, whether its job was
    listed and what the group showed. The same again decides the same (``follow_step`` and
    ``progress_update`` are pure), so the next look neither parses the object nor decides: at
    thousands of settled backfills that parse was most of the operator's CPU."""

    resource_version: str | None
    job: tuple[str, str]
    job_listed: bool
    group: str | None
    """None: the look waited for its job and did not ask the group."""
    seen: GroupProgress | None

    def still(
        self,
        resource_version: str | None,
        streaming_jobs: kopf.Index[tuple[str, str], None],
        groups: Groups | None,
        name: str,
    ) -> bool:
        if resource_version is None or resource_version != self.resource_version:
            return False
        if (self.job in streaming_jobs) != self.job_listed:
            return False
        if self.group is None:
            return True
        return groups is not None and groups.progress(self.group, name) == self.seen


def memo_key(uid: str | None, namespace: str, name: str) -> str:
    """What this process remembers a backfill by between looks (``QUIET``, ``CALLS_READ``): its
    uid, so a backfill deleted and created again under its name starts afresh."""
    return uid or f"{namespace}/{name}"


QUIET: dict[str, Quiet] = {}
"""Backfill uid -> the inputs of its last look, when that look wrote nothing."""


def key_of(bf: Backfill) -> tuple[str, str]:
    return bf.metadata.namespace, bf.metadata.name


CALLS_READ: dict[str, float] = {}
"""Backfill uid -> when this process last read its external-calls report (every EVERY_S)."""


def _external_calls(bf: Backfill) -> dict[str, Any] | None:
    """A running backfill with a limit: what its driver reports of its calls, every 30 s (a
    small object next to its checkpoint); None when there is nothing new to write."""
    st = bf.status
    if st is None or st.external_calls is None or st.checkpoint is None:
        return None
    key, now = memo_key(bf.metadata.uid, bf.metadata.namespace, bf.metadata.name), time.monotonic()
    if not due(CALLS_READ.get(key), now):
        return None
    CALLS_READ[key] = now
    try:
        report = read_calls_report(st.checkpoint)
    except Exception as exc:  # storage trouble: shown next time, never a failed backfill
        log.warning("Backfill %s/%s: external-calls report unreadable: %s", *key_of(bf), exc)
        return None
    current = st.external_calls.model_dump(by_alias=True)
    new = calls_update(current, calls_status(report, st.external_calls.rate_per_second))
    metrics = ctx().metrics
    if new is not None and metrics is not None:
        metrics.resources.external_calls(KIND, bf.metadata.namespace, bf.metadata.name, new)
    return new


@kopf.on.delete(GROUP, VERSION, PLURAL)
@reported(KIND)
def delete_backfill(body: kopf.Body, **_: Any) -> None:
    """Behind kopf's finalizer: stop a running application, leave the group, remove the
    credential. Only this Backfill's own children are touched (uid-checked). The branch and
    checkpoint stay (they are data; a person decides when to drop them)."""
    meta, spec = body["metadata"], body.get("spec") or {}  # not parsed: an invalid one must still go
    followers.wait_idle(PLURAL, meta["namespace"], meta["name"])
    c = ctx()
    owner = Owner(KIND, meta["name"], meta["namespace"], meta.get("uid"))
    ns = owner.namespace
    running = (body.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    remembered = memo_key(meta.get("uid"), meta["namespace"], meta["name"])
    CALLS_READ.pop(remembered, None)
    QUIET.pop(remembered, None)
    stopped = c.cluster().delete_app(ns, owner.app_name, owner)
    stopped = c.cluster().delete_app(ns, owner.publish_app_name, owner) or stopped
    c.cluster().delete_app(ns, owner.plan_app_name, owner)
    c.cluster().delete_config_map(ns, owner.config_map_name, owner)
    try:
        c.cluster().delete_secret(ns, owner.token_secret_name, owner)
    except ApiException as exc:
        if exc.status != 403:
            raise
        # Secrets are granted per namespace (the chart's rbac.coordinatorSecrets): without the
        # grant no Secret was created, and one that was is owned by this Backfill, so the
        # garbage collector removes it. The finalizer must not wait for a grant (issue 27).
        log.warning("Backfill %s/%s: no access to Secrets here (403); its Secret, if any, goes with it", ns, owner.name)
    if c.groups is not None:
        c.groups.leave(group_name(ns, owner.name, (spec.get("alignment") or {}).get("group")), owner.name)
    if running and stopped:
        post_event(body, "Normal", "Stopped", f"deleted: stopped SparkApplication {owner.app_name}")
    log.info("Backfill %s/%s deleted (branch and checkpoint kept)", ns, owner.name)
    forget(KIND, body)
