"""Snapshots the operator asks a running job for (pure): the trigger nonce and the snapshot
before an upgrade, as requests to its driver (``spark_app.contract.snapshot_requests``) and as
``status.snapshots``, the history a user picks from (a Rewind's ``target.batchId``, a new
job's ``initialSnapshot``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kappa_operator.models.common import as_timedelta, instant, rfc3339
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import TakenSnapshot
from spark_app.contract.snapshot_requests import Answer

HISTORY = 10
"""Snapshots kept in status (the newest; the open ones always)."""

Answers = dict[str, dict[str, Answer]]
"""nonce -> sink -> the driver's answer (what the handler read for the open requests)."""


@dataclass
class Book:
    """The job's requested snapshots as this reconcile leaves them."""

    entries: list[TakenSnapshot]
    added: list[str] = field(default_factory=list)
    """Nonces requested by this reconcile (the control ConfigMap must carry them)."""
    changed: bool = False
    trigger_nonce: int | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(type, reason, message) of Events."""

    def get(self, nonce: str) -> TakenSnapshot | None:
        return next((e for e in self.entries if e.nonce == nonce), None)

    def request(self, nonce: str, reason: str, now: str) -> TakenSnapshot:
        found = self.get(nonce)
        if found is not None:
            return found
        entry = TakenSnapshot(reason=reason, nonce=nonce, requested_at=now)  # type: ignore[arg-type]
        self.entries.append(entry)
        self.added.append(nonce)
        self.changed = True
        return entry

    @property
    def open(self) -> list[str]:
        return [e.nonce for e in self.entries if e.taken_at is None and e.error is None]

    def status(self) -> dict[str, Any]:
        if not self.changed:
            return {}
        pending = set(self.open)
        done = [e.nonce for e in self.entries if e.nonce not in pending]
        room = max(HISTORY - len(pending), 0)
        kept = pending | set(done[len(done) - room :] if room else [])
        ordered = [e for e in self.entries if e.nonce in kept]
        out: dict[str, Any] = {"snapshots": [e.model_dump(by_alias=True, exclude_none=True) for e in ordered]}
        if self.trigger_nonce is not None:
            out["snapshotTriggerNonce"] = self.trigger_nonce
        return out


def book(job: StreamingJob, answers: Answers | None, now: str) -> Book:
    """The history with the driver's answers folded in, a new trigger requested, and requests
    unanswered past ``spec.upgrade.snapshotTimeout`` given up (said, never silently)."""
    status = job.status
    b = Book(list(status.snapshots) if status else [])
    external = job.spec.checkpoints.external_location
    sinks = sorted(job.spec.sinks)
    timeout = as_timedelta(job.spec.upgrade.snapshot_timeout)
    for i, entry in enumerate(b.entries):
        if entry.taken_at is not None or entry.error is not None:
            continue
        got = (answers or {}).get(entry.nonce, {})
        if sinks and all(s in got for s in sinks):
            b.entries[i] = entry.model_copy(
                update={
                    "taken_at": rfc3339(max(got[s].taken_at for s in sinks)),
                    "batch_ids": {s: got[s].batch_id for s in sinks},
                    "location": external,
                }
            )
            b.changed = True
            ids = ", ".join(f"{s} batch {got[s].batch_id}" for s in sinks)
            b.events.append(("Normal", "SnapshotTaken", f"snapshot {entry.nonce} ({entry.reason}): {ids}"))
        elif instant(now) - instant(entry.requested_at) > timeout:
            msg = f"not taken within {job.spec.upgrade.snapshot_timeout} (is the job running? its driver log says)"
            b.entries[i] = entry.model_copy(update={"error": msg})
            b.changed = True
            b.events.append(("Warning", "SnapshotFailed", f"snapshot {entry.nonce}: {msg}"))
    wanted = job.spec.snapshot_trigger_nonce
    if wanted is not None and wanted != (status.snapshot_trigger_nonce if status else None):
        b.request(f"trigger-{wanted}", "trigger", now)
        b.trigger_nonce = wanted
    return b
