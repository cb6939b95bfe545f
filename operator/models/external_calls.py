"""The rate limit on what a job's pipeline calls outside (``spark_app.external_calls``): the
StreamingJob's live limit and the one its Backfills get, a Backfill's own, and what the status
shows of the limit in force and the calls made.

Numbers only, bounded: a StreamingJob's spec is kept twice in annotations and its worst case is
near the size budget (``tests/unit/kappa_operator/models/test_schema_agreement.py``)."""

from __future__ import annotations

from pydantic import Field

from kappa_operator.models.common import CRModel

RATE_MIN = 0.001
"""One call every ~17 minutes: below that a limit is a schedule, not a rate."""
RATE_MAX = 1_000_000.0
"""A million calls per second for the whole job: above it no single driver hands out leases."""


class ExternalCalls(CRModel):
    """Calls per second the pipeline may make outside, for the whole job (every executor
    together). The pipeline takes a token per call from ``external_calls.limiter()``; unset:
    no limit."""

    rate_per_second: float | None = Field(default=None, ge=RATE_MIN, le=RATE_MAX)
    """The live job's limit."""
    backfill_rate_per_second: float | None = Field(default=None, ge=RATE_MIN, le=RATE_MAX)
    """The limit of each Backfill of this job (default: ratePerSecond). A Backfill replays
    history many times faster than it happened: this keeps the service's load where you set it
    while the live job calls too."""


class BackfillExternalCalls(CRModel):
    """This backfill's limit on the pipeline's external calls."""

    rate_per_second: float = Field(ge=RATE_MIN, le=RATE_MAX)
    """Calls per second for the whole backfill; replaces the job's backfillRatePerSecond. Read
    when its application is submitted: bump restartNonce to apply a change to a running one
    (it resumes from its checkpoint)."""


def backfill_rate(job: ExternalCalls | None, own: BackfillExternalCalls | None) -> float | None:
    """The limit a Backfill's run gets: its own, else its job's backfill limit, else the job's
    live limit (a backfill never calls faster than the live job may), else none."""
    if own is not None:
        return own.rate_per_second
    if job is None:
        return None
    return job.backfill_rate_per_second if job.backfill_rate_per_second is not None else job.rate_per_second


class ExternalCallsStatus(CRModel):
    """The limit in force and what the pipeline's calls did, from the driver's report
    (``_kappa/external-calls.json``, read every 30 s while the job has a limit)."""

    rate_per_second: float | None = None
    """The limit the running application enforces (calls per second, the whole job)."""
    observed_per_second: float | None = None
    """Calls per second over the last 30 s, as the executors counted them."""
    calls: int | None = None
    """Calls made by the running application (this run)."""
    waited_seconds: float | None = None
    """Time the pipeline's calls waited for the limit, summed over its tasks: large means the
    limit is what holds the job back."""
    at: str | None = None
    """When the driver wrote its report."""
