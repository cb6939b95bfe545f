"""When to restart a failed live application (pure): exponential backoff with a cap, as Flink's
``exponential-delay`` restart strategy, instead of the Spark operator's fixed interval forever.

A job that fails again soon after a restart waits longer each time (``initialBackoff`` x
``multiplier`` ^ (attempt - 1), at most ``maxBackoff``): a broken dependency is not hammered,
and a crash loop shows as growing delays in status. A failure after the job ran
``resetAfter`` is a first failure again: one bad hour a week never reaches the cap.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import as_timedelta, instant
from kappa_operator.models.streaming_job import RestartSpec, StreamingJob
from spark_app.contract.errors import EXIT_REFUSED

_EXIT_CODE = re.compile(r"driver container failed with ExitCode: (\d+)")
"""How the Spark operator names a failed driver's exit code in the application's error."""

REFUSED = f"not restarted: the driver refused its configuration (exit code {EXIT_REFUSED}) and would refuse it again"


def refused_its_configuration(error: str) -> bool:
    """Whether the driver exited because its configuration is wrong (a missing pipeline module,
    a warm-up shorter than the pipeline's look-back, ...): only a change of spec fixes that, so
    restarting it would only repeat the error with growing delays."""
    found = _EXIT_CODE.search(error)
    return found is not None and int(found.group(1)) == EXIT_REFUSED


SUBMITTED_TWICE = "failed to run spark-submit: driver pod already exist"
"""How the Spark operator fails a submission that finds the application's driver pod there: its
own second submission of the same application (its status write after the first was lost, as
when its controller moved to another node: kubeflow/spark-operator#2788), or the pod of the
application's previous run not deleted yet."""


def submitted_twice(error: str) -> bool:
    """Whether the application failed at submission because its driver pod already existed: a
    failure of the submission, not of the job. The restart after it does not count against
    ``maxAttempts``: a job or Backfill whose Spark operator moved while it restarted is not given up."""
    return SUBMITTED_TWICE in error


def uncounted(error: str) -> str:
    """What a restart's message adds when ``submitted_twice``."""
    return ", not counted: the submission failed, not the job" if submitted_twice(error) else ""


def backoff(spec: RestartSpec, attempt: int) -> timedelta:
    """The delay before restart ``attempt`` (1 for the first)."""
    initial, cap = as_timedelta(spec.initial_backoff), as_timedelta(spec.max_backoff)
    grown = initial.total_seconds() * spec.multiplier ** min(attempt - 1, 64)
    return timedelta(seconds=min(grown, cap.total_seconds()))


def attempt_after_failure(job: StreamingJob, now: datetime, counted: bool = True) -> int:
    """The restart this failure asks for: one more than before, or the first again when the
    application had been running for ``resetAfter`` (its Ready condition says since when).
    Not ``counted`` (``submitted_twice``): the same attempt again."""
    status = job.status
    if status is None:
        return 1
    ready = next((c for c in status.conditions if c.type == "Ready"), None)
    ran = ready is not None and ready.status == "True" and ready.last_transition_time
    if ran and now - instant(str(ready.last_transition_time)) >= as_timedelta(job.spec.restart.reset_after):
        return 1
    return next_attempt(status.restarts, counted)


def next_attempt(restarts: int, counted: bool) -> int:
    return restarts + 1 if counted else max(restarts, 1)


def next_restart(job: StreamingJob, now: datetime, counted: bool = True) -> tuple[int, str] | None:
    """(attempt, when as RFC 3339), or None when ``maxAttempts`` restarts in a row were made."""
    return scheduled(job.spec.restart, attempt_after_failure(job, now, counted), now)


def next_backfill_restart(bf: Backfill, now: datetime, counted: bool = True) -> tuple[int, str] | None:
    """The same for a backfill's failed application: one more than its restarts so far, or the
    first again when the failed application had run ``resetAfter`` (a long backfill that
    fails once every few hours is not given up on). Not ``counted`` (``submitted_twice``): the
    same attempt again, with its backoff."""
    status = bf.status
    started = status.started_at if status is not None else None
    ran = started is not None and now - instant(started) >= as_timedelta(bf.spec.restart.reset_after)
    if status is None or ran:
        return scheduled(bf.spec.restart, 1, now)
    return scheduled(bf.spec.restart, next_attempt(status.restarts, counted), now)


def scheduled(spec: RestartSpec, attempt: int, now: datetime) -> tuple[int, str] | None:
    limit = spec.max_attempts
    if limit is not None and attempt > limit:
        return None
    at = (now + backoff(spec, attempt)).astimezone(UTC)
    return attempt, at.strftime("%Y-%m-%dT%H:%M:%SZ")
