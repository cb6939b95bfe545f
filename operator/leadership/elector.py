"""The election loop: a follower reads the Lease every ``retry_period`` until it may take it;
the leader renews it on a thread of its own and, when it cannot renew within the renew
deadline, is told to stop (``on_lost``: the operator's process exits, as kube-controller-manager
does, since kopf cannot be stopped mid-write).

Only the outcome of each read is decided here (``decide``); the API calls are ``LeaseLock``'s."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kappa_operator.leadership.decide import (
    DEFAULT_TIMING,
    Decision,
    Observation,
    Step,
    Timing,
    decide,
    observe,
    released,
    still_leading,
)
from kappa_operator.leadership.lease import LeaseLock

log = logging.getLogger("kappa.leadership")


def utc_now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    def __init__(
        self,
        lock: LeaseLock,
        identity: str,
        on_lost: Callable[[], None],
        timing: Timing = DEFAULT_TIMING,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utc_now,
    ) -> None:
        self.lock, self.identity, self.on_lost, self.timing = lock, identity, on_lost, timing
        self.clock, self.wall = clock, wall
        self._seen: Observation | None = None
        self._last_renewed: float | None = None
        self._leaving = threading.Event()
        self._renewer: threading.Thread | None = None
        self.last: Decision | None = None
        """The last decision (what /healthz and the log say the replica is doing)."""

    @property
    def leading(self) -> bool:
        return self._last_renewed is not None

    def may_write(self) -> str | None:
        """None while this replica holds the Lease, renewed within the renew deadline; else why
        not (the API edge refuses a write then: ``kube.api.fence``)."""
        renewed = self._last_renewed
        if renewed is None:
            return f"{self.identity} does not hold the Lease {self.lock.namespace}/{self.lock.name}"
        if not still_leading(renewed, self.clock(), self.timing):
            return f"{self.identity} has not renewed the Lease for {self.clock() - renewed:.0f} s"
        return None

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this replica leads (True), or ``stop`` is set first (False). Then renew
        in the background until ``release``."""
        followed: str | None = None
        while not (stop is not None and stop.is_set()):
            if self._attempt():
                why = self.last.reason if self.last else ""
                log.info("leading (Lease %s/%s: %s)", self.lock.namespace, self.lock.name, why)
                self._renewer = threading.Thread(target=self._renew, name="kappa-lease-renewal", daemon=True)
                self._renewer.start()
                return True
            holder = self._seen.record.holder if self._seen and self._seen.record else None
            if holder != followed and self.last is not None:
                log.info("following: %s", self.last.reason)
                followed = holder
            (stop or self._leaving).wait(self.timing.retry_period)
        return False

    def release(self) -> None:
        """Stop renewing and, if this replica still holds the Lease, hand it back (a follower
        takes over at its next read, not a lease duration later)."""
        self._leaving.set()
        if self._renewer is not None:
            self._renewer.join(timeout=self.timing.retry_period * 2)
        if self._last_renewed is None:
            return
        self._last_renewed = None
        try:
            record, version = self.lock.read()
            if record is not None and version is not None and record.holder == self.identity:
                self.lock.update(released(record, self.wall()), version)
                log.info("released the Lease %s/%s", self.lock.namespace, self.lock.name)
        except Exception as exc:  # leaving anyway: the Lease then expires by itself
            log.warning("could not release the Lease (it expires in %.0f s): %s", self.timing.lease_duration, exc)

    def _attempt(self) -> bool:
        """One read and at most one write; True when this replica holds the Lease after it."""
        try:
            record, version = self.lock.read()
            now = self.clock()
            self._seen = observe(self._seen, record, now)
            decision = self.last = decide(self._seen, self.identity, now, self.wall(), self.timing)
            if decision.step is Step.FOLLOW or decision.record is None:
                return False
            if decision.step is Step.CREATE:
                written = self.lock.create(decision.record)
            else:
                assert version is not None
                written = self.lock.update(decision.record, version)
        except Exception as exc:  # the API server or the network: try again next period
            log.warning("Lease %s/%s not read or written: %s", self.lock.namespace, self.lock.name, exc)
            return False
        if written:
            self._last_renewed = now
            self._seen = Observation(decision.record, now)
        return written

    def _renew(self) -> None:
        while not self._leaving.wait(self.timing.retry_period):
            if self._attempt():
                continue
            renewed = self._last_renewed
            taken = self.last is not None and self.last.step is Step.FOLLOW  # another replica holds it now
            if taken or renewed is None or not still_leading(renewed, self.clock(), self.timing):
                self._last_renewed = None
                log.error(
                    "lost the Lease %s/%s (%s): stopping",
                    self.lock.namespace,
                    self.lock.name,
                    self.last.reason if self.last else "not renewed within the renew deadline",
                )
                self.on_lost()
                return
