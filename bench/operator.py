"""The operator under load: N StreamingJobs and Backfills created against the kmock Kubernetes
emulator; time from create to the SparkApplication present (p50/p99) and the operator
process's CPU per object.

The operator runs as ``kappa operator --server URL`` in its own process (its CPU is read from
/proc, idle CPU subtracted); the emulator and the load run in this process. Half the objects
are StreamingJobs, half Backfills of those jobs, all created at once as `kubectl apply -f dir/`
would. ``cpu_ms_per_object`` covers create until every object has its status (including the
Backfills' progress timers that ran meanwhile); ``following_cpu_share`` is the steady cost
(cores) of following the running Backfills afterwards. Baseline, measured in the same run: one
object created alone on the idle operator (the unloaded create-to-application latency). Run
from the repository root::

    .venv/bin/python -m bench.operator --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

import aiohttp
import kmock

from tests.operator.kube import BACKFILLS, JOBS, manifest, register

TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A port nothing listens on now (the operator's flags take no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def objects(n: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(collection, name, body) for n/2 jobs and n/2 backfills, interleaved job-then-backfill."""
    out = []
    for i in range(n // 2):
        job = manifest("rmi-streamingjob.yaml", f"uid-job-{i}")
        job["metadata"]["name"] = f"rmi-{i}"
        bf = manifest("rmi-backfill.yaml", f"uid-bf-{i}")
        bf["metadata"]["name"] = f"rmi-{i}-bf"
        bf["spec"]["jobRef"] = {"name": f"rmi-{i}"}
        out += [(JOBS, f"rmi-{i}", job), (BACKFILLS, f"rmi-{i}-bf", bf)]
    return out


def present_apps(emulator: kmock.KubernetesEmulator) -> set[str]:
    return {key[2] for key in list(emulator.objects) if key[0].plural == "sparkapplications"}


def reconciled(emulator: kmock.KubernetesEmulator, n: int) -> bool:
    """Every job and backfill has a status phase (the last write of its reconcile)."""
    done = 0
    for key in list(emulator.objects):
        if key[0].plural in ("streamingjobs", "backfills") and key[2] != "baseline":
            done += bool((dict(emulator.objects[key]).get("status") or {}).get("phase"))
    return done >= n


async def wait_for(
    emulator: kmock.KubernetesEmulator, names: set[str], created: dict[str, float], timeout: float
) -> dict[str, float]:
    """First time each name's SparkApplication was seen (polled every 10 ms)."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(names):
        now = time.monotonic()
        for name in present_apps(emulator) & names:
            seen.setdefault(name, now)
        if now > deadline:
            raise TimeoutError(f"{len(names) - len(seen)} of {len(names)} applications missing after {timeout:.0f} s")
        await asyncio.sleep(0.01)
    return {name: seen[name] - created[name] for name in names}


async def create(
    http: aiohttp.ClientSession,
    base: str,
    items: list[tuple[str, str, dict[str, Any]]],
    created: dict[str, float],
    concurrency: int,
) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(collection: str, name: str, body: dict[str, Any]) -> None:
        async with sem:
            created[name] = time.monotonic()
            async with http.post(base + collection, json=body) as r:
                assert r.status < 300, await r.text()

    await asyncio.gather(*(one(*item) for item in items))


async def trim_request_log(emulator: kmock.KubernetesEmulator, keep: int = 48) -> None:
    """kmock keeps every request and matches each new one against its reactions by scanning
    that log (quadratic in requests): trimmed, the emulator costs the same at the thousandth
    object as at the first, and the bench measures the operator, not the emulator's history."""
    log: list[Any] = emulator._requests
    while True:
        if len(log) > keep + 16:
            del log[:-keep]
        await asyncio.sleep(0.005)


async def quiet(pid: int, window: float = 2.0, share: float = 0.05, timeout: float = 120) -> None:
    """Until the operator's CPU use falls under ``share`` of a core (status writes settled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        await asyncio.sleep(window)
        if cpu_seconds(pid) - before < share * window:
            return


async def run(n: int, concurrency: int, timeout: float, log: Path) -> dict[str, Any]:
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        register(emulator)
        base = str(server.url).rstrip("/")
        env = {**os.environ, "KAPPA_COORDINATOR_TOKEN": "bench"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kappa_operator.cli",
            "operator",
            "--server",
            base,
            "--namespace",
            "default",
            "--coordinator-bind",
            f"127.0.0.1:{free_port()}",
            "--metrics-bind",
            f"127.0.0.1:{free_port()}",
            "--health-bind",
            f"127.0.0.1:{free_port()}",
            env=env,
            stdout=log.open("wb"),
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
                # ready: the operator watches all three kinds
                deadline = time.monotonic() + 60
                while sum(1 for r in list(emulator) if r.params.get("watch") in ("true", "1")) < 3:
                    if time.monotonic() > deadline or proc.returncode is not None:
                        raise RuntimeError("the operator did not start")
                    await asyncio.sleep(0.1)
                await asyncio.sleep(2.0)
                trimmer = asyncio.create_task(trim_request_log(emulator))
                await quiet(proc.pid)

                # baseline: one job alone on the idle operator
                created: dict[str, float] = {}
                alone = manifest("rmi-streamingjob.yaml", "uid-baseline")
                alone["metadata"]["name"] = "baseline"
                await create(http, base, [(JOBS, "baseline", alone)], created, 1)
                baseline = (await wait_for(emulator, {"baseline"}, created, timeout))["baseline"]
                await quiet(proc.pid)

                idle_from, idle_cpu = time.monotonic(), cpu_seconds(proc.pid)
                await asyncio.sleep(3.0)
                idle_rate = (cpu_seconds(proc.pid) - idle_cpu) / (time.monotonic() - idle_from)

                items = objects(n)
                created = {}
                start, cpu0, emulator0 = time.monotonic(), cpu_seconds(proc.pid), time.process_time()
                await create(http, base, items, created, concurrency)
                created_s = time.monotonic() - start
                latency = await wait_for(emulator, {name for _, name, _ in items}, created, timeout)
                all_present_s = time.monotonic() - start
                while not reconciled(emulator, n):
                    await asyncio.sleep(0.1)
                elapsed = time.monotonic() - start
                cpu = cpu_seconds(proc.pid) - cpu0 - idle_rate * elapsed
                emulator_share = (time.process_time() - emulator0) / elapsed
                # steady state: the Backfills' progress timers, nothing else changing
                await asyncio.sleep(10.0)
                follow0, follow_from = cpu_seconds(proc.pid), time.monotonic()
                await asyncio.sleep(10.0)
                follow_share = (cpu_seconds(proc.pid) - follow0) / (time.monotonic() - follow_from)
        finally:
            proc.terminate()
            await proc.wait()
            if "trimmer" in locals():
                trimmer.cancel()
    values = sorted(latency.values())
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "objects": n,
        "p50_s": round(q[49], 3),
        "p99_s": round(q[98], 3),
        "max_s": round(values[-1], 3),
        "cpu_ms_per_object": round(cpu * 1000 / n, 2),
        "baseline_single_s": round(baseline, 3),
        "p50_vs_single": round(q[49] / baseline, 1),
        "created_in_s": round(created_s, 2),
        "all_present_s": round(all_present_s, 2),
        "objects_per_s": round(n / all_present_s, 1),
        "reconciled_s": round(elapsed, 2),
        "following_cpu_share": round(follow_share, 3),
        "following_backfills": n // 2,
        "idle_cpu_share": round(idle_rate, 4),
        "operator_cpu_share": round(cpu / elapsed, 3),
        "emulator_cpu_share": round(emulator_share, 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--objects", type=int, default=1000, help="StreamingJobs + Backfills (half each)")
    p.add_argument("--concurrency", type=int, default=16, help="creates in flight")
    p.add_argument("--timeout", type=float, default=900, help="give up after this many seconds")
    p.add_argument("--log", type=Path, default=Path("/tmp/kappa-bench-operator.log"), help="the operator's log")
    args = p.parse_args(argv)
    result = asyncio.run(run(args.objects, args.concurrency, args.timeout, args.log))
    out = {
        **result,
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "config": {"concurrency": args.concurrency, "emulator": "kmock", "operator": "kappa operator (subprocess)"},
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
