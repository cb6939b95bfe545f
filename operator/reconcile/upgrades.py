"""What a spec change does to a running StreamingJob (pure), like the Flink Kubernetes
Operator's ``upgradeMode``: ``last-state`` restarts it from its checkpoint (state kept);
``stateless`` starts it on an empty checkpoint (state dropped, sources from
``startingPosition``); ``snapshot`` first has the running driver take a snapshot (the previous
spec keeps running until it is taken), then upgrades as last-state, so the snapshot is the
point a rollback restores.

Rollback (``spec.upgrade.rollback``): when the upgraded application fails, or does not reach
RUNNING within ``readyTimeout``, the operator runs the last spec that did reach RUNNING
(``status.lastStableSpec``) again, and says so; the edited spec stays as written (what the
user must fix), and the next edit is a new upgrade. In snapshot mode it also creates a Rewind
to the upgrade's snapshot: state and sink output go back to before the upgrade.

Every step is recorded in ``status.upgrade`` before its I/O: a restarted operator finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kappa_operator.models.common import API_VERSION, as_timedelta, instant, rfc3339
from kappa_operator.models.streaming_job import StreamingJob, StreamingJobSpec
from kappa_operator.models.streaming_job_status import SWITCH_UNDER_WAY, TakenSnapshot
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.job_intent import ENDED_LIVE, JobIntent, StatusOf
from kappa_operator.reconcile.phases import app_state
from kappa_operator.reconcile.snapshot_requests import Book
from kappa_operator.render.jobconfig import (
    CHECKPOINT_ANNOTATION,
    job_hash,
    streaming_job_config,
)


def effective(job: StreamingJob) -> StreamingJob:
    """The job with the spec it runs: green's from a blueGreen switch's start (blue stopping)
    until green runs as the job, whatever was edited meanwhile (its ``suspend`` is the job's:
    a stop waits for the switch, then applies); the last stable one while its current
    generation is rolled back; else its own."""
    status = job.status
    up = status.upgrade if status is not None else None
    if up is not None and up.step in SWITCH_UNDER_WAY and up.green_spec:
        green = StreamingJobSpec.model_validate_json(up.green_spec)
        return job.model_copy(update={"spec": green.model_copy(update={"suspend": job.spec.suspend})})
    if status is None or status.rolled_back_generation != job.metadata.generation or not status.last_stable_spec:
        return job
    return job.model_copy(update={"spec": StreamingJobSpec.model_validate_json(status.last_stable_spec)})


def edit_waiting(job: StreamingJob, ran: StreamingJob) -> str | None:
    """What the status says of an edit made while a blueGreen switch is under way (``effective``
    runs green's spec until green runs as the job), or None when there is none."""
    if ran.spec == job.spec:
        return None
    up = job.status.upgrade if job.status is not None else None
    if up is None or up.step not in SWITCH_UNDER_WAY:
        return None
    return (
        f"the edit of generation {job.metadata.generation} waits for the switch under way (step {up.step}): "
        "it upgrades from green's spec once green runs as the job"
    )


def stateless_location(job: StreamingJob) -> str:
    """An empty checkpoint for a stateless upgrade to ``job``'s generation (a directory of its
    own: the previous one stays, for a Rewind)."""
    return f"{job.spec.checkpoints.location.rstrip('/')}/live-g{job.metadata.generation}"


def upgrade_nonce(digest: str) -> str:
    return f"upgrade-{digest}"


def upgrade_record(job: StreamingJob, from_hash: str | None, to_hash: str, step: str, now: str) -> dict[str, Any]:
    snapshot = upgrade_nonce(to_hash) if job.spec.upgrade.mode == "snapshot" else None
    return {
        "mode": job.spec.upgrade.mode,
        "fromHash": from_hash,
        "toHash": to_hash,
        "step": step,
        "startedAt": now,
        **({"snapshotNonce": snapshot} if snapshot else {}),
    }


def stable_fields(job: StreamingJob, digest: str) -> dict[str, Any]:
    """The spec running now as the last stable one (what a rollback runs)."""
    status = job.status
    if status is not None and status.last_stable_hash == digest:
        return {}
    return {"lastStableHash": digest, "lastStableSpec": job.spec.model_dump_json(by_alias=True, exclude_none=True)}


def rollback_due(job: StreamingJob, digest: str, state: str, ended: bool, now: str) -> str | None:
    """Why the upgrade to ``digest`` must roll back now, or None."""
    status, spec = job.status, job.spec.upgrade
    if not spec.rollback or status is None or status.upgrade is None:
        return None
    up = status.upgrade
    if up.step != "Starting" or up.to_hash != digest:
        return None
    if not status.last_stable_spec or status.last_stable_hash == digest:
        return None  # nothing else ever ran: nothing to go back to
    if ended:
        return f"the upgraded application ended ({state})"
    late = instant(now) - instant(up.started_at) > as_timedelta(spec.ready_timeout)
    if state != "RUNNING" and late:
        return f"the upgraded application did not reach RUNNING within {spec.ready_timeout}"
    return None


def rollback_rewind(job: StreamingJob, snapshot: TakenSnapshot | None) -> dict[str, Any] | None:
    """The Rewind that takes state and output back to the upgrade's snapshot (mode snapshot,
    once it was taken), owned by the job."""
    if job.spec.upgrade.mode != "snapshot" or snapshot is None or snapshot.taken_at is None:
        return None
    meta = job.metadata
    if len(snapshot.batch_ids) == 1:
        target: dict[str, Any] = {"batchId": next(iter(snapshot.batch_ids.values()))}
    else:  # per sink, the newest snapshot before the request was answered: the previous spec's
        target = {"time": rfc3339(instant(snapshot.taken_at) + timedelta(seconds=1))}
    return {
        "apiVersion": API_VERSION,
        "kind": "Rewind",
        "metadata": {
            "name": f"{meta.name}-rollback-g{meta.generation}"[:253],
            "namespace": meta.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kappa-operator", "kappa.dev/streamingjob": meta.name},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "StreamingJob",
                    "name": meta.name,
                    "uid": meta.uid or "",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"jobRef": {"name": meta.name}, "target": target, "resetSinks": True},
    }


def upgrade(
    job: StreamingJob,
    app: dict[str, Any] | None,
    running_hash: str | None,
    digest: str,
    now: str,
    requests: Book,
    status: StatusOf,
    secret_versions: Mapping[str, str] | None = None,
) -> JobIntent:
    """The running application has another config: upgrade it as spec.upgrade.mode says.
    ``secret_versions``: those its config hash takes (``reconcile.kafka_secrets``)."""
    mode = job.spec.upgrade.mode
    up = job.status.upgrade if job.status else None
    state = app_state(app)
    if up is not None and up.to_hash == digest and up.step == "SnapshotFailed":
        return JobIntent()  # said once; the previous spec runs until the next edit
    if mode == "snapshot" and state not in ENDED_LIVE:  # an ended application takes no snapshot
        nonce = upgrade_nonce(digest)
        snapshot = requests.get(nonce)
        if snapshot is None or (snapshot.taken_at is None and snapshot.error is None):
            if snapshot is None:
                requests.request(nonce, "upgrade", now)
            msg = f"spec changed: taking snapshot {nonce} before the upgrade; the previous spec runs meanwhile"
            fields = status("Upgrading", state == "RUNNING", "Snapshotting", msg, state)
            first = up is None or up.to_hash != digest
            return JobIntent(
                status={**fields, "upgrade": upgrade_record(job, running_hash, digest, "Snapshotting", now)},
                events=(Event("Normal", "Snapshotting", msg),) if first else (),
            )
        if snapshot.error is not None:
            msg = f"upgrade to config {digest} not made: snapshot {nonce} {snapshot.error}; the previous spec runs"
            fields = status("Running", state == "RUNNING", "SnapshotFailed", msg, state)
            record = {**upgrade_record(job, running_hash, digest, "SnapshotFailed", now)}
            return JobIntent(status={**fields, "upgrade": record}, events=(Event("Warning", "UpgradeFailed", msg),))
    move = stateless_location(job) if mode == "stateless" else None
    if move is not None and job.metadata.annotations.get(CHECKPOINT_ANNOTATION) == move:
        move = None  # moved already (a retry)
    if move is not None:  # the config to come runs on the new checkpoint: that is its hash
        annotations = {**job.metadata.annotations, CHECKPOINT_ANNOTATION: move}
        moved = job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})
        digest = job_hash(moved, streaming_job_config(moved), secret_versions)
    how = {
        "last-state": "restarting from the checkpoint",
        "stateless": "starting on an empty checkpoint (state dropped)",
        "snapshot": "snapshot taken; restarting from the checkpoint",
    }[mode]
    fields = status("Restarting", False, "SpecChanged", f"spec changed: {how}", None)
    return JobIntent(
        delete_app=True,
        move_checkpoint=move,
        status={**fields, "upgrade": upgrade_record(job, running_hash, digest, "Starting", now)},
        events=(Event("Normal", "SpecChanged", f"config {running_hash} -> {digest}: {how} ({mode} upgrade)"),),
    )


def roll_back(job: StreamingJob, why: str, state: str, requests: Book, status: StatusOf) -> JobIntent:
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
    return JobIntent(
        delete_app=True,
        create_rewind=rewind,
        status={**fields, "upgrade": record, "rolledBackGeneration": job.metadata.generation},
        events=(Event("Warning", "RolledBack", msg),),
    )
