"""The limiter a pipeline's UDFs call: picklable, shipped to the executors inside the UDF, and
one lease client per Python process whichever task unpickled it.

Why one client per process: Spark deserializes a UDF for every task, and a Python worker runs
many tasks; leases (and the counts not told yet) must outlive a task, or each task would start
with an empty lease and tell nothing at its end. The client is found by the server's URL.

A client leases as many tokens as it can spend within a slot at the pace it calls (measured
between its acquires): a fast caller takes the largest lease (fewest HTTP rounds), a slow one
(a call of 50 ms) one token at a time, so slots do not expire unused while others wait.

``acquire(n)`` is for ``n`` calls that go out at once (a batch request of ``n`` items, ``n``
requests in parallel): it returns when the last of the ``n`` tokens' slots has come. Calls made
one after another take ``acquire(1)`` each (or ``limited(fn)``): tokens taken in a batch and
spent slowly would let later slots' calls pile onto theirs.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from spark_app.contract.errors import KappaError
from spark_app.external_calls.pacing import GRACE_S

T = TypeVar("T")
TELL_EVERY_S = 1.0
"""A process that stopped calling tells its last counts within this long."""
UNREACHABLE_S = 60.0
"""How long a client retries a lease server it cannot reach before it fails the task: calling
on without a limit is never the fallback."""


class ExternalCallsError(KappaError):
    """The driver's lease server cannot be reached: the limit cannot be kept, so no call goes out."""


