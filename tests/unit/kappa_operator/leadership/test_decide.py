"""The election's decisions, race by race: who creates, renews, takes over or follows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kappa_operator.leadership.decide import (
    LeaseRecord,
    Observation,
    Step,
    Timing,
    decide,
    observe,
    released,
    still_leading,
)

T = Timing()
WALL = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def held_by(holder: str | None, renewed: datetime = WALL, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15, acquire_time=WALL, renew_time=renewed, transitions=transitions)


def test_no_lease_is_created_held_by_the_first_to_ask() -> None:
    d = decide(Observation(None, 0.0), "a", 0.0, WALL, T)
    assert d.step is Step.CREATE and d.record == LeaseRecord("a", 15, WALL, WALL, 0)


def test_the_holder_renews_with_a_new_renew_time_and_keeps_its_acquire_time() -> None:
    d = decide(Observation(held_by("a"), 0.0), "a", 30.0, datetime(2026, 12, 2, 11, tzinfo=UTC), T)
    assert d.step is Step.RENEW
    assert d.record is not None and d.record.acquire_time == WALL and d.record.renew_time.hour == 11


def test_another_holder_is_followed_until_its_record_stands_still_for_a_whole_lease() -> None:
    seen = Observation(held_by("a"), 100.0)
    assert decide(seen, "b", 114.9, WALL, T).step is Step.FOLLOW
    taken = decide(seen, "b", 115.0, WALL, T)
    assert taken.step is Step.TAKE_OVER and taken.record is not None
    assert taken.record.holder == "b" and taken.record.transitions == 1
    assert "a has not renewed for 15 s" in taken.reason


def test_expiry_is_judged_on_the_followers_clock_not_the_renew_time() -> None:
    """A renewTime an hour old (the leader's clock is behind) is not an expired Lease: only a
    record that stopped changing is."""
    stale_clock = held_by("a", renewed=datetime(2026, 12, 2, 9, 0, tzinfo=UTC))
    assert decide(Observation(stale_clock, 100.0), "b", 101.0, WALL, T).step is Step.FOLLOW


def test_a_renewal_restarts_the_followers_clock() -> None:
    first = observe(None, held_by("a"), 100.0)
    same = observe(first, held_by("a"), 110.0)
    assert same.since == 100.0
    renewed = observe(same, held_by("a", renewed=datetime(2026, 12, 2, 10, 0, 10, tzinfo=UTC)), 112.0)
    assert renewed.since == 112.0
    assert decide(renewed, "b", 120.0, WALL, T).step is Step.FOLLOW


def test_a_released_lease_is_taken_at_once() -> None:
    free = released(held_by("a", transitions=4), WALL)
    assert free.holder is None and free.lease_duration_s == 1
    d = decide(Observation(free, 100.0), "b", 100.0, WALL, T)
    assert d.step is Step.TAKE_OVER and d.record is not None and d.record.transitions == 5
    assert d.reason == "released"


def test_a_leader_stops_before_a_follower_may_take_over() -> None:
    """The renew deadline ends before the lease: the old leader has stopped for
    ``lease_duration - renew_deadline`` when the first follower may take over."""
    assert still_leading(100.0, 109.9, T)
    assert not still_leading(100.0, 110.0, T)
    assert T.lease_duration - T.renew_deadline >= 5


@pytest.mark.parametrize(("retry", "deadline", "duration"), [(2, 15, 15), (0, 10, 15), (10, 5, 15)])
def test_timings_that_could_let_two_lead_are_refused(retry: float, deadline: float, duration: float) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        Timing(lease_duration=duration, renew_deadline=deadline, retry_period=retry)
