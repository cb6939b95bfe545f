"""StreamingJob: a live job as a ConfigMap and a SparkApplication (its driver under a
PodDisruptionBudget), restarted by the operator with backoff, upgraded as spec.upgrade says,
started from spec.initialSnapshot once, moved off a drained node after a snapshot."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import kopf

from kappa_operator.handlers import followers
from kappa_operator.handlers.context import (
    READ_TIMEOUTS,
    crash_point,
    ctx,
    forget,
    observe,
    parse,
    post_event,
    post_events,
    record,
    reported,
    with_driver_words,
)
from kappa_operator.handlers.nodes import driver_drained, driver_left
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import BLUE_GREEN_ACTIVE, UpgradeStatus
from kappa_operator.observe.restore_points import initial_points
from kappa_operator.reconcile.blue_green_steps import COMMAND, GreenSeen
from kappa_operator.reconcile.initial_snapshot import InitialSeen, initial_pending, restore_app_name, restore_map_name
from kappa_operator.reconcile.job_intent import JobIntent
from kappa_operator.reconcile.phases import ENDED, app_state, now_rfc3339
from kappa_operator.reconcile.snapshot_requests import Answers
from kappa_operator.reconcile.streaming_job import decide_streaming_job, owner_of
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, PAUSED_ANNOTATION, initial_restore_config
from kappa_operator.render.spark_application import Owner
from spark_app.contract.reports.blue_green import read_seam, read_step_report
from spark_app.contract.reports.progress import read_reports
from spark_app.contract.reports.restore import read_report
from spark_app.contract.snapshot_requests import read_answer
from spark_app.contract.storage import REPORT_DIR, open_location

KIND = "StreamingJob"
LOOK_TICK = 5.0
"""Seconds between looks at a waiting job (a restart or an upgrade step is at most this late)."""


INTENT_FIELDS = ("upgrade", "rolledBackGeneration", "initialRestore", "initialSnapshotRestored")
"""Status fields that record a step the I/O below carries out, so they are written first: a
reader that sees the step's application also sees the step (the restored start's flag)."""


def act(intent: JobIntent, job: StreamingJob, body: Any) -> None:
    c, owner = ctx().cluster(), owner_of(job)
    records_intent = any(k in intent.status for k in INTENT_FIELDS)
    if records_intent:  # a step is recorded before its I/O: a restarted operator (or a reader) finds it
        record(KIND, body, intent.status)
    if intent.control_map is not None:
        c.apply_config_map(intent.control_map, owner)
    if intent.create_rewind is not None:
        c.create_resource("rewinds", owner.namespace, intent.create_rewind, owner)
    if intent.move_checkpoint is not None:
        c.annotate("streamingjobs", owner.namespace, owner.name, {CHECKPOINT_ANNOTATION: intent.move_checkpoint})
    if intent.restore is not None:
        cm, restorer = intent.restore
        c.apply_config_map(cm, owner)
        c.create_app(restorer, owner)
    if intent.delete_restore:
        c.delete_app(owner.namespace, restore_app_name(owner), owner)
        c.delete_config_map(owner.namespace, restore_map_name(owner), owner)
    if intent.delete_app:
        c.delete_app(owner.namespace, owner.app_name, owner)
    if intent.config_map is not None:
        c.apply_config_map(intent.config_map, owner)
    if intent.disruption_budget is not None:
        c.apply_disruption_budget(intent.disruption_budget, owner)
    if intent.create_app is not None:
        c.create_app(intent.create_app, owner)
        crash_point("exit-after-create-app")
    act_blue_green(intent, owner)
    post_events(body, intent.events)
    observe(KIND, body, intent.status)
    if not records_intent:
        record(KIND, body, intent.status)


def act_blue_green(intent: JobIntent, owner: Owner) -> None:
    """A blueGreen upgrade's objects: removals first (the step application is one name, one
    at a time), then what the step creates; each safe to repeat (a 404 is done, a 409 on an
    object of ours is done)."""
    c = ctx().cluster()
    if intent.delete_green:
        c.delete_app(owner.namespace, owner.green_app_name, owner)
    if intent.delete_step:
        c.delete_app(owner.namespace, owner.step_app_name, owner)
    for name in intent.delete_maps:
        c.delete_config_map(owner.namespace, name, owner)
    for made in (intent.green, intent.step_app):
        if made is not None:
            c.apply_config_map(made[0], owner)
            c.create_app(made[1], owner)
    if intent.step_app is not None:
        crash_point("exit-after-create-step-app")


@kopf.on.resume(GROUP, VERSION, "streamingjobs")
@kopf.on.create(GROUP, VERSION, "streamingjobs")
@kopf.on.update(GROUP, VERSION, "streamingjobs", field="spec")
# A Rewind pauses and moves the job with these two annotations; only they are watched (not
# every annotation: kubectl's last-applied copy alone can be as large as the spec).
@kopf.on.update(GROUP, VERSION, "streamingjobs", field=("metadata", "annotations", PAUSED_ANNOTATION))
@kopf.on.update(GROUP, VERSION, "streamingjobs", field=("metadata", "annotations", CHECKPOINT_ANNOTATION))
@reported(KIND)
def reconcile_job(body: kopf.Body, **_: Any) -> None:
    reconcile(body)


_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock(namespace: str, name: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((namespace, name), threading.Lock())


def reconcile(body: kopf.Body | dict[str, Any]) -> None:
    """Decide on the job as the server holds it now: the body of a periodic look or a queued
    event can predate our own last writes (an upgrade's moved checkpoint, its recorded step), and
    a decision on it would undo them. One decision per job at a time: its looks (``followers``)
    run beside its event handlers, and a decision that read the job before another's write and its
    application after it (a rollback's) would undo that write."""
    meta = body["metadata"]
    with _lock(meta["namespace"], meta["name"]):
        _reconcile(meta["namespace"], meta["name"])


def reconcile_named(namespace: str, name: str, uid: str | None = None) -> None:
    """One of the job's SparkApplications moved (``applications``): the same decision, the job
    read once (not by the event's handler and again here: at 200 jobs created at once each read
    is felt). ``uid``: the application's owner; a namesake's application (its owner deleted,
    this job created since) decides nothing."""
    with _lock(namespace, name):
        _reconcile(namespace, name, uid)


def _reconcile(namespace: str, name: str, uid: str | None = None) -> None:
    fresh = ctx().cluster().get_resource("streamingjobs", namespace, name)
    if fresh is None or fresh["metadata"].get("deletionTimestamp"):
        return  # deleted meanwhile, or being deleted: no new decision (the finalizer's handler stops it)
    if uid is not None and fresh["metadata"].get("uid") not in (None, uid):
        return  # an application of a deleted namesake, waiting for garbage collection
    body = fresh
    job = parse(StreamingJob, body)
    owner = owner_of(job)
    recorded = job.status.application_state if job.status else None
    app = with_driver_words(ctx().cluster().get_app(owner.namespace, owner.app_name, owner), owner.namespace, recorded)
    initial = initial_seen(job, owner) if initial_pending(job) and app is None else None
    drained = driver_drained(owner.namespace, owner.app_name) if app is not None else None
    drain = job.status.node_drain if job.status else None
    left = app is None and drain is not None and drain.step == "Moving" and driver_left(owner.namespace, owner.app_name)
    named = job.spec.secrets_in_use
    secrets = secret_versions_now(owner.namespace, named) if named else None
    up = job.status.upgrade if job.status else None
    green = green_seen(job, owner, up) if up is not None and up.step in BLUE_GREEN_ACTIVE else None
    intent = decide_streaming_job(
        job,
        app,
        now_rfc3339(),
        snapshot_answers(job),
        initial=initial,
        drained=drained,
        driver_left=left,
        secrets=secrets,
        green=green,
    )
    act(intent, job, body)


def green_seen(job: StreamingJob, owner: Owner, up: UpgradeStatus) -> GreenSeen:
    """What a blueGreen step needs, each read only in the step that uses it: the green and
    step applications (the watch's copy), a step's report once its application ended, the
    versions' progress reports while green catches up, green's seam report while it drains
    (a few hundred bytes each, under ``_kappa/``), and whether a stopped driver's pod is gone."""
    c, ns = ctx().cluster(), owner.namespace
    # a failed green with its driver's last words (read once: the next step removes it)
    green_app = with_driver_words(c.get_app(ns, owner.green_app_name, owner), ns, None)
    step_app = c.get_app(ns, owner.step_app_name, owner)
    seen = GreenSeen(green_app=green_app, step_app=step_app)
    green = open_location(up.green_checkpoint or "", READ_TIMEOUTS) if up.green_checkpoint else None
    if green is None:
        return seen
    command = COMMAND.get(up.step)
    if command is not None and app_state(step_app) in ENDED:
        seen = replace(seen, step_report=read_step_report(green, command))
    if up.step == "CatchingUp" and up.blue_checkpoint:
        sinks = sorted(job.spec.sinks)
        blue = open_location(f"{up.blue_checkpoint.rstrip('/')}/{REPORT_DIR}", READ_TIMEOUTS)
        mine = open_location(f"{up.green_checkpoint.rstrip('/')}/{REPORT_DIR}", READ_TIMEOUTS)  # type: ignore[union-attr]
        seen = replace(
            seen,
            green_reports={r.sink: r for r in read_reports(mine, sinks)},
            blue_reports={r.sink: r for r in read_reports(blue, sinks)},
        )
    if up.step == "Draining":
        seen = replace(seen, seam=read_seam(green))
    if up.step == "StoppingBlue":
        seen = replace(seen, blue_driver_left=driver_left(ns, owner.app_name))
    if up.step == "Switching" and green_app is None:
        seen = replace(seen, green_driver_left=driver_left(ns, owner.green_app_name))
    return seen


def initial_seen(job: StreamingJob, owner: Owner) -> InitialSeen:
    """The start from spec.initialSnapshot as it stands: the snapshots to restore (chosen once,
    from the manifests), the restore application and, once it ended, its report."""
    chosen = list(job.status.initial_restore) if job.status else []
    restorer = ctx().cluster().get_app(owner.namespace, restore_app_name(owner), owner)
    report = None
    if chosen and app_state(restorer) in ENDED:
        report = read_report(initial_restore_config(job, chosen))
    return InitialSeen(points=None if chosen else initial_points(job), restore_app=restorer, report=report)


def snapshot_answers(job: StreamingJob) -> Answers:
    """The driver's answers to the job's open snapshot requests (a few hundred bytes each, next
    to its snapshots); nothing is read while none is open."""
    status, external = job.status, job.spec.checkpoints.external_location
    if status is None or external is None:
        return {}
    out: Answers = {}
    for entry in status.snapshots:
        if entry.taken_at is not None or entry.error is not None:
            continue
        for sink in job.spec.sinks:
            answer = read_answer(open_location(f"{external.rstrip('/')}/{sink}", READ_TIMEOUTS), entry.nonce)
            if answer is not None:
                out.setdefault(entry.nonce, {})[sink] = answer
    return out


def waiting(status: dict[str, Any] | None) -> bool:
    """Whether the job waits for time to pass (a backoff, a snapshot, an upgraded application
    that must run within readyTimeout), or for a failed step to be tried again: the timer below
    looks again while it does.

    A job waiting for a Secret it names (``missingSecrets``) is looked at again too, and starts
    once the Secret exists.

    The failed step is one no kopf handler retries: an event of the job's application moved it
    (its old application deleted for a restart), and its I/O failed (the new application refused
    with a 500 while the spark-operator's webhook restarts). Nothing else would look at the job
    again, so it would sit in Restarting with no application; ``retries`` is set by the failure
    shown on it (``context._failed``) and cleared by the next decision that succeeds."""
    status = status or {}
    if status.get("phase") == "BackingOff" or status.get("retries") or status.get("missingSecrets"):
        return True
    if ((status.get("upgrade") or {}).get("step")) in ("Snapshotting", "Starting", *BLUE_GREEN_ACTIVE):
        return True
    if status.get("nodeDrain"):
        return True
    return any(not s.get("takenAt") and not s.get("error") for s in status.get("snapshots") or [])


@followers.every("streamingjobs", LOOK_TICK, when=lambda body: waiting(body.get("status")))
@reported(KIND)
def look_again(body: kopf.Body, **_: Any) -> None:
    """A failed application waits out its backoff (``status.nextRestartAt``), a snapshot
    request its answer, an upgrade its application's RUNNING: this looks again every few
    seconds while one does, and moves on once the time came or the answer is there."""
    reconcile(body)


SECRET_LOOK_S = 30.0
"""Seconds between looks at the Secrets a running job mounts: a rotated password restarts the
job at most this late (plus one look's wait)."""

_SEEN_SECRETS: dict[tuple[str, str], tuple[float, str | None]] = {}
_SEEN_GUARD = threading.Lock()


def secret_versions_now(namespace: str, names: Iterable[str]) -> dict[str, str | None]:
    """The Secrets' versions, each read at most once per half a look's interval: jobs of a
    namespace mostly share their Secrets, and 1,000 of them would otherwise read one Secret
    1,000 times every interval."""
    now, out, unread = time.monotonic(), {}, []
    with _SEEN_GUARD:
        for name in names:
            seen = _SEEN_SECRETS.get((namespace, name))
            if seen is not None and now - seen[0] < SECRET_LOOK_S / 2:
                out[name] = seen[1]
            else:
                unread.append(name)
    if unread:
        read = ctx().cluster().secret_versions(namespace, unread)
        with _SEEN_GUARD:
            for name, version in read.items():
                _SEEN_SECRETS[(namespace, name)] = (now, version)
        out.update(read)
    return out


def _mounts_secrets(body: Mapping[str, Any]) -> bool:
    return bool((body.get("status") or {}).get("secretVersions"))


@followers.every("streamingjobs", SECRET_LOOK_S, initial_delay=SECRET_LOOK_S, when=_mounts_secrets)
@reported(KIND)
def look_at_secrets(body: kopf.Body, **_: Any) -> None:
    """No event tells the operator that a Secret changed (watching every Secret would need
    cluster-wide list and watch on them): a running job that mounts Secrets has them looked at
    (metadata only), and is decided on again once one's version moved."""
    meta, running = body["metadata"], body["status"]["secretVersions"]
    now = secret_versions_now(meta["namespace"], running)
    if any(version is not None and version != running[name] for name, version in now.items()):
        reconcile(body)


@kopf.on.delete(GROUP, VERSION, "streamingjobs")
@reported(KIND)
def delete_job(body: kopf.Body, **_: Any) -> None:
    """Behind kopf's finalizer: stop the application and remove its ConfigMap (only this job's
    own: a namesake's are left alone). Backfills of this job keep running on their own copy."""
    meta = body["metadata"]  # not parsed: an invalid job must still be deletable
    followers.wait_idle("streamingjobs", meta["namespace"], meta["name"])
    c, owner = ctx().cluster(), Owner(KIND, meta["name"], meta["namespace"], meta.get("uid"))
    stopped = c.delete_app(owner.namespace, owner.app_name, owner)
    c.delete_config_map(owner.namespace, owner.config_map_name, owner)
    for app in (owner.green_app_name, owner.step_app_name):  # a blueGreen upgrade in flight
        if c.delete_app(owner.namespace, app, owner):
            c.delete_config_map(owner.namespace, f"{app}-jobconfig", owner)
    if stopped:
        msg = f"deleted SparkApplication {owner.app_name} and its ConfigMap"
        post_event(body, "Normal", "Deleted", msg)
    forget(KIND, body)
