"""The SparkApplication's state (Kubeflow Spark Operator) as our phase and Ready condition."""

from __future__ import annotations

from datetime import UTC, datetime

#: applicationState.state -> (phase, ready, reason)
STATES: dict[str, tuple[str, bool, str]] = {
    "": ("Submitted", False, "Submitted"),
    "SUBMITTED": ("Submitted", False, "Submitted"),
    "PENDING_RERUN": ("Restarting", False, "PendingRerun"),
    "INVALIDATING": ("Restarting", False, "Invalidating"),
    "RESUMING": ("Starting", False, "Resuming"),
    "RUNNING": ("Running", True, "Running"),
    "SUCCEEDING": ("Running", True, "Succeeding"),
    "COMPLETED": ("Completed", False, "Completed"),
    "FAILING": ("Failed", False, "Failing"),
    "FAILED": ("Failed", False, "Failed"),
    "SUBMISSION_FAILED": ("Failed", False, "SubmissionFailed"),
    "SUSPENDING": ("Suspended", False, "Suspending"),
    "SUSPENDED": ("Suspended", False, "Suspended"),
    "UNKNOWN": ("Unknown", False, "Unknown"),
}

ENDED = ("COMPLETED", "FAILED", "SUBMISSION_FAILED")
"""Terminal states of an application that runs once (publish, restore): its report, or its
absence, is final then."""


def app_state(app: dict | None) -> str | None:
    if app is None:
        return None
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def app_message(app: dict | None) -> str:
    if app is None:
        return ""
    return str(((app.get("status") or {}).get("applicationState") or {}).get("errorMessage") or "")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
