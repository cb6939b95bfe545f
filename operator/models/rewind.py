"""``Rewind`` (``rw``): restart a StreamingJob from an externalized checkpoint taken before an
outage, undo what its sinks wrote since, and optionally rewind the jobs that read those sinks.
An auditable operation, like a Job: it runs once and records what it did."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.backfill import JobRef
from kappa_operator.models.common import (
    API_VERSION,
    INT32_MAX,
    INT64_BOUND,
    SINKS_MAX,
    CRModel,
    ObjectMeta,
    StatusBase,
    TimestampStr,
)
from kappa_operator.models.streaming_job_status import RestorePointStatus

PHASES = ("Pending", "Stopping", "Restoring", "Resuming", "Succeeded", "Failed")


class RewindTarget(CRModel):
    """The point to go back to: a time, a micro-batch id, or (a job reading an upstream job's
    topic) the newest point that had read none of the records its Rewind skips."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.time) ? 1 : 0) + (has(self.batchId) ? 1 : 0) + "
                    "(has(self.beforeSkippedOffsets) && self.beforeSkippedOffsets ? 1 : 0) == 1",
                    "message": "set exactly one of target.time, target.batchId, target.beforeSkippedOffsets",
                }
            ]
        }
    )
    time: TimestampStr | None = None
    """Restore the newest snapshot committed before this time (RFC 3339)."""
    batch_id: int | None = Field(default=None, ge=0, le=INT64_BOUND)
    """Restore the newest snapshot at or before this micro-batch (single-sink jobs)."""
    before_skipped_offsets: bool | None = None
    """Restore the newest snapshot that had read no record of spec.skipOffsets: a job reading
    an upstream job's topic then re-reads what that job wrote before its restore point and
    skips what it wrote after (what a cascade sets; a time cannot say it when the jobs'
    batches are not in step)."""

    @model_validator(mode="after")
    def _one(self) -> RewindTarget:
        if (self.time is not None) + (self.batch_id is not None) + bool(self.before_skipped_offsets) != 1:
            raise ValueError("set exactly one of target.time, target.batchId, target.beforeSkippedOffsets")
        return self


SKIP_TOPICS_MAX = 4
"""Topics of a Rewind's skipOffsets (one per upstream Kafka sink a downstream job reads)."""
SKIP_PARTITIONS_MAX = 128
"""Partitions per topic in skipOffsets (keeps a maximal Rewind far below SPEC_JSON_MAX)."""


class PartitionRange(CRModel):
    """Offsets ``[start, end)`` of one partition."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": "self.end >= self.start", "message": "end < start"}]}
    )
    partition: int = Field(ge=0, le=INT32_MAX)
    start: int = Field(ge=0, le=INT64_BOUND)
    end: int = Field(ge=0, le=INT64_BOUND)

    @model_validator(mode="after")
    def _ordered(self) -> PartitionRange:
        if self.end < self.start:
            raise ValueError(f"partition {self.partition}: end {self.end} is before start {self.start}")
        return self


class TopicRanges(CRModel):
    """Records of one topic, by partition."""

    topic: str = Field(min_length=1, max_length=249)
    partitions: list[PartitionRange] = Field(min_length=1, max_length=SKIP_PARTITIONS_MAX)

    def flat(self) -> list[dict[str, int | str]]:
        """As the job's sources take them (``spark_app.contract.sources.OffsetRange``)."""
        return [
            {"topic": self.topic, "partition": r.partition, "start": r.start, "end": r.end} for r in self.partitions
        ]


class RewindSpec(CRModel):
    """Immutable: a Rewind runs once."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec is immutable: a Rewind runs once, create a new Rewind"},
                {
                    "rule": "!(has(self.target.beforeSkippedOffsets) && self.target.beforeSkippedOffsets) || "
                    "(has(self.skipOffsets) && size(self.skipOffsets) > 0)",
                    "message": "target.beforeSkippedOffsets needs spec.skipOffsets (the records to have read none of)",
                },
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
    """Also rewind the StreamingJobs that read this job's output: its Iceberg sink tables, or
    its Kafka sink topics (those skip exactly the records this job wrote after the restored
    batch, and resume at the first record it re-emits)."""
    skip_offsets: list[TopicRanges] = Field(default=[], max_length=SKIP_TOPICS_MAX)
    """Records of the topics the job reads that it must not process once resumed (a cascade
    Rewind fills it from its parent's restore: the output the upstream job wrote after its
    restored batch)."""

    @model_validator(mode="after")
    def _skipped(self) -> RewindSpec:
        if self.target.before_skipped_offsets and not self.skip_offsets:
            raise ValueError("target.beforeSkippedOffsets needs spec.skipOffsets (the records to have read none of)")
        return self


class SinkRestore(RestorePointStatus):
    """The restore point chosen for one sink's query, and what its reset did."""

    table: str | None = None
    """The Iceberg table reset (iceberg sinks)."""
    files_removed: int | None = None
    """Data files the reset removed from the table (None: not reset yet)."""
    undone_records: TopicRanges | None = None
    """A Kafka sink: the records its topic got after the restored batch (downstream jobs skip them)."""


class RewindStatus(StatusBase):
    """What the rewind did so far: enough to resume after an operator restart."""

    restores: list[SinkRestore] = Field(default=[], max_length=SINKS_MAX)
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
