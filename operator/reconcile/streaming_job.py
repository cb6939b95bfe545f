"""What to do for a StreamingJob, from the job and its SparkApplication as observed (pure).

A spec change (a different JobConfig hash) of a running job is an upgrade
(``reconcile.upgrades``: last-state, stateless or snapshot-then-upgrade, with rollback).
Suspend deletes the application and keeps the checkpoint; resume recreates it. A failed
application is restarted by the operator with exponential backoff (``reconcile.restarts``).
Snapshots asked for by trigger, upgrade or drain are requests to the running driver
(``reconcile.snapshot_requests``). A drained node under the driver moves the job, a snapshot
first (``reconcile.node_drain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kappa_operator.models.common import Condition, instant
from kappa_operator.models.streaming_job import StreamingJob, StreamingJobSpec
from kappa_operator.models.streaming_job_status import BLUE_GREEN_ACTIVE
from kappa_operator.reconcile.blue_green_steps import (
    GreenSeen,
    Step,
    blue_starting,
    blue_to_resume,
    decide_step,
    finished,
)
from kappa_operator.reconcile.blue_green_steps import start as start_blue_green
from kappa_operator.reconcile.bootstrap import added_to_running, bootstrapping, bootstrapping_message
from kappa_operator.reconcile.conditions import Verdict, live, set_conditions
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.initial_snapshot import (
    InitialSeen,
    initial_pending,
    start_from_snapshot,
)
from kappa_operator.reconcile.job_intent import ENDED_LIVE, JobIntent, StatusOf
from kappa_operator.reconcile.kafka_secrets import SecretsSeen, missing, restart_for, rotated, versions_to_run
from kappa_operator.reconcile.node_drain import DrainedDriver, move, waits_for_old_driver
from kappa_operator.reconcile.phases import STATES, app_message, app_state
from kappa_operator.reconcile.restarts import (
    REFUSED,
    next_restart,
    refused_its_configuration,
    submitted_twice,
    uncounted,
)
from kappa_operator.reconcile.snapshot_requests import Answers, Book, book
from kappa_operator.reconcile.upgrades import (
    edit_waiting,
    effective,
    roll_back,
    rollback_due,
    stable_fields,
    upgrade,
)
from kappa_operator.render.disruption_budget import driver_disruption_budget
from kappa_operator.render.jobconfig import (
    PAUSED_ANNOTATION,
    job_hash,
    live_checkpoint,
    running_hash_of,
    streaming_job_config,
)
from kappa_operator.render.spark_application import (
    LIVE_RESTART,
    Owner,
    config_map,
    control_map,
    job_launch,
    running_secret_versions,
    spark_application,
)
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import KappaError


def owner_of(job: StreamingJob) -> Owner:
    return Owner("StreamingJob", job.metadata.name, job.metadata.namespace, job.metadata.uid)


def decide_streaming_job(
    job: StreamingJob,
    app: dict[str, Any] | None,
    now: str,
    answers: Answers | None = None,
    restarts: bool = True,
    initial: InitialSeen | None = None,
    drained: DrainedDriver | None = None,
    driver_left: bool = False,
    secrets: SecretsSeen | None = None,
    green: GreenSeen | None = None,
) -> JobIntent:
    """``green``: what the handler read for a blueGreen upgrade's step in flight
    (``reconcile.blue_green_steps``).
    ``answers``: the driver's answers to the open snapshot requests (read by the handler).
    ``secrets``: the versions of the Secrets its Kafka security names (read by the handler, as
    metadata only; ``reconcile.kafka_secrets``).
    ``drained``: the running driver's pod, when its node is cordoned (read by the handler while
    a node is). ``driver_left``: a driver pod of the application still exists (read while a
    move waits for the old application to go).
    ``restarts``: False for ``kappa run``, whose local run ends by design (availableNow) and
    is shown as it ended, never restarted. ``initial``: what the handler saw of the restore of
    ``spec.initialSnapshot`` (while one is due)."""
    ran = effective(job)
    requests = book(ran, answers, now)
    intent = _decide(ran, app, now, requests, restarts, initial, drained, driver_left, secrets, green)
    return _with_requests(_said_waiting(intent, job, edit_waiting(job, ran)), ran, requests)


def _said_waiting(intent: JobIntent, job: StreamingJob, waits: str | None) -> JobIntent:
    """The status message (and, the first time, an Event) saying an edit waits for a switch."""
    if waits is None:
        return intent
    shown = job.status.message if job.status is not None else None
    message = intent.status.get("message") or shown or ""
    if waits in message:
        return intent
    events = intent.events if shown and waits in shown else (*intent.events, Event("Normal", "EditWaits", waits))
    said = f"{message}; {waits}" if message else waits
    return replace(intent, status={**intent.status, "message": said}, events=events)


def _with_requests(intent: JobIntent, job: StreamingJob, requests: Book) -> JobIntent:
    """The snapshot history and its Events in the intent; the control ConfigMap when a request
    was added (applied before the status that records it)."""
    fields = requests.status()
    if not fields:
        return intent
    events = intent.events + tuple(Event(*e) for e in requests.events)
    control = control_map(owner_of(job), requests.open) if requests.added else intent.control_map
    return replace(intent, status={**intent.status, **fields}, events=events, control_map=control)


def _decide(
    job: StreamingJob,
    app: dict[str, Any] | None,
    now: str,
    requests: Book,
    restarts: bool,
    initial: InitialSeen | None,
    drained: DrainedDriver | None,
    driver_left: bool = False,
    secrets: SecretsSeen | None = None,
    green: GreenSeen | None = None,
) -> JobIntent:
    owner = owner_of(job)
    missing_secrets = missing(secrets)
    running_versions = running_secret_versions(app)
    versions = versions_to_run(secrets, running_versions, app is not None)
    previous: list[Condition] = list(job.status.conditions) if job.status else []
    base: dict[str, Any] = {"observedGeneration": job.metadata.generation, "applicationName": owner.app_name}
    if job.spec.secrets_in_use or (job.status is not None and job.status.missing_secrets):
        base["missingSecrets"] = list(missing_secrets) or None  # unset once they exist
        base["secretVersions"] = (running_versions if app is not None else None) or None

    def status(phase: str, ready: bool, reason: str, message: str, state: str | None) -> dict[str, Any]:
        verdict = Verdict(phase, reason, message)
        conds = set_conditions(previous, live(ready), verdict, now, job.metadata.generation)
        return {
            **base,
            "phase": phase,
            "applicationState": state,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }

    try:
        cfg = streaming_job_config(job)
        refused = added_to_running(job) if app is not None else None
        if refused is not None:
            raise ValueError(refused)
    except (ValueError, KappaError) as exc:
        # A spec the schema let through but the pipeline's config refuses (an unknown catalog,
        # a bad partition transform): said on the object, not retried (an edit is re-handled).
        msg = f"cannot run this StreamingJob: {exc}"
        if app is not None:  # a bad edit does not stop what runs: it keeps its previous config
            msg += f"; SparkApplication {owner.app_name} keeps running with the previous spec"
        changed = job.status is None or job.status.message != msg
        return JobIntent(
            status=status("Failed", False, "InvalidSpec", msg, None),
            events=(Event("Warning", "InvalidSpec", msg),) if changed else (),
        )
    digest = job_hash(job, cfg, versions)
    base.update(configHash=digest, checkpointLocation=live_checkpoint(job))
    carried = ((app or {}).get("metadata", {}).get("annotations") or {}).get("kappa.dev/config-hash")
    running_hash = running_hash_of(job, cfg, carried, running_versions)
    up = job.status.upgrade if job.status else None
    if up is not None and up.step in BLUE_GREEN_ACTIVE:
        # A blueGreen step in flight decides first: blue may be stopped on purpose, green must
        # not be left behind by a suspend or a Rewind (they wait until the upgrade ends).
        decided = decide_step(Step(job, up, owner, app, green or GreenSeen(), now, digest, status))
        if decided is not None:
            return decided

    paused = job.metadata.annotations.get(PAUSED_ANNOTATION)
    if paused:
        msg = f"stopped by {paused}; the live checkpoint is kept"
        if app is not None:
            return JobIntent(
                delete_app=True,
                status=status("Rewinding", False, "Rewinding", msg, None),
                events=(Event("Normal", "Rewinding", f"{paused}: deleted the SparkApplication"),),
            )
        return JobIntent(status=status("Rewinding", False, "Rewinding", msg, None))

    if job.spec.suspend:
        if app is not None:
            # Straight to Suspended (not "Suspending"): the application's DELETED event reports
            # the same status, so whichever of the two status writes lands last, they agree.
            return JobIntent(
                delete_app=True,
                status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None),
                events=(Event("Normal", "Suspended", "spec.suspend: deleted the SparkApplication, checkpoint kept"),),
            )
        return JobIntent(status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None))

    if app is None and missing_secrets:
        # The pods would wait for ever on a volume that cannot mount (FailedMount): say which
        # Secret is missing instead, and start once it exists (the job is looked at again).
        names = ", ".join(missing_secrets)
        msg = (
            f"waiting for Secret {names} in {owner.namespace}, named by spec.kafkaSecurity: create it; the job starts "
            "once it exists (nothing runs meanwhile)"
        )
        changed = job.status is None or job.status.message != msg
        return JobIntent(
            status=status("Pending", False, "SecretNotFound", msg, None),
            events=(Event("Warning", "SecretNotFound", msg),) if changed else (),
        )

    if app is None and initial_pending(job):
        step = start_from_snapshot(job, owner, initial or InitialSeen(), status)
        if not step.delete_restore:
            return step
        created = _create(job, owner, cfg, digest, requests, status, versions)  # restored: the first run
        return replace(
            created,
            delete_restore=True,
            status={**created.status, "initialSnapshotRestored": True},
            events=step.events + created.events,
        )

    if app is None:
        waiting = waits_for_old_driver(job, driver_left)
        if waiting is not None:
            return waiting
        resumed = blue_to_resume(job, digest, versions)
        if resumed is None:
            return _create(job, owner, cfg, digest, requests, status, versions)
        blue, blue_digest = resumed
        created = _create(blue, owner, streaming_job_config(blue), blue_digest, requests, status, versions)
        said = (
            f"resumed on the spec that last ran (config {blue_digest}): its checkpoint holds that spec's state; "
            f"the edit (config {digest}) upgrades blueGreen once it runs"
        )
        return replace(
            created,
            status={**created.status, "configHash": blue_digest, "message": said},
            events=(*created.events, Event("Normal", "ResumedOnBlue", said)),
        )

    changed_secrets = rotated(running_versions, versions)
    if running_hash != digest and changed_secrets and running_hash == job_hash(job, cfg, running_versions):
        return restart_for(changed_secrets, running_versions, versions, status)  # the spec is the same
    blue_green = job.spec.upgrade.mode == "blueGreen"
    if running_hash != digest and blue_green and blue_starting(job, app, running_hash, now):
        base["configHash"] = running_hash  # resumed on blue's spec: shown as it starts, upgraded once it runs
    elif running_hash != digest and blue_green:
        stable = job.status.last_stable_spec if job.status else None
        blue = StreamingJobSpec.model_validate_json(stable) if stable else None
        return start_blue_green(job, blue, app, running_hash, digest, now, status, live_checkpoint(job), owner)
    elif running_hash != digest:
        return upgrade(job, app, running_hash, digest, now, requests, status, versions)

    state = app_state(app) or ""
    base["sparkUI"] = spark_ui(app, owner.namespace)
    why = rollback_due(job, digest, state, state in ENDED_LIVE, now)
    if why is not None:
        return roll_back(job, why, state, requests, status)
    moving = move(job, app, state, drained, now, requests, status)
    if moving is not None:
        return moving
    if state in ENDED_LIVE and restarts:
        ended = _ended(job, app, state, now, status)
        drain = job.status.node_drain if job.status else None
        if drain is not None and drain.step == "Snapshotting" and ended.status:  # failed while moving
            return replace(ended, status={**ended.status, "nodeDrain": None})
        return ended
    if not state and job.status is not None and job.status.phase == "Submitted" and not job.status.application_state:
        # created by us and not yet taken by the Spark operator: its first event says nothing
        # the status does not already say (no second "Submitted" Event, no status write)
        return JobIntent()
    phase, ready, reason = STATES.get(state, ("Unknown", False, "Unknown"))
    message = app_message(app) or f"SparkApplication is {state or 'submitted'}"
    if phase == "Running" and bootstrapping(job):  # it runs, on history: not live yet
        phase, ready, reason, message = "Bootstrapping", False, "Bootstrapping", bootstrapping_message(job)
    changed = job.status is None or job.status.application_state != state
    events: tuple[Event, ...] = ()
    if changed:
        kind = "Warning" if phase == "Failed" else "Normal"
        events = (Event(kind, reason, message),)
    elif phase == "Running" and job.status is not None and job.status.phase == "Bootstrapping":
        seen = job.status.bootstrap
        since = seen.switched_at if seen is not None else None
        events = (Event("Normal", "Switched", f"the archives are read; the job reads Kafka since {since}"),)
    fields = status(phase, ready, reason, message, state)
    if phase in ("Running", "Bootstrapping"):
        fields.update(nextRestartAt=None, **stable_fields(job, digest))
        up = job.status.upgrade if job.status else None
        if up is not None and up.step == "Starting" and up.to_hash == digest:
            fields["upgrade"] = None
            events += (Event("Normal", "Upgraded", f"config {up.from_hash} -> {digest} runs ({up.mode})"),)
        if up is not None and up.step == "Promoting" and state == "RUNNING":
            fields["upgrade"] = None
            said = f"config {up.from_hash} -> {up.to_hash} runs on green's checkpoint, switched at {up.boundary}"
            events += (Event("Normal", "Upgraded", f"{said} (blueGreen)"),)
            return JobIntent(status=fields, events=events, delete_maps=finished(owner), delete_step=True)
        moved = job.status.node_drain if job.status else None
        if moved is not None and moved.step == "Moving" and state == "RUNNING":
            fields["nodeDrain"] = None
            said = f"moved off drained node {moved.node}: running again from its checkpoint"
            events += (Event("Normal", "Moved", said),)
    return JobIntent(status=fields, events=events)


def spark_ui(app: dict[str, Any] | None, namespace: str) -> str | None:
    """The driver's Spark UI as the Spark operator published it: its ingress address, else its
    service inside the cluster (``kubectl port-forward svc/<name> 4040`` reaches it)."""
    info = ((app or {}).get("status") or {}).get("driverInfo") or {}
    if info.get("webUIIngressAddress"):
        address = str(info["webUIIngressAddress"])
        return address if "://" in address else f"http://{address}"
    if info.get("webUIServiceName"):
        return f"http://{info['webUIServiceName']}.{namespace}.svc:{info.get('webUIPort') or 4040}"
    return str(info["webUIAddress"]) if info.get("webUIAddress") else None


def _ended(job: StreamingJob, app: dict[str, Any] | None, state: str, now: str, status: StatusOf) -> JobIntent:
    """A live application that ended: back off, then restart it from its checkpoint (a
    further state of the same ended application changes nothing)."""
    error = app_message(app) or ("the live query ended" if state == "COMPLETED" else f"application {state}")
    current = job.status
    if current is not None and current.phase == "BackingOff" and current.next_restart_at:
        if instant(now) < instant(current.next_restart_at):
            return JobIntent()  # the timer looks again
        return JobIntent(
            delete_app=True,
            status=status("Restarting", False, "BackOffElapsed", f"restart {current.restarts}: {error}", state),
            events=(Event("Normal", "Restarting", f"restart {current.restarts} from the checkpoint after: {error}"),),
        )
    if current is not None and current.phase == "Failed" and current.application_state == state:
        return JobIntent()  # the restart limit was reached: it stays failed
    if refused_its_configuration(error):
        msg = f"{error}; {REFUSED}: fix the StreamingJob's spec, which submits it again"
        fields = status("Failed", False, "ConfigRefused", msg, state)
        return JobIntent(status={**fields, "nextRestartAt": None}, events=(Event("Warning", "ConfigRefused", msg),))
    decision = next_restart(job, instant(now), counted=not submitted_twice(error))
    if decision is None:
        made = job.status.restarts if job.status else 0
        msg = f"{error}; not restarted: {made} restarts in a row (restart.maxAttempts)"
        fields = status("Failed", False, "RestartLimitReached", msg, state)
        return JobIntent(
            status={**fields, "nextRestartAt": None}, events=(Event("Warning", "RestartLimitReached", msg),)
        )
    attempt, at = decision
    msg = f"{error}; restart {attempt} at {at} (spec.restart){uncounted(error)}"
    fields = status("BackingOff", False, "BackingOff", msg, state)
    return JobIntent(
        status={**fields, "restarts": attempt, "nextRestartAt": at},
        events=(Event("Warning", "BackingOff", msg),),
    )


def _create(
    job: StreamingJob,
    owner: Owner,
    cfg: JobConfig,
    digest: str,
    requests: Book,
    status: StatusOf,
    versions: Mapping[str, str],
) -> JobIntent:
    launch = job_launch(job, LIVE_RESTART)
    external = job.spec.checkpoints.external_location is not None
    return JobIntent(
        disruption_budget=driver_disruption_budget(owner),
        config_map=config_map(owner, cfg),
        create_app=spark_application(owner, cfg, launch, digest, control=external, secret_versions=versions),
        control_map=control_map(owner, requests.open) if external else None,
        status={
            **status("Submitted", False, "Submitted", "SparkApplication created", None),
            **({"secretVersions": dict(versions)} if versions else {}),
        },
        events=(Event("Normal", "Submitted", f"created SparkApplication {owner.app_name} (config {digest})"),),
    )