class _Client:
    """One process's leases from one lease server."""

    def __init__(self, url: str, max_lease: int, rate: float) -> None:
        parts = urlsplit(url)
        self.url, self.host, self.port, self.path = url, parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.max_lease, self.rate = max_lease, rate
        self.tau: float | None = None
        self.last_exit: float | None = None
        self.last_n = 1
        self.lock = threading.Lock()
        self.http_lock = threading.Lock()
        self.conn: http.client.HTTPConnection | None = None
        self.tokens = 0
        self.start = 0.0
        self.expires = 0.0
        self.untold = (0, 0, 0.0)  # calls, expired, waited
        self.last_told = time.monotonic()
        self.teller: threading.Thread | None = None

    def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + UNREACHABLE_S
        pause = 0.05
        with self.http_lock:
            while True:
                try:
                    if self.conn is None:
                        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                    data = json.dumps(body).encode()
                    self.conn.request("POST", f"{self.path}/{route}", data, {"Content-Type": "application/json"})
                    resp = self.conn.getresponse()
                    text = resp.read()
                    if resp.status != 200:
                        raise ExternalCallsError(
                            f"external calls: the driver's lease server at {self.url_shown} answered "
                            f"{resp.status}: {text[:200]!r}"
                        )
                    return dict(json.loads(text))
                except (OSError, http.client.HTTPException) as exc:
                    if self.conn is not None:
                        self.conn.close()
                        self.conn = None
                    if time.monotonic() > deadline:
                        raise ExternalCallsError(
                            f"external calls: cannot reach the driver's lease server at {self.url_shown} for "
                            f"{UNREACHABLE_S:.0f}s ({exc}); executors must reach the driver pod on that port "
                            "(a NetworkPolicy on the Spark pods must allow it). No call was made unlimited."
                        ) from exc
                    time.sleep(pause)
                    pause = min(pause * 2, 2.0)

    @property
    def url_shown(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _take_untold(self) -> dict[str, Any]:
        calls, expired, waited = self.untold
        self.untold = (0, 0, 0.0)
        self.last_told = time.monotonic()
        return {"calls": calls, "expired": expired, "waited": round(waited, 6)}

    def _count(self, calls: int = 0, expired: int = 0, waited: float = 0.0) -> None:
        c, e, w = self.untold
        self.untold = (c + calls, e + expired, w + waited)

    def lease_size(self) -> int:
        """How many tokens to lease: as many as this process spends within a slot's length
        plus half the grace at the pace it calls (``tau`` seconds per call between acquires),
        so a slow caller does not lease slots it would let expire; a fast one takes the
        largest lease (fewest HTTP rounds)."""
        if self.tau is None:
            return 1  # no pace yet: the first lease measures it
        slack = self.tau - 1.0 / self.rate
        fit = self.max_lease if slack <= 0 else int(0.5 * GRACE_S / slack)
        return max(1, min(fit, self.max_lease))

    def _pace(self, now: float) -> None:
        """Seconds per call between this process's acquires (their waits left out), averaged."""
        if self.last_exit is not None:
            sample = max(now - self.last_exit, 0.0) / self.last_n
            self.tau = sample if self.tau is None else 0.8 * self.tau + 0.2 * sample

    def acquire(self, n: int) -> float:
        """Wait until ``n`` calls may go out; the seconds waited."""
        waited = 0.0
        left = n
        with self.lock:
            self._pace(time.monotonic())
        while left > 0:
            with self.lock:
                now = time.monotonic()
                if self.tokens and now > self.expires:  # a slot gone by unused: its tokens are lost
                    self._count(expired=self.tokens)
                    self.tokens = 0
                if not self.tokens:
                    want = max(self.lease_size(), min(left, self.max_lease))
                    answer = self._post("lease", {"want": want, **self._take_untold()})
                    got = time.monotonic()
                    self.tokens = int(answer["tokens"])
                    self.start, self.expires = got + float(answer["delay"]), got + float(answer["valid"])
                take = min(left, self.tokens)
                self.tokens -= take
                start = self.start
            pause = start - time.monotonic()
            if pause > 0:
                time.sleep(pause)
                waited += pause
            left -= take
        with self.lock:
            self._count(calls=n, waited=waited)
            self.last_exit, self.last_n = time.monotonic(), n
        self._ensure_teller()
        return waited

    def _ensure_teller(self) -> None:
        if self.teller is None or not self.teller.is_alive():
            self.teller = threading.Thread(target=self._tell_loop, name="kappa-external-calls-tell", daemon=True)
            self.teller.start()

    def _tell_loop(self) -> None:
        """Tells what the leases did not carry, once a second (a worker that stopped calling)."""
        while True:
            time.sleep(TELL_EVERY_S)
            with self.lock:
                due = self.untold != (0, 0, 0.0) and time.monotonic() - self.last_told >= TELL_EVERY_S
                body = self._take_untold() if due else None
            if body is not None:
                try:
                    self._post("report", body)
                except ExternalCallsError:
                    return  # the driver is gone (its run ended): nothing to tell it

    def tell(self) -> None:
        """Tell the counts now (tests, and a driver-side caller at its end)."""
        with self.lock:
            body = self._take_untold()
        self._post("report", body)


_CLIENTS: dict[str, _Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(url: str, max_lease: int, rate: float) -> _Client:
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(url)
        if client is None:
            client = _CLIENTS[url] = _Client(url, max_lease, rate)
        return client


class Limiter:
    """The job's limit on its external calls, for the pipeline's code: ``acquire(n)`` before
    ``n`` calls (blocks until they may go out), or ``limited(fn)`` to wrap a function making
    one call. Picklable: create it on the driver (``external_calls.limiter()`` in the
    pipeline function) and use it inside UDFs, ``mapInPandas``, ``mapInArrow`` or
    ``foreach``. Without a limit configured it never waits and talks to no server."""

    def __init__(self, url: str | None = None, rate: float | None = None, max_lease: int = 1) -> None:
        self.url, self.rate, self.max_lease = url, rate, max_lease

    def __reduce__(self) -> tuple[Any, ...]:
        return (Limiter, (self.url, self.rate, self.max_lease))

    def __repr__(self) -> str:
        return "Limiter(unlimited)" if self.url is None else f"Limiter({self.rate:g}/s)"

    @property
    def limited_rate(self) -> float | None:
        """Calls per second for the whole job (None: no limit)."""
        return self.rate

    def acquire(self, n: int = 1) -> float:
        """Block until ``n`` more calls fit in the job's limit; the seconds it waited. A task
        retried after calls were made acquires again: those tokens were spent, as the
        service saw those calls."""
        if self.url is None or n <= 0:
            return 0.0
        return _client(self.url, self.max_lease, self.rate or 1.0).acquire(int(n))

    def limited(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` taking one token per call."""
        return _Limited(self, fn)

    def tell(self) -> None:
        """Tell this process's counts to the driver now (they are told within a second anyway)."""
        if self.url is not None and self.url in _CLIENTS:
            _CLIENTS[self.url].tell()


class _Limited:
    """A function that acquires one token per call (a class, so it pickles by reference)."""

    def __init__(self, limiter: Limiter, fn: Callable[..., Any]) -> None:
        self.limiter, self.fn = limiter, fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.limiter.acquire(1)
        return self.fn(*args, **kwargs)
