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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kappa_operator.models.common import Condition
from kappa_operator.models.streaming_job import RestorePointStatus, StreamingJob
from kappa_operator.reconcile.bootstrap import added_to_running, bootstrapping, bootstrapping_message
from kappa_operator.reconcile.conditions import Verdict, live, set_conditions
from kappa_operator.reconcile.node_drain import DrainedDriver, drain_nonce
from kappa_operator.reconcile.phases import STATES, app_message, app_state
from kappa_operator.reconcile.restarts import REFUSED, next_restart, parse_time, refused_its_configuration
from kappa_operator.reconcile.snapshot_requests import Answers, Book, book
from kappa_operator.reconcile.upgrades import (
    effective,
    rollback_due,
    rollback_rewind,
    stable_fields,
    stateless_location,
    upgrade_nonce,
    upgrade_record,
)
from kappa_operator.render.disruption_budget import driver_disruption_budget
from kappa_operator.render.jobconfig import (
    CHECKPOINT_ANNOTATION,
    PAUSED_ANNOTATION,
    config_hash,
    initial_restore_config,
    live_checkpoint,
    streaming_job_config,
)
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    LIVE_RESTART,
    Owner,
    child_name,
    config_map,
    control_map,
    job_launch,
    spark_application,
)
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.restore import RestoreReport


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class JobPlan:
    config_map: dict[str, Any] | None = None
    """Apply (create or replace) this ConfigMap."""
    create_app: dict[str, Any] | None = None
    """Create this SparkApplication."""
    delete_app: bool = False
    """Delete the current SparkApplication (suspend, or a restart after a spec change)."""
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    control_map: dict[str, Any] | None = None
    """Apply the job's control ConfigMap (its open snapshot requests)."""
    move_checkpoint: str | None = None
    """Point the job at this checkpoint location (its annotation): a stateless upgrade."""
    create_rewind: dict[str, Any] | None = None
    """Create this Rewind (a rollback to the upgrade's snapshot)."""
    restore: tuple[dict[str, Any], dict[str, Any]] | None = None
    """Apply this ConfigMap and create this restore application (``spec.initialSnapshot``)."""
    delete_restore: bool = False
    """Delete the restore application (it restored the initial snapshot)."""
    disruption_budget: dict[str, Any] | None = None
    """Create this PodDisruptionBudget of the driver, if absent (``reconcile.node_drain``)."""


@dataclass(frozen=True)
class InitialSeen:
    """What the handler saw of a new job's start from ``spec.initialSnapshot``."""

    points: list[RestorePointStatus] | str | None = None
    """The snapshot per sink, or why there is none (None: not looked: chosen already)."""
    restore_app: dict[str, Any] | None = None
    report: RestoreReport | None = None
    """The restore application's report, once it ended."""


def initial_pending(job: StreamingJob) -> bool:
    """Whether the job must first restore ``spec.initialSnapshot`` (once, before any run)."""
    return job.spec.initial_snapshot is not None and not (job.status and job.status.initial_snapshot_restored)


def owner_of(job: StreamingJob) -> Owner:
    return Owner("StreamingJob", job.metadata.name, job.metadata.namespace, job.metadata.uid)


def plan_streaming_job(
    job: StreamingJob,
    app: dict[str, Any] | None,
    now: str,
    answers: Answers | None = None,
    restarts: bool = True,
    initial: InitialSeen | None = None,
    drained: DrainedDriver | None = None,
) -> JobPlan:
    """``answers``: the driver's answers to the open snapshot requests (read by the handler).
    ``drained``: the running driver's pod, when its node is cordoned (read by the handler while
    a node is).
    ``restarts``: False for ``kappa run``, whose local run ends by design (availableNow) and
    is shown as it ended, never restarted. ``initial``: what the handler saw of the restore of
    ``spec.initialSnapshot`` (while one is due)."""
    job = effective(job)
    requests = book(job, answers, now)
    plan = _decide(job, app, now, requests, restarts, initial, drained)
    return _with_requests(plan, job, requests)


def _with_requests(plan: JobPlan, job: StreamingJob, requests: Book) -> JobPlan:
    """The snapshot history and its Events in the plan; the control ConfigMap when a request
    was added (applied before the status that records it)."""
    fields = requests.status()
    if not fields:
        return plan
    events = plan.events + tuple(Event(*e) for e in requests.events)
    control = control_map(owner_of(job), requests.open) if requests.added else plan.control_map
    return replace(plan, status={**plan.status, **fields}, events=events, control_map=control)


