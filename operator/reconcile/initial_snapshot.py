"""A new StreamingJob started from ``spec.initialSnapshot`` (pure): the snapshot per sink chosen
once from the manifests (recorded), restored into the live checkpoint by a restore application
of the job's image and credentials, then, restored, the job's first run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import RestorePointStatus
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.job_intent import ENDED_LIVE, JobIntent, StatusOf
from kappa_operator.reconcile.phases import app_message, app_state
from kappa_operator.render.jobconfig import (
    config_hash,
    initial_restore_config,
)
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    Owner,
    child_name,
    config_map,
    job_launch,
    spark_application,
)
from spark_app.contract.reports.restore import RestoreReport


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


def start_from_snapshot(job: StreamingJob, owner: Owner, seen: InitialSeen, status: StatusOf) -> JobIntent:
    """A new job's first step with ``spec.initialSnapshot``: choose each sink's snapshot (once,
    recorded), restore them into the live checkpoint with a restore application of the job's
    image and credentials, then (restored) run as any job does."""
    chosen = list(job.status.initial_restore) if job.status else []
    source = job.spec.initial_snapshot
    assert source is not None
    if not chosen:
        if isinstance(seen.points, str):
            msg = f"cannot start from the initial snapshot: {seen.points}"
            return JobIntent(
                status=status("Failed", False, "InitialSnapshotMissing", msg, None),
                events=(Event("Warning", "InitialSnapshotMissing", msg),),
            )
        chosen = list(seen.points or [])
        if not chosen:
            return JobIntent()  # not looked yet
    where = ", ".join(f"{p.sink} batch {p.batch_id}" for p in chosen)
    fields = {"initialRestore": [p.model_dump(by_alias=True) for p in chosen]}
    report, state = seen.report, app_state(seen.restore_app)
    if report is not None and report.state == "Restored" and state == "COMPLETED":
        msg = f"restored {where} from {source.location}: starting"
        done = status("Submitted", False, "InitialSnapshotRestored", msg, None)
        return JobIntent(
            delete_restore=True,
            status={**done, "initialSnapshotRestored": True},
            events=(Event("Normal", "InitialSnapshotRestored", msg),),
        )
    if (report is not None and report.state == "Failed") or state in ENDED_LIVE:
        why = (report.error if report is not None else None) or app_message(seen.restore_app) or state
        msg = f"restoring the initial snapshot ({where}) failed: {why}; delete the job's checkpoint and recreate it"
        return JobIntent(
            status={**status("Failed", False, "InitialRestoreFailed", msg, None), **fields},
            events=(Event("Warning", "InitialRestoreFailed", msg),),
        )
    if seen.restore_app is not None:
        return JobIntent(status={**status("Restoring", False, "Restoring", f"restoring {where}", None), **fields})
    cfg = initial_restore_config(job, chosen)
    digest = config_hash(cfg)
    app = spark_application(owner, cfg, job_launch(job, BACKFILL_RESTART), digest, command="restore")
    app["metadata"]["name"] = restore_app_name(owner)
    cm = config_map(owner, cfg)
    cm["metadata"]["name"] = restore_map_name(owner)
    app["spec"]["volumes"][0]["configMap"]["name"] = cm["metadata"]["name"]
    msg = f"restoring {where} from {source.location} before the first run"
    return JobIntent(
        restore=(cm, app),
        status={**status("Restoring", False, "Restoring", msg, None), **fields},
        events=(Event("Normal", "Restoring", msg),),
    )


def restore_app_name(owner: Owner) -> str:
    """The restore application of a job's initial snapshot."""
    return child_name("Restore", owner.app_name)


def restore_map_name(owner: Owner) -> str:
    return f"{restore_app_name(owner)}-jobconfig"
