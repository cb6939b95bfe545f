"""A bootstrapped StreamingJob's phase and ``status.bootstrap`` (pure).

The driver records the bootstrap next to its checkpoint (``spark_app.contract.reports.bootstrap``): the
archives' snapshots and where each topic takes over, then the switch. The progress timer copies
it into ``status.bootstrap``; the job's reconcile, the one writer of the phase, says
``Bootstrapping`` while the application runs and the switch is not recorded, ``Running`` after.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kappa_operator.models.streaming_job import StreamingJob
from spark_app.contract.reports.bootstrap import EARLIEST, BootstrapRecord

OFFSETS_SHOWN = 64
"""Partitions listed in ``status.bootstrap.offsets`` (a topic of hundreds lists its first ones)."""


def _time(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat().replace("+00:00", "Z")


def bootstrap_status(record: BootstrapRecord) -> dict[str, Any]:
    """``status.bootstrap`` from the driver's record."""
    offsets = [
        {"source": source, "topic": topic, "partition": p, "offset": None if o == EARLIEST else o}
        for source, topics in sorted(record.offsets.items())
        for topic, parts in sorted(topics.items())
        for p, o in sorted(parts.items())
    ]
    ends = [e for e in record.archive_end.values() if e is not None]
    return {
        "from": _time(record.start),
        "decidedAt": _time(record.decided_at),
        "archiveEnd": _time(max(ends)) if ends else None,
        "switchedAt": _time(record.switched_at),
        "offsets": offsets[:OFFSETS_SHOWN],
    }


def bootstrapping(job: StreamingJob) -> bool:
    """Whether a running application of the job still reads its archives: a bootstrap asked
    for whose switch is not recorded in the status yet."""
    if job.spec.bootstrap is None:
        return False
    seen = job.status.bootstrap if job.status else None
    return seen is None or seen.switched_at is None


def bootstrapping_message(job: StreamingJob) -> str:
    assert job.spec.bootstrap is not None
    seen = job.status.bootstrap if job.status else None
    until = f" (they end at {seen.archive_end})" if seen is not None and seen.archive_end else ""
    return f"reading the archives from {job.spec.bootstrap.start}{until}; Kafka takes over where each ends"


def switched_now(job: StreamingJob, fields: dict[str, Any]) -> bool:
    """The timer's new ``status.bootstrap`` records the switch the job's phase does not show
    yet: the reconcile must run (it writes the phase)."""
    new = fields.get("bootstrap") or {}
    return bool(new.get("switchedAt")) and job.status is not None and job.status.phase == "Bootstrapping"


def added_to_running(job: StreamingJob) -> str | None:
    """Why an edit that adds ``bootstrap`` to a job that ran without it cannot be made as it
    stands (None: it can). A bootstrap rebuilds state into a new checkpoint; the job's
    checkpoint was started without it, and its driver would refuse it after the old
    application was stopped. Said before anything stops."""
    status = job.status
    if job.spec.bootstrap is None or status is None or not status.last_stable_spec:
        return None
    if json.loads(status.last_stable_spec).get("bootstrap") or job.spec.upgrade.mode == "stateless":
        return None
    return (
        "spec.bootstrap was added to a job that has run without it: a bootstrap rebuilds state from the archives "
        "into a new checkpoint; make this edit with spec.upgrade.mode: stateless (the old checkpoint is kept for a "
        "Rewind), or remove bootstrap"
    )