def _decide(
    job: StreamingJob,
    app: dict[str, Any] | None,
    now: str,
    requests: Book,
    restarts: bool,
    initial: InitialSeen | None,
    drained: DrainedDriver | None,
) -> JobPlan:
    owner = owner_of(job)
    previous: list[Condition] = list(job.status.conditions) if job.status else []
    base: dict[str, Any] = {"observedGeneration": job.metadata.generation, "applicationName": owner.app_name}

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
        return JobPlan(
            status=status("Failed", False, "InvalidSpec", msg, None),
            events=(Event("Warning", "InvalidSpec", msg),) if changed else (),
        )
    digest = config_hash(cfg)
    base.update(configHash=digest, checkpointLocation=live_checkpoint(job))
    running_hash = ((app or {}).get("metadata", {}).get("annotations") or {}).get("kappa.dev/config-hash")

    paused = job.metadata.annotations.get(PAUSED_ANNOTATION)
    if paused:
        msg = f"stopped by {paused}; the live checkpoint is kept"
        if app is not None:
            return JobPlan(
                delete_app=True,
                status=status("Rewinding", False, "Rewinding", msg, None),
                events=(Event("Normal", "Rewinding", f"{paused}: deleted the SparkApplication"),),
            )
        return JobPlan(status=status("Rewinding", False, "Rewinding", msg, None))

    if job.spec.suspend:
        if app is not None:
            # Straight to Suspended (not "Suspending"): the application's DELETED event reports
            # the same status, so whichever of the two status writes lands last, they agree.
            return JobPlan(
                delete_app=True,
                status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None),
                events=(Event("Normal", "Suspended", "spec.suspend: deleted the SparkApplication, checkpoint kept"),),
            )
        return JobPlan(status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None))

    if app is None and initial_pending(job):
        step = _start_from_snapshot(job, owner, initial or InitialSeen(), status)
        if not step.delete_restore:
            return step
        created = _create(job, owner, cfg, digest, requests, status)  # restored: the first run
        return replace(
            created,
            delete_restore=True,
            status={**created.status, "initialSnapshotRestored": True},
            events=step.events + created.events,
        )

    if app is None:
        return _create(job, owner, cfg, digest, requests, status)

    if running_hash != digest:
        return _upgrade(job, app, running_hash, digest, now, requests, status)

    state = app_state(app) or ""
    base["sparkUI"] = spark_ui(app, owner.namespace)
    why = rollback_due(job, digest, state, state in ENDED_LIVE, now)
    if why is not None:
        return _roll_back(job, why, state, requests, status)
    moving = _move(job, app, state, drained, now, requests, status)
    if moving is not None:
        return moving
    if state in ENDED_LIVE and restarts:
        return _ended(job, app, state, now, status)
    if not state and job.status is not None and job.status.phase == "Submitted" and not job.status.application_state:
        # created by us and not yet taken by the Spark operator: its first event says nothing
        # the status does not already say (no second "Submitted" Event, no status write)
        return JobPlan()
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
        moved = job.status.node_drain if job.status else None
        if moved is not None and moved.step == "Moving" and state == "RUNNING":
            fields["nodeDrain"] = None
            said = f"moved off drained node {moved.node}: running again from its checkpoint"
            events += (Event("Normal", "Moved", said),)
    return JobPlan(status=fields, events=events)


ENDED_LIVE = ("FAILED", "SUBMISSION_FAILED", "COMPLETED")
"""States after which a live application runs no more (rendered with restartPolicy Never: the
operator restarts it, with backoff)."""
StatusOf = Callable[[str, bool, str, str, "str | None"], dict[str, Any]]


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


