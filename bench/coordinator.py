"""Throughput and latency of the watermark coordinator through real HTTP.

The service runs in its own process pinned to one core (``sched_setaffinity``); the load
comes from this process (pinned to another core when there is one) with aiohttp: ``--concurrency``
connections, each owning a disjoint set of members so every member's watermark only grows.
Each case declares 100 groups, lets every member report once (so no group is held), then
measures for ``--seconds``: reports/s and client-side latency percentiles (request sent to
answer parsed). Run from the repository root::

    .venv/bin/python -m bench.coordinator --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kappa_operator.local.ports import free_port

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOKEN = "bench-token"
GROUPS = 100
MIN = 60_000_000


def _serve(port: int, core: int | None) -> None:
    import logging

    from kappa_operator.coordinator.server import Service, serve

    if core is not None:
        os.sched_setaffinity(0, {core})
    logging.basicConfig(level=logging.WARNING)
    serve(Service(TOKEN), "127.0.0.1", port)


async def _case(url: str, members: int, seconds: float, concurrency: int) -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}"}
    per_group = members // GROUPS
    names = [(f"g{g}", f"job-{g}/sink/src-{m}") for g in range(GROUPS) for m in range(per_group)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), headers=headers) as session:
        for g in range(GROUPS):
            body = {"members": [m for gg, m in names if gg == f"g{g}"], "maxDrift": "5m"}
            async with session.put(f"{url}/v1/groups/g{g}", json=body) as r:
                assert r.status == 200, await r.text()
        watermark = dict.fromkeys(names, 0)

        async def report(key: tuple[str, str]) -> float:
            watermark[key] += MIN
            t0 = time.perf_counter()
            async with session.post(
                f"{url}/v1/groups/{key[0]}/reports", json={"member": key[1], "watermark": watermark[key]}
            ) as r:
                await r.read()
                assert r.status == 200
            return time.perf_counter() - t0

        # every member once (untimed), so groups are not held
        for i in range(0, len(names), concurrency):
            await asyncio.gather(*(report(k) for k in names[i : i + concurrency]))

        latencies: list[float] = []
        stop = time.perf_counter() + seconds

        async def worker(own: list[tuple[str, str]]) -> None:
            i = 0
            while time.perf_counter() < stop:
                latencies.append(await report(own[i % len(own)]))
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(names[w::concurrency]) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    return {
        "members": members,
        "groups": GROUPS,
        "reports": len(latencies),
        "seconds": round(elapsed, 2),
        "reports_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(q[49] * 1000, 3),
        "p99_ms": round(q[98] * 1000, 3),
        "max_ms": round(latencies[-1] * 1000, 3),
    }


def run_case(members: int, seconds: float, concurrency: int) -> dict[str, Any]:
    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[0]
    port = free_port()
    proc = mp.get_context("spawn").Process(target=_serve, args=(port, server_core), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    if len(cores) > 1:
        os.sched_setaffinity(0, set(cores[1:]))
    try:
        return asyncio.run(_case(url, members, seconds, concurrency))
    finally:
        os.sched_setaffinity(0, set(cores))
        proc.terminate()
        proc.join(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--quick", action="store_true", help="3 s per case instead of 10 (both cases still run)")
    p.add_argument("--concurrency", type=int, default=16, help="connections in flight")
    args = p.parse_args(argv)
    seconds = 3.0 if args.quick else 10.0
    results = [run_case(n, seconds, args.concurrency) for n in (1_000, 10_000)]
    import aiohttp

    out = {
        "bench": "coordinator",
        "results": results,
        "machine": {
            "cores": os.cpu_count(),
            "server_cores": 1,
            "python": platform.python_version(),
            "aiohttp": aiohttp.__version__,
            "platform": platform.platform(),
        },
        "config": {"seconds_per_case": seconds, "concurrency": args.concurrency, "groups": GROUPS},
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
