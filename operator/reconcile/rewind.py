"""What to do for a Rewind (pure): a state machine as a dispatch of one small function per
phase, like the Spark operator's.

Pending -> Stopping -> Restoring -> Resuming -> Succeeded | Failed.

Each step returns the status to record *before* its I/O (the intent: a restarted operator
finds the phase and repeats the step, and every step is idempotent) and the commands to carry
out. Restore points are chosen once, in Pending, from the snapshot manifests (metadata), and
kept in status, so a retry restores the same batch even if newer snapshots appeared meanwhile.

The data work (copying each snapshot into a fresh checkpoint, undoing what the sinks wrote
after it) runs in a restore application the operator renders (``python -m spark_app
restore``, with the job's image, service account and credentials); the operator reads only
its report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kappa_operator.models.common import Condition
from kappa_operator.models.rewind import SKIP_PARTITIONS_MAX, PartitionRange, Rewind, SinkRestore, TopicRanges
from kappa_operator.models.sources import LiveSource
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import SWITCH_UNDER_WAY
from kappa_operator.reconcile.conditions import Verdict, run_once, set_conditions
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.phases import ENDED, app_message, app_state
from kappa_operator.render.jobconfig import (
    CHECKPOINT_ANNOTATION,
    PAUSED_ANNOTATION,
    SKIP_ANNOTATION,
    config_hash,
    restore_config,
    skipped_offsets,
)
from kappa_operator.render.spark_application import BACKFILL_RESTART, Owner, config_map, job_launch, spark_application
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.restore import RestoreReport, SinkRestored

TERMINAL = ("Succeeded", "Failed")


# --- commands the handler carries out (each idempotent) -----------------------------------


@dataclass(frozen=True)
class Pause:
    """Annotate the job so its application is deleted and not recreated."""

    by: str


@dataclass(frozen=True)
class RunRestore:
    """Apply the restore application's ConfigMap, then create the application (it copies the
    snapshots into the fresh checkpoint and undoes the sinks; the operator reads its report)."""

    config_map: dict[str, Any]
    app: dict[str, Any]


@dataclass(frozen=True)
class RewindDownstream:
    """Create these Rewinds (of the jobs reading this job's tables)."""

    manifests: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Resume:
    """Point the job at the restored checkpoint and let it run again (skipping ``skip``, the
    JSON of the offset ranges its Kafka sources must not process; None: none)."""

    location: str
    skip: str | None = None


Command = Pause | RunRestore | RewindDownstream | Resume


@dataclass(frozen=True)
class RewindIntent:
    status: dict[str, Any]
    """Recorded before the commands run."""
    commands: tuple[Command, ...] = ()
    next_phase: str | None = None
    """Record this phase once the commands succeeded (None: stay, look again later)."""
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Observed:
    """What the handler saw, for one decision."""

    job: StreamingJob | None
    app: dict[str, Any] | None
    """The job's SparkApplication."""
    chosen: tuple[SinkRestore, ...] | str = ()
    """Pending only: the restore point per sink, or why there is none."""
    expired: str | None = None
    """Pending only: why those points cannot resume from Kafka (retention), or None."""
    downstream: tuple[StreamingJob, ...] = ()
    """Restoring only: jobs whose sources read this job's Iceberg sink tables."""
    restore_app: dict[str, Any] | None = None
    """Restoring only: the restore application."""
    report: RestoreReport | None = None
    """Restoring only: its report, once it ended (None: none, or not ended yet)."""
    extra: dict[str, Any] = field(default_factory=dict)


def decide_rewind(rw: Rewind, seen: Observed, now: str) -> RewindIntent:
    phase = rw.status.phase if rw.status and rw.status.phase else "Pending"
    if phase in TERMINAL:
        return RewindIntent(status=_kept(rw))
    return STEPS[phase](rw, seen, _Status(rw, now))


class _Status:
    def __init__(self, rw: Rewind, now: str) -> None:
        self.rw, self.now = rw, now
        self.previous: list[Condition] = list(rw.status.conditions) if rw.status else []

    def __call__(self, phase: str, message: str, reason: str | None = None, **extra: Any) -> dict[str, Any]:
        verdict = Verdict(phase, reason or phase, message)
        generation = self.rw.metadata.generation
        conds = set_conditions(self.previous, run_once(phase), verdict, self.now, generation)
        return {
            "observedGeneration": generation,
            **extra,
            "phase": phase,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }


def _kept(rw: Rewind) -> dict[str, Any]:
    return rw.status.model_dump(by_alias=True, exclude_none=True) if rw.status else {}


def _restores(rw: Rewind) -> tuple[SinkRestore, ...]:
    return tuple(rw.status.restores) if rw.status else ()


def _location(rw: Rewind) -> str:
    assert rw.status is not None and rw.status.checkpoint_location is not None
    return rw.status.checkpoint_location


def owner_of(rw: Rewind) -> Owner:
    """The Rewind owns its restore application and that application's ConfigMap."""
    return Owner("Rewind", rw.metadata.name, rw.metadata.namespace, rw.metadata.uid)


def paused_by(rw: Rewind) -> str:
    return f"rewind/{rw.metadata.name}"


def restored_location(rw: Rewind, job: StreamingJob) -> str:
    """A fresh directory per Rewind object: the live checkpoint is never written to."""
    tag = (rw.metadata.uid or "local")[:8]
    return f"{job.spec.checkpoints.location.rstrip('/')}/rewinds/{rw.metadata.name}-{tag}"


# --- one function per phase ---------------------------------------------------------------


def _pending(rw: Rewind, seen: Observed, status: _Status) -> RewindIntent:
    job = seen.job
    if job is None:
        msg = f"StreamingJob {rw.spec.job_ref.name} not found in {rw.metadata.namespace}; waiting for it"
        return RewindIntent(status=status("Pending", msg, "JobNotFound"))
    up = job.status.upgrade if job.status else None
    if up is not None and up.step in SWITCH_UNDER_WAY:
        msg = (
            f"waiting for StreamingJob {job.metadata.name}'s blueGreen upgrade to finish its switch (step {up.step}): "
            "the restore points are then chosen on the checkpoint the job runs on"
        )
        return RewindIntent(status=status("Pending", msg, "UpgradeInProgress"))
    if isinstance(seen.chosen, str):
        msg = f"no restorable point: {seen.chosen}"
        return RewindIntent(
            status=status("Failed", msg, "NoRestorablePoint"), events=(Event("Warning", "NoRestorablePoint", msg),)
        )
    if seen.expired is not None:
        return RewindIntent(
            status=status("Failed", seen.expired, "KafkaOffsetsExpired"),
            events=(Event("Warning", "KafkaOffsetsExpired", seen.expired),),
        )
    points = ", ".join(f"{r.sink} batch {r.batch_id} ({r.committed_at})" for r in seen.chosen)
    msg = f"restoring {points}; stopping {job.metadata.name}"
    location = restored_location(rw, job)
    return RewindIntent(
        status=status(
            "Stopping",
            msg,
            restores=[r.model_dump(by_alias=True) for r in seen.chosen],
            restoredBatch=seen.chosen[0].batch_id,
            checkpointLocation=location,
        ),
        commands=(Pause(paused_by(rw)),),
        events=(Event("Normal", "Stopping", msg),),
    )


def _stopping(rw: Rewind, seen: Observed, status: _Status) -> RewindIntent:
    if seen.job is None:
        return _failed(status, "JobDeleted", f"StreamingJob {rw.spec.job_ref.name} was deleted during the rewind")
    up = seen.job.status.upgrade if seen.job.status else None
    if up is not None and up.step == "Promoting":  # it began switching as this Rewind stopped it
        why = (
            f"StreamingJob {rw.spec.job_ref.name} switched to green's checkpoint while this Rewind stopped it: the "
            f"restore points chosen are blue's; it stays stopped: delete this Rewind (it resumes on green's) and "
            "create it again"
        )
        return _failed(status, "UpgradedMeanwhile", why)
    if up is not None and up.step in SWITCH_UNDER_WAY:
        msg = f"waiting for {rw.spec.job_ref.name}'s blueGreen switch to finish (step {up.step}): only forward is safe"
        return RewindIntent(status=status("Stopping", msg), commands=(Pause(paused_by(rw)),))
    if seen.app is not None:  # the job's handler deletes it once it sees the annotation
        return RewindIntent(
            status=status("Stopping", f"waiting for SparkApplication {seen.job.metadata.name} to stop"),
            commands=(Pause(paused_by(rw)),),
        )
    msg = f"stopped; restoring into {_location(rw)}"
    return RewindIntent(status=status("Restoring", msg), events=(Event("Normal", "Restoring", msg),))


def _restoring(rw: Rewind, seen: Observed, status: _Status) -> RewindIntent:
    owner, job = owner_of(rw), seen.job
    extra: dict[str, Any] = {"restoreApplicationName": owner.app_name}
    points = ", ".join(f"{r.sink} batch {r.batch_id}" for r in _restores(rw))
    undo = " and undoing what the sinks wrote after them" if rw.spec.reset_sinks else ""
    if seen.restore_app is None:
        if job is None:
            return _failed(status, "JobDeleted", f"StreamingJob {rw.spec.job_ref.name} was deleted during the rewind")
        cfg = restore_config(rw, job, _restores(rw), _location(rw))
        app = spark_application(owner, cfg, job_launch(job, BACKFILL_RESTART), config_hash(cfg), command="restore")
        msg = f"SparkApplication {owner.app_name} restoring {points} into {_location(rw)}{undo}"
        return RewindIntent(
            status=status("Restoring", msg, restoreApplicationState="", **extra),
            commands=(RunRestore(config_map(owner, cfg), app),),
            events=(Event("Normal", "Restoring", msg),),
        )
    state = app_state(seen.restore_app) or ""
    extra["restoreApplicationState"] = state
    if state not in ENDED:
        msg = f"SparkApplication {owner.app_name} restoring {points}{undo}: it is {state or 'submitted'}"
        return RewindIntent(status=status("Restoring", msg, **extra))
    report = seen.report
    if report is None or report.state == "Failed":
        why = report.error if report is not None and report.error else None
        why = why or app_message(seen.restore_app) or f"it ended {state} without a report"
        return _failed(
            status,
            "RestoreFailed",
            f"restore failed: SparkApplication {owner.app_name}: {why}; {rw.spec.job_ref.name} stays stopped: "
            "delete this Rewind to resume it from its live checkpoint",
            **extra,
        )
    try:
        fields = after_restore(rw, report)
    except KappaError as exc:
        hint = f"; {rw.spec.job_ref.name} stays stopped: delete this Rewind to resume it from its live checkpoint"
        return _failed(status, "CascadeRefused", f"{exc}{hint}", **extra)
    commands: tuple[Command, ...] = ()
    if rw.spec.downstream and seen.downstream:
        restored = tuple(SinkRestore.model_validate(r) for r in fields["restores"])
        manifests = tuple(downstream_rewind(rw, j, restored) for j in seen.downstream)
        commands = (RewindDownstream(manifests),)
        fields["downstream"] = [m["metadata"]["name"] for m in manifests]
    removed = sum(r.files_removed for r in report.sinks)
    msg = f"restored {points} into {_location(rw)}" + (f"; sinks reset ({removed} file(s) removed)" if undo else "")
    return RewindIntent(
        status=status("Restoring", msg, **extra, **fields),
        commands=commands,
        next_phase="Resuming",
        events=(Event("Normal", "Restored", msg),),
    )


def _resuming(rw: Rewind, seen: Observed, status: _Status) -> RewindIntent:
    job = seen.job
    if job is None:
        return _failed(status, "JobDeleted", f"StreamingJob {rw.spec.job_ref.name} was deleted during the rewind")
    location = _location(rw)
    moved = job.metadata.annotations.get(CHECKPOINT_ANNOTATION) == location
    paused = job.metadata.annotations.get(PAUSED_ANNOTATION) == paused_by(rw)
    skip = skip_annotation(job, rw)
    skipped = skip is None or job.metadata.annotations.get(SKIP_ANNOTATION) == skip
    ranges = sum(len(t.partitions) for t in rw.spec.skip_offsets)
    skipping = f", skipping {ranges} offset range(s) its upstream job wrote after its restore point" if ranges else ""
    if moved and skipped and not paused and seen.app is not None:
        msg = f"{job.metadata.name} resumed from {location}{skipping}"
        return RewindIntent(status=status("Succeeded", msg, "Resumed"), events=(Event("Normal", "Resumed", msg),))
    return RewindIntent(
        status=status("Resuming", f"starting {job.metadata.name} from {location}{skipping}"),
        commands=(Resume(location, skip),),
    )


def skip_annotation(job: StreamingJob, rw: Rewind) -> str | None:
    """The job's skip annotation once this Rewind's ranges are in it (earlier Rewinds' ranges
    stay: records undone once stay undone), or None when the Rewind skips nothing."""
    new = [r for t in rw.spec.skip_offsets for r in t.flat()]
    if not new:
        return None
    kept = skipped_offsets(job)
    return json.dumps(kept + [r for r in new if r not in kept], separators=(",", ":"))


def _failed(status: _Status, reason: str, msg: str, **extra: Any) -> RewindIntent:
    return RewindIntent(status=status("Failed", msg, reason, **extra), events=(Event("Warning", reason, msg),))


def step_failed(rw: Rewind, phase: str, error: str, now: str) -> RewindIntent:
    """A step refused for good (a snapshot gone, an undo that would be partial): Failed, with
    what was done so far kept in status, so a person can see where it stopped."""
    hint = f"; {rw.spec.job_ref.name} stays stopped: delete this Rewind to resume it from its live checkpoint"
    return _failed(_Status(rw, now), f"{phase}Failed", f"{phase}: {error}{hint}")


STEPS: dict[str, Callable[[Rewind, Observed, _Status], RewindIntent]] = {
    "Pending": _pending,
    "Stopping": _stopping,
    "Restoring": _restoring,
    "Resuming": _resuming,
}


def after_restore(rw: Rewind, report: RestoreReport) -> dict[str, Any]:
    """Status fields from the restore application's report: per sink, the table reset and the
    data files its undo removed, or the Kafka records written after the restored batch."""
    done = {s.sink: s for s in report.sinks}
    restores = [_restored(r, done[r.sink]) if r.sink in done else r for r in _restores(rw)]
    return {"restores": [r.model_dump(by_alias=True, exclude_none=True) for r in restores]}


def _restored(point: SinkRestore, done: SinkRestored) -> SinkRestore:
    undone = None
    if done.undone_records:
        parts = [PartitionRange(partition=r.partition, start=r.start, end=r.end) for r in done.undone_records]
        if len(parts) > SKIP_PARTITIONS_MAX:  # never a partial skip: downstream would process the rest
            raise KappaError(
                f"sink {point.sink}: topic {done.undone_records[0].topic} got records after batch {point.batch_id} "
                f"in {len(parts)} partitions, more than a Rewind's skipOffsets holds ({SKIP_PARTITIONS_MAX}); "
                "rewind the jobs reading it by hand"
            )
        undone = TopicRanges(topic=done.undone_records[0].topic, partitions=parts)
    return point.model_copy(update={"table": done.table, "files_removed": done.files_removed, "undone_records": undone})


# --- downstream jobs ------------------------------------------------------------------------


def _servers(bootstrap: str | None) -> frozenset[str]:
    return frozenset(h.strip().lower() for h in (bootstrap or "").split(",") if h.strip())


def _subscribes(src: LiveSource, topic: str) -> bool:
    if src.kind != "kafka":
        return False
    return src.topic == topic or (src.topic_pattern is not None and re.fullmatch(src.topic_pattern, topic) is not None)


def _reads_topic(src: LiveSource, bootstrap: str | None, topic: str) -> bool:
    return bool(_servers(src.bootstrap_servers) & _servers(bootstrap)) and _subscribes(src, topic)


def kafka_topics_read(job: StreamingJob, other: StreamingJob) -> set[str]:
    """The topics of ``job``'s Kafka sinks that ``other`` reads live (same brokers)."""
    return {
        str(s.topic)
        for s in job.spec.sinks.values()
        if s.kind == "kafka"
        for src in other.spec.sources.values()
        if _reads_topic(src.live, s.bootstrap_servers, str(s.topic))
    }


def reads_from(job: StreamingJob, other: StreamingJob) -> bool:
    """Does ``other`` read ``job``'s output live: one of its Iceberg sink tables (same catalog,
    same table), or one of its Kafka sink topics (same brokers)?"""
    if kafka_topics_read(job, other):
        return True
    written = {
        (tuple(sorted(job.spec.catalogs[s.catalog].items())), s.table)
        for s in job.spec.sinks.values()
        if s.kind == "iceberg" and s.catalog in job.spec.catalogs
    }
    return any(
        (tuple(sorted(other.spec.catalogs[s.live.catalog].items())), s.live.table) in written
        for s in other.spec.sources.values()
        if s.live.kind == "icebergLive" and s.live.catalog in other.spec.catalogs
    )


def downstream_of(job: StreamingJob, jobs: list[StreamingJob]) -> tuple[StreamingJob, ...]:
    return tuple(j for j in jobs if j.metadata.name != job.metadata.name and reads_from(job, j))


def downstream_rewind(rw: Rewind, job: StreamingJob, restored: tuple[SinkRestore, ...] | None = None) -> dict[str, Any]:
    """A child Rewind of a downstream job, to before the earliest output this rewind removes.
    A job reading this job's topics goes back to the newest point that had read none of the
    records this rewind undid, and skips them when it resumes (a topic cannot be undone): it
    re-reads what was written before them and goes on at the first record re-emitted."""
    restored = _restores(rw) if restored is None else restored
    cut = min(r.committed_at for r in restored)
    skip = [
        r.undone_records.model_dump(by_alias=True)
        for r in restored
        if r.undone_records is not None
        and any(_subscribes(src.live, r.undone_records.topic) for src in job.spec.sources.values())
    ]
    name = f"{rw.metadata.name}-{job.metadata.name}"[:63].rstrip("-")
    return {
        "apiVersion": "kappa.dev/v1alpha1",
        "kind": "Rewind",
        "metadata": {
            "name": name,
            "namespace": rw.metadata.namespace,
            "labels": {"kappa.dev/rewind-parent": rw.metadata.name},
            "ownerReferences": [
                {
                    "apiVersion": "kappa.dev/v1alpha1",
                    "kind": "Rewind",
                    "name": rw.metadata.name,
                    "uid": rw.metadata.uid or "",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "jobRef": {"name": job.metadata.name},
            "target": {"beforeSkippedOffsets": True} if skip else {"time": cut},
            "resetSinks": rw.spec.reset_sinks,
            "downstream": rw.spec.downstream,
            **({"skipOffsets": skip} if skip else {}),
        },
    }