def _ended(job: StreamingJob, app: dict[str, Any] | None, state: str, now: str, status: StatusOf) -> JobPlan:
    """A live application that ended: back off, then restart it from its checkpoint (a
    further state of the same ended application changes nothing)."""
    error = app_message(app) or ("the live query ended" if state == "COMPLETED" else f"application {state}")
    current = job.status
    if current is not None and current.phase == "BackingOff" and current.next_restart_at:
        if parse_time(now) < parse_time(current.next_restart_at):
            return JobPlan()  # the timer looks again
        return JobPlan(
            delete_app=True,
            status=status("Restarting", False, "BackOffElapsed", f"restart {current.restarts}: {error}", state),
            events=(Event("Normal", "Restarting", f"restart {current.restarts} from the checkpoint after: {error}"),),
        )
    if current is not None and current.phase == "Failed" and current.application_state == state:
        return JobPlan()  # the restart limit was reached: it stays failed
    if refused_its_configuration(error):
        msg = f"{error}; {REFUSED}: fix the StreamingJob's spec, which submits it again"
        fields = status("Failed", False, "ConfigRefused", msg, state)
        return JobPlan(status={**fields, "nextRestartAt": None}, events=(Event("Warning", "ConfigRefused", msg),))
    decision = next_restart(job, parse_time(now))
    if decision is None:
        made = job.status.restarts if job.status else 0
        msg = f"{error}; not restarted: {made} restarts in a row (restart.maxAttempts)"
        fields = status("Failed", False, "RestartLimitReached", msg, state)
        return JobPlan(status={**fields, "nextRestartAt": None}, events=(Event("Warning", "RestartLimitReached", msg),))
    attempt, at = decision
    msg = f"{error}; restart {attempt} at {at} (spec.restart)"
    fields = status("BackingOff", False, "BackingOff", msg, state)
    return JobPlan(
        status={**fields, "restarts": attempt, "nextRestartAt": at},
        events=(Event("Warning", "BackingOff", msg),),
    )


def _move(
    job: StreamingJob,
    app: dict[str, Any] | None,
    state: str,
    drained: DrainedDriver | None,
    now: str,
    requests: Book,
    status: StatusOf,
) -> JobPlan | None:
    """The driver's node drained (``reconcile.node_drain``): a snapshot first, the application then
    deleted and submitted again (the next reconcile creates it, elsewhere: the node is
    cordoned). None: nothing to move, or moved (the rest of the decision applies)."""
    record = job.status.node_drain if job.status else None
    external = job.spec.checkpoints.external_location is not None
    if record is None or (drained is not None and record.pod != drained.pod and record.step != "Moving"):
        if drained is None or state != "RUNNING":
            return None
        nonce = drain_nonce(drained) if external else None
        record_fields = {"node": drained.node, "pod": drained.pod, "startedAt": now, "snapshotNonce": nonce}
        if nonce is not None:
            requests.request(nonce, "nodeDrain", now)
            msg = (
                f"node {drained.node} is drained: taking snapshot {nonce} before the driver moves off it "
                "(its PodDisruptionBudget holds the eviction meanwhile)"
            )
            return JobPlan(
                status={
                    **status("Draining", True, "Draining", msg, state),
                    "nodeDrain": {**record_fields, "step": "Snapshotting"},
                },
                events=(Event("Normal", "Draining", msg),),
            )
        how = "no spec.checkpoints.externalLocation to take a snapshot to: moving from its checkpoint alone"
        return _moving(record_fields, drained.node, how, state, status)
    if record.step == "Snapshotting":
        snapshot = requests.get(record.snapshot_nonce) if record.snapshot_nonce else None
        if snapshot is not None and snapshot.taken_at is None and snapshot.error is None:
            if state in ENDED_LIVE:  # failed on its own meanwhile: restarted as any failure, elsewhere
                ended = _ended(job, app, state, now, status)
                return replace(ended, status={**ended.status, "nodeDrain": None}) if ended.status else ended
            return JobPlan()  # the timer looks again
        if snapshot is not None and snapshot.taken_at is not None:
            ids = ", ".join(f"{k} batch {v}" for k, v in sorted(snapshot.batch_ids.items()))
            how = f"snapshot {snapshot.nonce} taken ({ids})"
        else:
            why = snapshot.error if snapshot is not None else "no answer"
            how = f"snapshot {record.snapshot_nonce} {why}: moving from its checkpoint alone"
        fields = record.model_dump(by_alias=True, exclude_none=True)
        return _moving(fields, record.node, how, state, status)
    # Moving: the old application goes (it may still show, ended or being deleted), the new one
    # is created once it is gone, and runs (the Running branch clears the record)
    if app is not None and (app.get("metadata", {}).get("deletionTimestamp") or created_before(app, record.started_at)):
        return JobPlan()
    return None


