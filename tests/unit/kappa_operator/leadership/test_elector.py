"""The election loop over an in-memory Lease that keeps the API server's one rule: a write
carrying an old resourceVersion is refused (409). The same loop against a real API server:
tests/cluster/test_leader_election_on_server.py."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from kappa_operator.leadership.decide import LeaseRecord, Step, Timing
from kappa_operator.leadership.elector import LeaderElector

FAST = Timing(lease_duration=2.0, renew_deadline=1.5, retry_period=0.1)
SOON = 10.0
"""How long a test waits for what must happen (generous: a loaded machine delays threads)."""


@dataclass
class MemoryLease:
    record: LeaseRecord | None = None
    version: int = 0
    down: bool = False
    """The API server unreachable: every call raises."""
    writes: list[str] = field(default_factory=list)
    namespace: str = "ops"
    name: str = "kappa-operator"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self) -> tuple[LeaseRecord | None, str | None]:
        with self.lock:
            if self.down:
                raise ConnectionError("connection refused")
            return self.record, None if self.record is None else str(self.version)

    def create(self, record: LeaseRecord) -> bool:
        with self.lock:
            if self.down:
                raise ConnectionError("connection refused")
            if self.record is not None:
                return False
            self.record, self.version = record, 1
            self.writes.append(str(record.holder))
            return True

    def update(self, record: LeaseRecord, version: str) -> bool:
        with self.lock:
            if self.down:
                raise ConnectionError("connection refused")
            if version != str(self.version):
                return False
            self.record, self.version = record, self.version + 1
            self.writes.append(str(record.holder))
            return True


def elector(lease: MemoryLease, who: str, lost: threading.Event | None = None) -> LeaderElector:
    return LeaderElector(lease, who, on_lost=(lost or threading.Event()).set, timing=FAST)  # type: ignore[arg-type]


def test_one_of_two_leads_and_the_other_takes_over_at_once_when_it_releases() -> None:
    lease = MemoryLease()
    a, b = elector(lease, "a"), elector(lease, "b")
    assert a.acquire()
    b_leads = threading.Event()
    t = threading.Thread(target=lambda: b.acquire() and b_leads.set())
    t.start()
    assert not b_leads.wait(FAST.lease_duration * 1.5), "b led while a renewed"
    a.release()
    assert b_leads.wait(SOON), "b took over a released Lease at its next read"
    t.join()
    assert lease.record is not None and lease.record.holder == "b" and lease.record.transitions == 1
    b.release()


def test_a_leader_that_cannot_renew_stops_before_anyone_takes_over() -> None:
    lease = MemoryLease()
    lost = threading.Event()
    a = elector(lease, "a", lost)
    assert a.acquire()
    lease.down = True
    assert lost.wait(SOON), "a stopped within its renew deadline"
    assert not a.leading
    lease.down = False
    b = elector(lease, "b")
    started = threading.Event()
    threading.Thread(target=lambda: b.acquire() and started.set(), daemon=True).start()
    assert started.wait(SOON)
    assert lease.writes[-1] == "b"
    b.release()


def test_a_leader_whose_lease_was_taken_stops_at_its_next_renewal() -> None:
    """A partition heals: the old leader finds another holder and stops (it does not wait out
    its deadline)."""
    lease = MemoryLease()
    lost = threading.Event()
    a = elector(lease, "a", lost)
    assert a.acquire()
    with lease.lock:
        assert lease.record is not None
        lease.record = LeaseRecord("b", 1, transitions=lease.record.transitions + 1)
        lease.version += 1
    assert lost.wait(SOON)
    assert a.last is not None and a.last.step is Step.FOLLOW


def test_a_follower_stopped_before_it_leads_writes_nothing() -> None:
    lease = MemoryLease()
    assert elector(lease, "a").acquire()
    stop = threading.Event()
    stop.set()
    assert not elector(lease, "b").acquire(stop)
    assert lease.writes == ["a"]


def test_a_leader_may_write_only_while_its_renewal_is_within_the_deadline() -> None:
    now = [100.0]
    lease = MemoryLease()
    a = LeaderElector(lease, "a", on_lost=lambda: None, timing=FAST, clock=lambda: now[0])  # type: ignore[arg-type]
    assert a.may_write() == "a does not hold the Lease ops/kappa-operator"
    assert a._attempt()  # one read and a create, as acquire's first step
    assert a.may_write() is None
    now[0] += FAST.renew_deadline  # frozen past the deadline: it may not know it lost the Lease
    assert a.may_write() == "a has not renewed the Lease for 2 s"
