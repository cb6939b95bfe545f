"""What a replica does with the Lease it just read: a pure function of the record, who this
replica is and two clocks, so every race is a unit test.

Expiry is judged on this replica's own monotonic clock from when it first saw the record as it
is (client-go's ``observedTime``), never by comparing ``renewTime`` with local wall time: two
machines' clocks may disagree by more than a lease lasts."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum


@dataclass(frozen=True)
class Timing:
    """client-go's defaults, which kube-controller-manager and the Kubeflow spark-operator use.

    A leader that cannot renew for ``renew_deadline`` stops leading; the others take the Lease
    over ``lease_duration`` after they last saw it change, so the old leader has stopped
    (``lease_duration - renew_deadline``, 5 s, of margin) before a new one starts."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election timing: need 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period} < {self.renew_deadline} < {self.lease_duration}"
            )


DEFAULT_TIMING = Timing()


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as the election reads and writes it."""

    holder: str | None
    lease_duration_s: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0

    @property
    def released(self) -> bool:
        return not self.holder


class Step(StrEnum):
    CREATE = "create"
    """No Lease yet: create it, held by this replica."""
    RENEW = "renew"
    """This replica holds it: write a new renewTime."""
    TAKE_OVER = "take-over"
    """Released, or not renewed for its whole duration: write this replica as holder."""
    FOLLOW = "follow"
    """Another replica holds it: write nothing, read again later."""


@dataclass(frozen=True)
class Decision:
    step: Step
    record: LeaseRecord | None
    """What to write (None: nothing)."""
    reason: str


@dataclass(frozen=True)
class Observation:
    """The Lease as last read, and when (this replica's monotonic clock) it was first seen so:
    a record that does not change is a leader that does not renew."""

    record: LeaseRecord | None
    since: float


def observe(previous: Observation | None, record: LeaseRecord | None, now: float) -> Observation:
    """Keep the first time this record was seen; a changed record restarts the clock."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def decide(seen: Observation, me: str, now: float, wall: datetime, timing: Timing) -> Decision:
    """The next write to the Lease, if any, for replica ``me``."""
    record = seen.record
    duration = round(timing.lease_duration)
    if record is None:
        mine = LeaseRecord(me, duration, acquire_time=wall, renew_time=wall, transitions=0)
        return Decision(Step.CREATE, mine, "no Lease yet")
    if record.holder == me:
        return Decision(Step.RENEW, replace(record, lease_duration_s=duration, renew_time=wall), "held by this replica")
    expired = now - seen.since >= record.lease_duration_s
    if record.released or expired:
        why = "released" if record.released else f"{record.holder} has not renewed for {record.lease_duration_s} s"
        taken = LeaseRecord(me, duration, acquire_time=wall, renew_time=wall, transitions=record.transitions + 1)
        return Decision(Step.TAKE_OVER, taken, why)
    left = record.lease_duration_s - (now - seen.since)
    return Decision(Step.FOLLOW, None, f"held by {record.holder} (expires in {left:.0f} s unless renewed)")


def still_leading(last_renewed: float, now: float, timing: Timing) -> bool:
    """A leader that has not renewed within ``renew_deadline`` must stop before anyone may take
    the Lease over: it cannot know whether its last write arrived."""
    return now - last_renewed < timing.renew_deadline


def released(record: LeaseRecord, wall: datetime) -> LeaseRecord:
    """What a leader leaving on purpose writes: no holder, so a follower takes over at its next
    read instead of a whole lease duration later (client-go's ``ReleaseOnCancel``)."""
    return replace(record, holder=None, lease_duration_s=1, renew_time=wall)
