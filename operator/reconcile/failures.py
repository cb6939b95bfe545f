"""What a handler's failure looks like on the object (pure): every failure a user can cause or
fix shows in ``status.message``, a condition and an Event, never only in the operator's log.

Three classes, as kopf sees them:

* permanent (a spec the models or the pipeline's config refuse): phase Failed, ``Stalled``
  True with reason ``InvalidSpec``; not retried, an edit of the spec is handled afresh;
* a name taken by someone else's object (``NameConflict``): retried, since the other object
  may go away, and said as such;
* transient (an unreachable catalog or object store, an API hiccup): retried by kopf with
  backoff; status shows the attempt, the last error and when the next try is, under
  ``Reconciling`` True with reason ``RetryingAfterError``. The next success clears them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kappa_operator.models.common import Condition
from kappa_operator.reconcile.conditions import Verdict, live, run_once, set_conditions

RETRY_DELAY = {"NameConflict": 60.0, "RetryingAfterError": 30.0}
"""Seconds before kopf tries a failed handler again, by reason."""
MESSAGE_LIMIT = 1024
"""An error's text in status and events is cut here (a stack of causes can be long)."""


@dataclass(frozen=True)
class Failure:
    reason: str
    """InvalidSpec | NameConflict | RetryingAfterError"""
    error: str
    attempt: int
    """1 for the first failure of this handler run, 2 for the first retry, ..."""

    @property
    def permanent(self) -> bool:
        return self.reason == "InvalidSpec"

    @property
    def message(self) -> str:
        text = self.error if len(self.error) <= MESSAGE_LIMIT else self.error[: MESSAGE_LIMIT - 3] + "..."
        if self.permanent:
            return text
        return f"{text} (attempt {self.attempt}; retrying in {RETRY_DELAY[self.reason]:.0f}s)"


def _conditions(status: dict[str, Any]) -> list[Condition]:
    out = []
    for c in status.get("conditions") or []:
        try:
            out.append(Condition.model_validate(c))
        except ValueError:
            continue  # a condition someone else wrote in another shape: not ours to keep
    return out


def failure_status(
    kind: str, status: dict[str, Any] | None, failure: Failure, now: str, generation: int | None
) -> dict[str, Any]:
    """The status fields to record for ``failure`` of an object of ``kind`` whose status is
    ``status`` (what the API server holds)."""
    status = status or {}
    previous = _conditions(status)
    if failure.permanent:
        phase = "Failed"
        wanted = live(False) if kind == "StreamingJob" else run_once(phase)
        wanted = {**wanted, "Stalled": True, "Reconciling": False}
    else:
        phase = status.get("phase") or "Pending"
        wanted = {"Reconciling": True}
    verdict = Verdict(phase, failure.reason, failure.message)
    conds = set_conditions(previous, wanted, verdict, now, generation)
    # a permanent failure fails the object; a transient one moves no phase (only sets a first one)
    phase_field = {"phase": phase} if failure.permanent or not status.get("phase") else {}
    return {
        **phase_field,
        "message": failure.message,
        "lastError": failure.error[:MESSAGE_LIMIT],
        "retries": 0 if failure.permanent else failure.attempt,
        "conditions": [c.model_dump(by_alias=True) for c in conds],
    }


def with_recovery(
    current: dict[str, Any] | None, written: dict[str, Any], now: str, generation: int | None
) -> dict[str, Any]:
    """``written`` (a handler's status write) plus the clearing of an earlier failure's fields,
    when ``current`` (the status on the server) still shows one: the next success says so."""
    current = current or {}
    if not current.get("retries") and not current.get("lastError"):
        return written
    previous = _conditions({"conditions": written.get("conditions", current.get("conditions"))})
    # a query's NoProgress (``reconcile.health``) is not a handler's failure: not cleared here
    wanted = {
        t: False for t in ("Reconciling", "Stalled") if any(c.type == t and c.reason != "NoProgress" for c in previous)
    }
    verdict = Verdict(
        str(written.get("phase") or current.get("phase") or ""), "Recovered", "the last attempt succeeded"
    )
    conds = set_conditions(previous, wanted, verdict, now, generation)
    return {**written, "retries": None, "lastError": None, "conditions": [c.model_dump(by_alias=True) for c in conds]}


def changes_nothing(current: dict[str, Any] | None, written: dict[str, Any]) -> bool:
    """Whether the merge patch ``written`` would leave the status ``current`` as it is: then it
    is not sent. Every status write is a write to etcd and an event to every watcher (kopf's
    own watch included, which re-runs the handlers that look at status); an application's
    event that moves nothing must not cost one. None removes a field, so None and absent agree."""
    current = current or {}
    return all(_pruned(current.get(key)) == _pruned(value) for key, value in written.items())


def _pruned(value: Any) -> Any:
    """``value`` as the server keeps it after a merge patch: no null fields in objects."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value
