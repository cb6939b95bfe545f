"""A real HTTP service on loopback that records when each request arrived: the "production
service" the external-calls test and bench call through the job's limiter (aiohttp, on a
thread of its own, so Spark's Python workers call it as they would a remote one)."""

from __future__ import annotations

import asyncio
import threading
import time
from bisect import bisect_left, bisect_right

from aiohttp import web


class RecordingService:
    """``GET /lookup?id=X`` answers ``label-X`` and records the arrival (monotonic clock)."""

    def __init__(self, delay_s: float = 0.0, host: str = "127.0.0.1") -> None:
        """``host``: the address to listen on (the node tests': the nodes' gateway, which their
        pods reach)."""
        self.delay_s = delay_s
        self.host = host
        self.arrivals: list[float] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="recording-service", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the recording service did not start")

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/lookup", self._lookup)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    async def _lookup(self, request: web.Request) -> web.Response:
        with self._lock:
            self.arrivals.append(time.monotonic())
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.Response(text=f"label-{request.query.get('id', '')}")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/lookup"

    def times(self) -> list[float]:
        with self._lock:
            return sorted(self.arrivals)

    def __enter__(self) -> RecordingService:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def max_in_window(times: list[float], width: float) -> int:
    """The most requests any closed window of ``width`` seconds saw (each arrival starts one)."""
    times = sorted(times)
    return max((bisect_right(times, t + width) - bisect_left(times, t) for t in times), default=0)


def rates(times: list[float], limit: float | None) -> dict[str, float | int | None]:
    """The calling phase's achieved rate (first to last arrival) and the busiest 1 s and 5 s,
    also as ratios to ``limit``."""
    times = sorted(times)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    achieved = (len(times) - 1) / span if span > 0 else None
    peak1, peak5 = max_in_window(times, 1.0), max_in_window(times, 5.0) / 5
    out: dict[str, float | int | None] = {
        "calls": len(times),
        "calling_s": round(span, 2),
        "achieved_per_s": None if achieved is None else round(achieved, 2),
        "max_1s": peak1,
        "max_5s_per_s": round(peak5, 2),
    }
    if limit:
        out["achieved_over_limit"] = None if achieved is None else round(achieved / limit, 3)
        out["max_1s_over_limit"] = round(peak1 / limit, 3)
        out["max_5s_over_limit"] = round(peak5 / limit, 3)
    return out
