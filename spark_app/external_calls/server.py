"""The lease server: one per run, in the driver, where the job's tokens live.

A threaded HTTP server of the standard library (no event loop to share with py4j or the
pipeline), keep-alive, JSON bodies. The URL carries a secret made for the run, so nothing else
that reaches the driver pod can take the job's tokens. Executors reach it at the driver's
address (``spark.driver.host``: on Kubernetes the headless service Spark creates for the
driver, which resolves to the pod itself, so any port of the pod is reachable) and the port it
bound; locally at 127.0.0.1.

``POST /v1/<secret>/lease`` ``{"want", "calls", "expired", "waited"}`` -> ``{"tokens",
"delay", "valid"}`` (seconds from now: the client's clock need not agree with ours).
``POST /v1/<secret>/report`` tells the counts only. ``GET /v1/<secret>`` answers the counts.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spark_app.external_calls.pacing import CallCounts, Pacer

log = logging.getLogger("kappa.external_calls")
BODY_MAX = 4096


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in two writes: Nagle + delayed ACK cost 40 ms a lease
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per lease would drown the driver's log

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> str | None:
        parts = self.path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "v1" or not hmac.compare_digest(parts[1], self.server.limiter.secret):
            self._answer(404, {"error": "not found"})
            return None
        return "/".join(parts[2:])

    def do_GET(self) -> None:
        if self._route() is not None:
            self._answer(200, self.server.limiter.snapshot())

    def do_POST(self) -> None:
        route = self._route()
        if route is None:
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > BODY_MAX:
            self._answer(413, {"error": f"body over {BODY_MAX} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            calls, expired, waited = (
                int(body.get("calls", 0)),
                int(body.get("expired", 0)),
                float(body.get("waited", 0)),
            )
            want = int(body.get("want", 1))
        except (ValueError, TypeError, AttributeError):
            self._answer(400, {"error": "expected JSON {want, calls, expired, waited} with numbers"})
            return
        server = self.server.limiter
        server.told(calls, expired, waited)
        if route == "lease":
            self._answer(200, server.lease(want))
        elif route == "report":
            self._answer(200, {})
        else:
            self._answer(404, {"error": f"no route {route!r}"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    limiter: LeaseServer


class LeaseServer:
    """The job's pacer behind HTTP, with the counts the report shows."""

    def __init__(self, rate: float, bind: str = "127.0.0.1", advertise: str | None = None, port: int = 0) -> None:
        self._lock = threading.Lock()
        self.pacer = Pacer(rate)
        self.counts = CallCounts(started=time.monotonic())
        self.last_heard = self.counts.started
        """When a client last leased or told (``wait_quiet``)."""
        self.secret = secrets.token_urlsafe(16)
        self._http = _Server((bind, port), _Handler)
        self._http.limiter = self
        host = advertise or bind
        self.url = f"http://{host}:{self._http.server_address[1]}/v1/{self.secret}"
        self._thread = threading.Thread(target=self._http.serve_forever, name="kappa-external-calls", daemon=True)
        self._thread.start()

    @property
    def rate(self) -> float:
        return self.pacer.rate

    def lease(self, want: int) -> dict[str, float | int]:
        with self._lock:
            now = time.monotonic()
            lease = self.pacer.lease(want, now)
            self.counts.granted_lease(lease)
            self.last_heard = now
        return {"tokens": lease.tokens, "delay": max(lease.start - now, 0.0), "valid": lease.expires - now}

    def told(self, calls: int, expired: int, waited_s: float) -> None:
        if calls or expired or waited_s:
            with self._lock:
                self.last_heard = time.monotonic()
                self.counts.told(self.last_heard, calls, expired, waited_s)

    def wait_quiet(self, quiet_s: float, at_most_s: float) -> None:
        """Returns once no client has leased or told for ``quiet_s`` (or after ``at_most_s``):
        a worker tells what its last lease did within about two of its tell intervals, later
        on a busy host, and the final report must count it."""
        deadline = time.monotonic() + at_most_s
        while (now := time.monotonic()) < deadline:
            with self._lock:
                heard = self.last_heard
            if now - heard >= quiet_s:
                return
            time.sleep(min(0.1, max(deadline - now, 0.0)))

    def snapshot(self) -> dict[str, Any]:
        """The counts so far (what the report writes)."""
        with self._lock:
            now = time.monotonic()
            c = self.counts
            return {
                "ratePerSecond": self.pacer.rate,
                "observedPerSecond": round(c.observed_per_s(now), 3),
                "calls": c.calls,
                "granted": c.granted,
                "expired": c.expired,
                "waitedSeconds": round(c.waited_s, 3),
                "seconds": round(now - c.started, 3),
            }

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
