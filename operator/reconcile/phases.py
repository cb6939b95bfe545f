"""The SparkApplication's state (Kubeflow Spark Operator) as our phase and Ready condition."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from kappa_operator.reconcile.node_loss import driver_lost_prefix

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


def driver_pod(app: dict | None) -> str | None:
    """The name of a failed application's driver pod (None: it did not fail, or has none)."""
    if app is None or STATES.get(app_state(app) or "", ("",))[0] != "Failed":
        return None
    return ((app.get("status") or {}).get("driverInfo") or {}).get("podName") or None


def with_last_words(app: dict | None, words: str | None) -> dict | None:
    """The application as seen, its error message followed by its driver's last words: what
    the operator says in the object's condition (the Spark operator's own message names only
    the exit code)."""
    if app is None or not words:
        return app
    state = dict((app.get("status") or {}).get("applicationState") or {})
    error = state.get("errorMessage")
    state["errorMessage"] = f"{error}: {words}" if error else words
    return {**app, "status": {**(app.get("status") or {}), "applicationState": state}}


def app_state(app: dict | None) -> str | None:
    if app is None:
        return None
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def app_message(app: dict | None) -> str:
    """Its error message on one line, of a bounded length: a condition is read in `kubectl get`
    and `describe`, and spark-submit's output after a failed submission runs to many lines."""
    if app is None:
        return ""
    error = one_line(str(((app.get("status") or {}).get("applicationState") or {}).get("errorMessage") or ""))
    lost = driver_lost_prefix(app)  # the operator deleted its driver: its node was gone
    return f"{lost}: {error}" if lost and error else lost or error


MESSAGE_MAX = 1200


_FRAMES = re.compile(r"\n\s*(?:at [^\n]*|\.\.\. \d+ more)(?=\n|$)")
"""A Java stack trace's frames (spark-submit's output after a failed submission): what is left
are the exceptions' own messages, the causes among them."""


def one_line(text: str, limit: int = MESSAGE_MAX) -> str:
    """``text`` without stack frames, its whitespace collapsed; when longer than ``limit``, its
    start (what failed) and its end (the last error), joined by an ellipsis."""
    line = " ".join(_FRAMES.sub("", text).split())
    if len(line) <= limit:
        return line
    head = limit // 3
    return f"{line[:head]} ... {line[-(limit - head - 5) :]}"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
