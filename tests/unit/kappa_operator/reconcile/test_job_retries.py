"""A StreamingJob whose restart failed on a step no kopf handler retries (its old application's
deletion event moved it; the new application was refused with a 500 while the spark-operator's
webhook restarted) is looked at again by the job's timer until a decision succeeds: a full test
run met it sitting in Restarting with no application."""

from __future__ import annotations

from typing import Any

from kappa_operator.handlers.streaming_job import waiting
from kappa_operator.reconcile.failures import Failure, failure_status, with_recovery

NOW = "2026-11-30T02:16:02Z"
RESTARTING: dict[str, Any] = {"phase": "Restarting", "reason": "BackOffElapsed", "restarts": 1}


def test_a_restarting_job_whose_new_application_was_refused_is_looked_at_again() -> None:
    assert not waiting(RESTARTING), "a restart under way waits for its application's events"
    refused = Failure("RetryingAfterError", "ApiException: (500) failed calling webhook", attempt=1)
    shown = {**RESTARTING, **failure_status("StreamingJob", RESTARTING, refused, NOW, 1)}
    assert shown["phase"] == "Restarting" and shown["retries"] == 1
    assert waiting(shown), "nothing else would try the application again"


def test_once_a_decision_succeeds_the_job_waits_for_nothing() -> None:
    refused = Failure("RetryingAfterError", "ApiException: (500)", attempt=2)
    shown = {**RESTARTING, **failure_status("StreamingJob", RESTARTING, refused, NOW, 1)}
    submitted = {"phase": "Submitted", "reason": "Submitted"}
    written = with_recovery(shown, submitted, NOW, 1)
    after = {k: v for k, v in {**shown, **written}.items() if v is not None}
    assert not waiting(after)


def test_a_backoff_and_a_pending_snapshot_still_wait() -> None:
    assert waiting({"phase": "BackingOff"})
    assert waiting({"phase": "Running", "snapshots": [{"requestedAt": NOW}]})
    assert not waiting({"phase": "Running", "snapshots": [{"requestedAt": NOW, "takenAt": NOW}]})
    assert not waiting(None)
