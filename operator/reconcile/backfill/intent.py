"""What a decision on a Backfill asks for (``BackfillIntent``: the objects to create or delete, the
group to join or leave, the status and Events), and the names and documents every step shares:
the annotations on its applications, its status at one instant (``StatusAt``), its owner, the
kept copy of its StreamingJob, its alignment group."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kappa_operator.coordinator.messages import GroupSpec
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import Condition
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.conditions import Verdict, run_once, set_conditions
from kappa_operator.reconcile.estimates import Run
from kappa_operator.reconcile.events import Event
from kappa_operator.render.jobconfig import backfill_branch
from kappa_operator.render.spark_application import (
    Owner,
)
from spark_app.contract.alignment import aligned_members
from spark_app.contract.config import JobConfig


@dataclass(frozen=True)
class BackfillIntent:
    config_map: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None
    """The backfill's coordinator credential (scoped to its alignment group)."""
    create_app: dict[str, Any] | None = None
    delete_app: bool = False
    """Delete the application (a restartNonce change: it is submitted again afterwards)."""
    join_group: GroupSpec | None = None
    """Declare this backfill's members in its alignment group (idempotent)."""
    leave_group: GroupSpec | None = None
    """Remove this backfill's members from its group (done, or deleted)."""
    delete_secret: bool = False
    """Remove its coordinator credential: nothing runs that could present it (it ended, or
    failed with its application stopped); a resubmission makes a new one."""
    create_publish_app: dict[str, Any] | None = None
    """The application validating and publishing the branch (its report decides the end)."""
    delete_publish_app: bool = False
    """Delete the publish application (a restartNonce change, or one of an earlier attempt)."""
    create_plan_app: dict[str, Any] | None = None
    """The application planning the backfill from metadata (spec.dryRun)."""
    record_calibration: Run | None = None
    """Add this finished backfill's throughput to the namespace's calibration ConfigMap."""
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    retry_after: float | None = None
    """Look again later (the job is missing)."""


#: A nonce on the application says which spec.restartNonce submitted it.
NONCE = "kappa.dev/restart-nonce"


#: On a backfill's application: the publish settings its driver validates and publishes with
#: once its query has written the window (JSON; absent: its driver does not publish).
PUBLISH = "kappa.dev/publish"


TERMINAL = ("Succeeded", "Failed")


SAVED_JOB = "streamingjob.json"
"""The ConfigMap key holding the StreamingJob as it was at submission."""


DONE = {
    "progress": "100%",
    "progressRatio": 1.0,
    "eta": None,
    "alignmentLag": None,
    "readRate": None,
    "readBytesPerSecond": None,
}
"""A finished backfill's progress fields (no stale ETA or lag from its last sample)."""


NO_PACE = {"eta": None, "progressAt": None}
"""While a failed application waits and restarts: no ETA, and no observation to take the next
one's rate from. Minutes of a restart between two observations made the first rate after it
near zero, and the ETA months ("318 days" seen on the node)."""


class StatusAt:
    """Status documents of one Backfill at one instant: conditions keep their transition times."""

    def __init__(self, bf: Backfill, now: str) -> None:
        self.bf, self.now = bf, now
        self.previous: list[Condition] = list(bf.status.conditions) if bf.status else []
        self.base: dict[str, Any] = {"observedGeneration": bf.metadata.generation, "branch": backfill_branch(bf)}

    def __call__(self, phase: str, reason: str, message: str, **extra: Any) -> dict[str, Any]:
        verdict = Verdict(phase, reason, message)
        conds = set_conditions(self.previous, run_once(phase), verdict, self.now, self.bf.metadata.generation)
        if phase == "Succeeded":  # the numbers people watch say done, not their last sample
            extra = {**DONE, **extra}
        elif phase == "Failed":
            extra = {"eta": None, **extra}
        return {
            **self.base,
            **extra,
            "phase": phase,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }

    def kept(self) -> dict[str, Any]:
        return self.bf.status.model_dump(by_alias=True, exclude_none=True) if self.bf.status else {}


def owner_of(bf: Backfill) -> Owner:
    return Owner("Backfill", bf.metadata.name, bf.metadata.namespace, bf.metadata.uid)


def saved_job(job: StreamingJob) -> str:
    """The StreamingJob a backfill was submitted with, as JSON: a Backfill keeps what it needs
    (its job's pipeline, catalogs, sinks), so deleting the job mid-run does not strand it."""
    meta = job.metadata
    keep = {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid, "annotations": meta.annotations}
    body = {"apiVersion": job.api_version, "kind": job.kind, "metadata": keep}
    return json.dumps({**body, "spec": job.spec.model_dump(by_alias=True, mode="json", exclude_none=True)})


def alignment_group(cfg: JobConfig) -> GroupSpec | None:
    """The members this backfill's driver reports as, in the group it shares (None: unordered)."""
    members = aligned_members(cfg)
    if not members:
        return None
    drift = cfg.alignment.effective_drift // timedelta(microseconds=1)
    return GroupSpec(name=cfg.alignment_group, members=members, max_drift_us=max(drift, 1))


def submitted_nonce(bf: Backfill) -> int | None:
    return bf.status.restart_nonce if bf.status is not None else None


def nonce_of(app: dict[str, Any]) -> str:
    return str(((app.get("metadata") or {}).get("annotations") or {}).get(NONCE, "0"))


def reason_of(bf: Backfill) -> str | None:
    """The reason of its Progressing condition (what it does now)."""
    st = bf.status
    found = next((c for c in st.conditions if c.type == "Progressing"), None) if st else None
    return found.reason if found is not None else None
