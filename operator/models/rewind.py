"""``Rewind`` (``rw``): restart a StreamingJob from an externalized checkpoint taken before an
outage, undo what its sinks wrote since, and optionally rewind the jobs that read those sinks.
An auditable operation, like a Job: it runs once and records what it did."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.backfill import JobRef
from kappa_operator.models.common import (
    API_VERSION,
    INT64_BOUND,
    CRModel,
    ObjectMeta,
    StatusBase,
    TimestampStr,
    exactly_one,
)

PHASES = ("Pending", "Stopping", "Restoring", "Resuming", "Succeeded", "Failed")


class RewindTarget(CRModel):
    """The point to go back to: a time, or a micro-batch id."""

    model_config = exactly_one("time", "batchId", "set exactly one of target.time, target.batchId")
    time: TimestampStr | None = None
    """Restore the newest snapshot committed before this time (RFC 3339)."""
    batch_id: int | None = Field(default=None, ge=0, le=INT64_BOUND)
    """Restore the newest snapshot at or before this micro-batch (single-sink jobs)."""

    @model_validator(mode="after")
    def _one(self) -> RewindTarget:
        if (self.time is None) == (self.batch_id is None):
            raise ValueError("set exactly one of target.time, target.batchId")
        return self


class RewindSpec(CRModel):
    """Immutable: a Rewind runs once."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec is immutable: a Rewind runs once, create a new Rewind"}
            ]
        }
    )
    job_ref: JobRef
    """The StreamingJob to rewind (same namespace)."""
    target: RewindTarget
    """Where to go back to."""
    reset_sinks: bool = True
    """Remove what the job's Iceberg sinks wrote after the restored batch (in a new snapshot)."""
    downstream: bool = False
    """Also rewind the StreamingJobs whose sources read this job's Iceberg sink tables."""


class SinkRestore(CRModel):
    """The restore point chosen for one sink's query, and what its reset did."""

    sink: str
    """The sink (one query each)."""
    batch_id: int
    """The snapshot's last committed batch: the query resumes at batch_id + 1."""
    committed_at: str
    """When that batch was committed."""
    query_id: str
    """The query whose later batches are undone."""
    table: str | None = None
    """The Iceberg table reset (iceberg sinks)."""
    files_removed: int | None = None
    """Data files the reset removed from the table (None: not reset yet)."""


class RewindStatus(StatusBase):
    """What the rewind did so far: enough to resume after an operator restart."""

    restores: list[SinkRestore] = []
    """The chosen restore point per sink."""
    restored_batch: int | None = None
    """The first sink's restored batch (the job resumes at the next one)."""
    checkpoint_location: str | None = None
    """The fresh checkpoint the job resumes from (the live one is never modified)."""
    restore_application_name: str | None = None
    """The SparkApplication restoring the snapshots and resetting the sinks (the job's
    credentials; the operator reads only its report)."""
    restore_application_state: str | None = None
    downstream: list[str] = []
    """Rewinds created for downstream jobs."""


class Rewind(CRModel):
    """A rewind of a StreamingJob to before an outage."""

    model_config = ConfigDict(extra="ignore")
    api_version: Literal["kappa.dev/v1alpha1"] = API_VERSION
    kind: Literal["Rewind"] = "Rewind"
    metadata: ObjectMeta
    spec: RewindSpec
    status: RewindStatus | None = None