def _moving(record: dict[str, Any], node: str, how: str, state: str, status: StatusOf) -> JobPlan:
    msg = (
        f"node {node} is drained: {how}; the application is deleted and runs again from its checkpoint on another node"
    )
    return JobPlan(
        delete_app=True,
        status={**status("Restarting", False, "Drained", msg, state), "nodeDrain": {**record, "step": "Moving"}},
        events=(Event("Normal", "Moving", msg),),
    )


def created_before(app: dict[str, Any], when: str) -> bool:
    """Whether ``app`` was created before ``when`` (RFC 3339): the application a move deletes."""
    created = (app.get("metadata") or {}).get("creationTimestamp")
    return bool(created) and parse_time(str(created)) < parse_time(when)


def _create(job: StreamingJob, owner: Owner, cfg: JobConfig, digest: str, requests: Book, status: StatusOf) -> JobPlan:
    launch = job_launch(job, LIVE_RESTART)
    external = job.spec.checkpoints.external_location is not None
    return JobPlan(
        disruption_budget=driver_disruption_budget(owner),
        config_map=config_map(owner, cfg),
        create_app=spark_application(owner, cfg, launch, digest, control=external),
        control_map=control_map(owner, requests.open) if external else None,
        status=status("Submitted", False, "Submitted", "SparkApplication created", None),
        events=(Event("Normal", "Submitted", f"created SparkApplication {owner.app_name} (config {digest})"),),
    )


def _upgrade(
    job: StreamingJob,
    app: dict[str, Any] | None,
    running_hash: str | None,
    digest: str,
    now: str,
    requests: Book,
    status: StatusOf,
) -> JobPlan:
    """The running application has another config: upgrade it as spec.upgrade.mode says."""
    mode = job.spec.upgrade.mode
    up = job.status.upgrade if job.status else None
    state = app_state(app)
    if up is not None and up.to_hash == digest and up.step == "SnapshotFailed":
        return JobPlan()  # said once; the previous spec runs until the next edit
    if mode == "snapshot" and state not in ENDED_LIVE:  # an ended application takes no snapshot
        nonce = upgrade_nonce(digest)
        snapshot = requests.get(nonce)
        if snapshot is None or (snapshot.taken_at is None and snapshot.error is None):
            if snapshot is None:
                requests.request(nonce, "upgrade", now)
            msg = f"spec changed: taking snapshot {nonce} before the upgrade; the previous spec runs meanwhile"
            fields = status("Upgrading", state == "RUNNING", "Snapshotting", msg, state)
            first = up is None or up.to_hash != digest
            return JobPlan(
                status={**fields, "upgrade": upgrade_record(job, running_hash, digest, "Snapshotting", now)},
                events=(Event("Normal", "Snapshotting", msg),) if first else (),
            )
        if snapshot.error is not None:
            msg = f"upgrade to config {digest} not made: snapshot {nonce} {snapshot.error}; the previous spec runs"
            fields = status("Running", state == "RUNNING", "SnapshotFailed", msg, state)
            record = {**upgrade_record(job, running_hash, digest, "SnapshotFailed", now)}
            return JobPlan(status={**fields, "upgrade": record}, events=(Event("Warning", "UpgradeFailed", msg),))
    move = stateless_location(job) if mode == "stateless" else None
    if move is not None and job.metadata.annotations.get(CHECKPOINT_ANNOTATION) == move:
        move = None  # moved already (a retry)
    if move is not None:  # the config to come runs on the new checkpoint: that is its hash
        annotations = {**job.metadata.annotations, CHECKPOINT_ANNOTATION: move}
        moved = job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})
        digest = config_hash(streaming_job_config(moved))
    how = {
        "last-state": "restarting from the checkpoint",
        "stateless": "starting on an empty checkpoint (state dropped)",
        "snapshot": "snapshot taken; restarting from the checkpoint",
    }[mode]
    fields = status("Restarting", False, "SpecChanged", f"spec changed: {how}", None)
    return JobPlan(
        delete_app=True,
        move_checkpoint=move,
        status={**fields, "upgrade": upgrade_record(job, running_hash, digest, "Starting", now)},
        events=(Event("Normal", "SpecChanged", f"config {running_hash} -> {digest}: {how} ({mode} upgrade)"),),
    )


