"""Conditions as the Kubernetes API conventions describe them (pure).

Every kind reports ``Ready``. Backfill and Rewind run once, like a Job, and also report
``Progressing`` (working on it), and the terminal ``Succeeded`` and ``Failed``, so that
``kubectl wait --for=condition=Succeeded`` returns when the work is done and
``--for=condition=Failed`` when it will not be without a person. ``Ready`` of a run-once
kind means its result is ready (Succeeded): never True while only submitted, never True
after a failure. Each condition carries a CamelCase reason, a message, the generation it
was computed for, and a lastTransitionTime that moves only when its status changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kappa_operator.models.common import Condition

RUN_ONCE_TYPES = ("Ready", "Progressing", "Succeeded", "Failed")


@dataclass(frozen=True)
class Verdict:
    """The decision behind one status write: what the object is doing and why."""

    phase: str
    reason: str
    message: str


def set_conditions(
    previous: list[Condition], wanted: dict[str, bool], verdict: Verdict, now: str, generation: int | None
) -> list[Condition]:
    """``wanted``: type -> status. Types not named keep their previous entry (none are dropped
    silently: a client waiting on one must see it change, not vanish)."""
    out = {c.type: c for c in previous}
    for type_, ok in wanted.items():
        status = "True" if ok else "False"
        old = out.get(type_)
        since = old.last_transition_time if old is not None and old.status == status else now
        out[type_] = Condition(
            type=type_,
            status=status,
            reason=verdict.reason,
            message=verdict.message,
            last_transition_time=since,
            observed_generation=generation,
        )
    return list(out.values())


def run_once(phase: str, succeeded: str = "Succeeded", failed: str = "Failed") -> dict[str, bool]:
    """Backfill and Rewind: the four conditions for ``phase``."""
    done, broken = phase == succeeded, phase == failed
    return {
        "Ready": done,
        "Progressing": not (done or broken) and phase != "Pending",
        "Succeeded": done,
        "Failed": broken,
    }


def live(running: bool) -> dict[str, bool]:
    """StreamingJob: Ready while its application runs."""
    return {"Ready": running}
