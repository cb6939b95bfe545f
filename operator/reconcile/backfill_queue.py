"""The Backfill queue (pure): which Backfills may run now. At most ``max_concurrent`` run at
once, and at most ``max_per_namespace`` in one namespace; the others wait in phase ``Queued``.

The queue is not kept anywhere: it is read from the Backfill objects every time (their phase,
``spec.priority``, creation time), so an operator restart finds the same queue in the same
order. Waiting backfills start highest priority first, then oldest; a waiting backfill whose
namespace is full does not hold back one of another namespace that fits. Running backfills
are never preempted: a new high-priority backfill waits for a slot like any other."""

from __future__ import annotations

from dataclasses import dataclass

ACTIVE = ("Running", "Publishing")
"""Phases that hold a slot: the backfill's application (or its publish application) runs."""
WAITING = ("Pending", "Queued", "Planned")
"""Phases of a backfill that would start if it had a slot (Planned: once dryRun is false)."""


@dataclass(frozen=True)
class QueueLimits:
    max_concurrent: int | None = None
    """Across the cluster (the operator's namespaces); None: no limit."""
    max_per_namespace: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_concurrent is None and self.max_per_namespace is None


@dataclass(frozen=True)
class Candidate:
    """What the queue needs of one Backfill."""

    namespace: str
    name: str
    phase: str
    priority: int = 0
    created: str = ""
    """metadata.creationTimestamp (RFC 3339 in UTC sorts as text)."""
    ready: bool = True
    """Would start now if admitted (False: dryRun, or waiting for its StreamingJob)."""

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass(frozen=True)
class Admitted:
    pass


@dataclass(frozen=True)
class Queued:
    position: int
    """1-based place among the waiting backfills, cluster-wide."""
    reason: str
    """Which limit holds it, with the numbers (for status, the condition and the event)."""


def queue_order(c: Candidate) -> tuple[int, str, str, str]:
    return -c.priority, c.created, c.namespace, c.name


def decide(me: Candidate, others: list[Candidate], limits: QueueLimits) -> Admitted | Queued:
    """Whether ``me`` may start now. ``others``: every other Backfill the operator sees (any
    phase; ``me`` among them is ignored). The waiting ones are given slots in queue order, as
    if all started at once; ``me`` is admitted if it gets one."""
    if limits.unlimited:
        return Admitted()
    rest = [c for c in others if c.key != me.key]
    active = [c for c in rest if c.phase in ACTIVE]
    total = len(active)
    per_ns: dict[str, int] = {}
    for c in active:
        per_ns[c.namespace] = per_ns.get(c.namespace, 0) + 1
    waiting = sorted([c for c in rest if c.phase in WAITING and c.ready] + [me], key=queue_order)
    for i, c in enumerate(waiting, start=1):
        cluster_full = limits.max_concurrent is not None and total >= limits.max_concurrent
        ns_full = limits.max_per_namespace is not None and per_ns.get(c.namespace, 0) >= limits.max_per_namespace
        if c.key == me.key:
            if not cluster_full and not ns_full:
                return Admitted()
            return Queued(i, _reason(me, cluster_full, limits, total, per_ns.get(me.namespace, 0), i))
        if not cluster_full and not ns_full:  # it starts before me
            total += 1
            per_ns[c.namespace] = per_ns.get(c.namespace, 0) + 1
    raise AssertionError("unreachable: me is in the queue")


def _reason(me: Candidate, cluster_full: bool, limits: QueueLimits, total: int, in_ns: int, position: int) -> str:
    if cluster_full:
        held = f"backfills.maxConcurrent {limits.max_concurrent} reached ({total} running or ahead in the queue)"
    else:
        held = (
            f"backfills.maxConcurrentPerNamespace {limits.max_per_namespace} reached in {me.namespace} "
            f"({in_ns} running or ahead in the queue)"
        )
    return f"queued at position {position} (priority {me.priority}): {held}"