def _roll_back(job: StreamingJob, why: str, state: str, requests: Book, status: StatusOf) -> JobPlan:
    """The upgraded spec failed: run the last stable one again (and, in snapshot mode, rewind
    to the snapshot taken before the upgrade)."""
    assert job.status is not None and job.status.upgrade is not None
    up = job.status.upgrade
    snapshot = requests.get(up.snapshot_nonce) if up.snapshot_nonce else None
    rewind = rollback_rewind(job, snapshot)
    back = f"rolled back to config {job.status.last_stable_hash}"
    if rewind is not None:
        back += f" and snapshot {up.snapshot_nonce} (Rewind {rewind['metadata']['name']})"
    msg = f"{why}: {back}; the edited spec stays as written (edit it to try again)"
    fields = status("RollingBack", False, "RolledBack", msg, state)
    record = up.model_dump(by_alias=True, exclude_none=True) | {"step": "RolledBack"}
    return JobPlan(
        delete_app=True,
        create_rewind=rewind,
        status={**fields, "upgrade": record, "rolledBackGeneration": job.metadata.generation},
        events=(Event("Warning", "RolledBack", msg),),
    )


def _start_from_snapshot(job: StreamingJob, owner: Owner, seen: InitialSeen, status: StatusOf) -> JobPlan:
    """A new job's first step with ``spec.initialSnapshot``: choose each sink's snapshot (once,
    recorded), restore them into the live checkpoint with a restore application of the job's
    image and credentials, then (restored) run as any job does."""
    chosen = list(job.status.initial_restore) if job.status else []
    source = job.spec.initial_snapshot
    assert source is not None
    if not chosen:
        if isinstance(seen.points, str):
            msg = f"cannot start from the initial snapshot: {seen.points}"
            return JobPlan(
                status=status("Failed", False, "InitialSnapshotMissing", msg, None),
                events=(Event("Warning", "InitialSnapshotMissing", msg),),
            )
        chosen = list(seen.points or [])
        if not chosen:
            return JobPlan()  # not looked yet
    where = ", ".join(f"{p.sink} batch {p.batch_id}" for p in chosen)
    fields = {"initialRestore": [p.model_dump(by_alias=True) for p in chosen]}
    report, state = seen.report, app_state(seen.restore_app)
    if report is not None and report.state == "Restored" and state == "COMPLETED":
        msg = f"restored {where} from {source.location}: starting"
        done = status("Submitted", False, "InitialSnapshotRestored", msg, None)
        return JobPlan(
            delete_restore=True,
            status={**done, "initialSnapshotRestored": True},
            events=(Event("Normal", "InitialSnapshotRestored", msg),),
        )
    if (report is not None and report.state == "Failed") or state in ENDED_LIVE:
        why = (report.error if report is not None else None) or app_message(seen.restore_app) or state
        msg = f"restoring the initial snapshot ({where}) failed: {why}; delete the job's checkpoint and recreate it"
        return JobPlan(
            status={**status("Failed", False, "InitialRestoreFailed", msg, None), **fields},
            events=(Event("Warning", "InitialRestoreFailed", msg),),
        )
    if seen.restore_app is not None:
        return JobPlan(status={**status("Restoring", False, "Restoring", f"restoring {where}", None), **fields})
    cfg = initial_restore_config(job, chosen)
    digest = config_hash(cfg)
    app = spark_application(owner, cfg, job_launch(job, BACKFILL_RESTART), digest, command="restore")
    app["metadata"]["name"] = restore_app_name(owner)
    cm = config_map(owner, cfg)
    cm["metadata"]["name"] = restore_map_name(owner)
    app["spec"]["volumes"][0]["configMap"]["name"] = cm["metadata"]["name"]
    msg = f"restoring {where} from {source.location} before the first run"
    return JobPlan(
        restore=(cm, app),
        status={**status("Restoring", False, "Restoring", msg, None), **fields},
        events=(Event("Normal", "Restoring", msg),),
    )


def restore_app_name(owner: Owner) -> str:
    """The restore application of a job's initial snapshot."""
    return child_name("Restore", owner.app_name)


def restore_map_name(owner: Owner) -> str:
    return f"{restore_app_name(owner)}-jobconfig"
