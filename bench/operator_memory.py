"""The operator's memory does not grow with the data (issue 16): a Backfill's validate and
publish, and a Rewind's restore and sink undo, for a window and for a 10x longer window at the
same density (and a 10x larger checkpoint), with the operator as its own process.

Per scale: a SQLite Iceberg catalog holds ``marts.attributed_plays`` with an outage in main
(``--missing`` of the window's rows lost) and the backfill's branch with the whole window. The
operator (``kappa operator --server URL``, a fresh process per scale) reconciles a
StreamingJob and its Backfill against the kmock emulator (in this process); this bench plays
the Spark operator: it completes the backfill's application, then runs the publish
application the operator renders exactly as its pod would (``python -m spark_app publish
--config`` on the rendered ConfigMap, its own process) and reports its state. Measured: the
operator's peak RSS (``VmHWM``) per scale and their ratio, the publish application's wall
time, and, as the baseline, the in-process pyarrow comparison the operator ran before
(``validation.compare_in_process``, in its own process: wall time and peak RSS).

Then, in the same operator process, a Rewind of a second StreamingJob whose live checkpoint
holds ``--state-mb`` (x10 at 10x) of state and whose sink table holds six batches: the bench
externalizes two snapshots (standing in for the job's driver, which takes them on a cluster),
applies the Rewind, and runs the restore application the operator renders (``python -m
spark_app restore``, its own process). Measured: the restore application's wall time, the
bytes it restored, and the operator's peak RSS over both operations. Run from the repository
root::

    .venv/bin/python -m bench.operator_memory --json          # ~7 min here
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

import aiohttp
import kmock
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.operator import free_port
from harness.checkpoint_data import live_ids, sink_batches, write_checkpoint
from harness.kube_api import APPS, BACKFILLS, JOBS, Api, manifest, register, run_application, spark_state
from spark_app.contract.checkpoints import externalize, open_location

REWINDS = "/apis/kappa.dev/v1alpha1/namespaces/default/rewinds"

START = datetime(2026, 11, 1, 14, tzinfo=UTC)
TABLE = "marts.attributed_plays"
LIMIT_MB = 512
"""The chart's memory limit for the operator pod."""


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def rows(n: int, start: datetime, span: timedelta, prefix: str) -> pa.Table:
    i = np.arange(n, dtype=np.int64)
    step_us = (span // timedelta(microseconds=1)) // max(n, 1)
    start_us = int(start.timestamp() * 1_000_000)
    ids = pc.binary_join_element_wise(prefix, pc.cast(i, pa.string()), "")
    return pa.table(
        {
            "playback_id": ids,
            "impression_id": pc.binary_join_element_wise("i", pc.cast(i, pa.string()), ""),
            "playback_ts": pa.array(start_us + i * step_us, pa.int64()).cast(pa.timestamp("us", "UTC")),
            "profile_id": pa.array(i % 50_000),
            "title_id": pc.binary_join_element_wise("t", pc.cast(i % 4_000, pa.string()), ""),
            "duration_s": pa.array((i % 3_600).astype(np.float64)),
        }
    )


def make_table(root: Path, hours: int, rows_per_hour: int, missing: float) -> dict[str, str]:
    """main: an hour before and after the window, and the window minus ``missing`` of its
    rows; the branch: the whole window. Appended an hour of rows at a time (one file each)."""
    from pyiceberg.catalog.sql import SqlCatalog

    root.mkdir(parents=True, exist_ok=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/wh"}
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("marts")
    table = catalog.create_table(TABLE, rows(0, START, timedelta(hours=1), "x").schema)
    branch = "backfill-rmi-outage"
    table.append(rows(rows_per_hour, START - timedelta(hours=1), timedelta(hours=1), "before"))
    for h in range(hours):
        hour = rows(rows_per_hour, START + timedelta(hours=h), timedelta(hours=1), f"h{h:02d}-")
        keep = int(hour.num_rows * (1 - missing))
        table.append(hour.slice(0, keep))
        table.append(hour, branch=branch)
    table.append(rows(rows_per_hour, START + timedelta(hours=hours), timedelta(hours=1), "after"))
    return props


def in_process_compare(props: dict[str, str], hours: int) -> dict[str, Any]:
    """Today's (before issue 16) in-process validation, in its own process: wall and peak RSS."""
    code = f"""
import json, resource, time
from datetime import datetime, timedelta, UTC
from pyiceberg.catalog.sql import SqlCatalog
from spark_app.sinks.iceberg.validation import compare_in_process
from spark_app.sinks.iceberg.window import TimeWindow
t0 = time.monotonic()
table = SqlCatalog("default", **{props!r}).load_table({TABLE!r})
start = datetime.fromisoformat({START.isoformat()!r})
window = TimeWindow("playback_ts", start, start + timedelta(hours={hours}))
c = compare_in_process(table, window, table.snapshot_by_name("main").snapshot_id,
                       table.snapshot_by_name("backfill-rmi-outage").snapshot_id, ["playback_id", "impression_id"])
print(json.dumps({{"seconds": round(time.monotonic() - t0, 2), "main_rows": c.main_rows,
                  "branch_rows": c.branch_rows, "matched": c.matched,
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def rewind_run(api: Api, root: Path, props: dict[str, str], state_mb: int, timeout: float) -> dict[str, Any]:
    """A Rewind of job ``sessions`` to batch 2 through the running operator; the restore
    application run as its own process. Its live checkpoint: 6 batches, ``state_mb`` of state."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("default", **props)
    sink_batches(catalog, "marts.rewound", "q-up", 6)
    live = root / "ckpt" / "sessions" / "live" / "attributed_plays"
    write_checkpoint(live, "q-up", 6, minute=0)
    rng = np.random.default_rng(7)
    per_batch = state_mb * 1024 * 1024 // 6
    for i in range(6):  # the state store's files: what a restore copies
        part = live / "state" / "0" / "1"
        part.mkdir(parents=True, exist_ok=True)
        (part / f"{i + 1}.delta").write_bytes(rng.bytes(per_batch))
    external = open_location(str(root / "ext" / "sessions" / "attributed_plays"))
    for b in (2, 5):
        externalize(open_location(str(live)), external, batch_id=b)
    job = manifest("rmi-streamingjob.yaml", "uid-sessions", catalogs={"default": {"type": "sql", **props}})
    job["metadata"]["name"] = "sessions"
    job["spec"]["sinks"]["attributed_plays"]["table"] = "marts.rewound"
    job["spec"]["checkpoints"] = {
        "location": str(root / "ckpt" / "sessions"),
        "externalLocation": str(root / "ext" / "sessions"),
    }
    await api.post(JOBS, job)
    await _until(lambda: api.get(f"{APPS}/sessions"), timeout)
    rw = manifest("rmi-rewind.yaml", "uid-rw")
    rw["spec"] = {"jobRef": {"name": "sessions"}, "target": {"batchId": 2}}
    await api.post(REWINDS, rw)
    name = "rmi-before-outage-rewind"
    await _until(lambda: api.get(f"{APPS}/{name}"), timeout)
    t0 = time.monotonic()
    code = await run_application(api, name, root)
    restore_s = time.monotonic() - t0
    if code != 0:
        raise RuntimeError(f"the restore application failed ({code}): see {root / (name + '.log')}")

    async def ended() -> dict[str, Any] | None:
        s = ((await api.get(f"{REWINDS}/rmi-before-outage")) or {}).get("status") or {}
        return s if s.get("phase") in ("Succeeded", "Failed") else None

    status = await _until(ended, timeout)
    restored = Path(status["checkpointLocation"]) / "attributed_plays"
    return {
        "phase": status["phase"],
        "restored_batch": status.get("restoredBatch"),
        "files_removed": (status.get("restores") or [{}])[0].get("filesRemoved"),
        "sink_rows_after": len(live_ids(catalog, "marts.rewound")),
        "restored_mb": round(sum(p.stat().st_size for p in restored.rglob("*") if p.is_file()) / 2**20, 1),
        "restore_app_s": round(restore_s, 2),
    }


async def operator_run(root: Path, props: dict[str, str], hours: int, state_mb: int, timeout: float) -> dict[str, Any]:
    """One Backfill, then one Rewind, through a fresh operator process; the publish and restore
    applications run as processes of their own."""
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        register(emulator)
        base = str(server.url).rstrip("/")
        env = {**os.environ, "KAPPA_COORDINATOR_TOKEN": "bench"}
        log = (root / "operator.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kappa_operator.cli.commands",
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
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with aiohttp.ClientSession() as http:
                api = Api(base, http)
                deadline = time.monotonic() + 60
                while sum(1 for r in list(emulator) if r.params.get("watch") in ("true", "1")) < 3:
                    if time.monotonic() > deadline or proc.returncode is not None:
                        raise RuntimeError(f"the operator did not start: see {root / 'operator.log'}")
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)
                idle_mb = peak_rss_mb(proc.pid)
                checkpoints = {"location": str(root / "checkpoints"), "interval": "10m"}
                job = manifest("rmi-streamingjob.yaml", "uid-rmi", catalogs={"default": {"type": "sql", **props}})
                job["spec"]["checkpoints"] = checkpoints
                window = {"start": START.isoformat(), "end": (START + timedelta(hours=hours)).isoformat()}
                bf = manifest(
                    "rmi-backfill.yaml", "uid-bf", window=window, publish={"enabled": True, "minMatchRatio": 0.5}
                )
                await api.post(JOBS, job)
                await api.post(BACKFILLS, bf)
                name = "rmi-outage-backfill"
                await _until(lambda: api.get(f"{APPS}/{name}"), timeout)
                await spark_state(api, name, "COMPLETED")
                await _until(lambda: api.get(f"{APPS}/{name}-publish"), timeout)
                t0 = time.monotonic()
                code = await run_application(api, f"{name}-publish", root)
                publish_s = time.monotonic() - t0
                if code != 0:
                    raise RuntimeError(f"the publish application failed ({code}): see {root / (name + '-publish.log')}")

                async def succeeded() -> dict[str, Any] | None:
                    s = ((await api.get(f"{BACKFILLS}/rmi-outage")) or {}).get("status") or {}
                    return s if s.get("phase") in ("Succeeded", "Failed") else None

                status = await _until(succeeded, timeout)
                after_publish_mb = peak_rss_mb(proc.pid)
                rewind = await rewind_run(api, root, props, state_mb, timeout)
                await asyncio.sleep(2.0)  # a few more reconciles and timers, at the peak's mercy
                return {
                    "phase": status["phase"],
                    "published": status.get("published"),
                    "operator_peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
                    "operator_peak_rss_after_publish_mb": round(after_publish_mb, 1),
                    "operator_idle_rss_mb": round(idle_mb, 1),
                    "publish_app_s": round(publish_s, 2),
                    "rewind": rewind,
                }
        finally:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()
            log.close()


async def _until(get: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await get()
        if got:
            return got
        await asyncio.sleep(0.25)
    raise TimeoutError("timed out")


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=int, default=1, help="the 1x window (the 10x one is ten times longer)")
    p.add_argument("--rows-per-hour", type=int, default=400_000)
    p.add_argument("--missing", type=float, default=0.1, help="share of the window's rows main lost")
    p.add_argument("--state-mb", type=int, default=40, help="the 1x live checkpoint's state (10x: ten times)")
    p.add_argument("--out", default="/tmp/kappa-bench-operator-memory")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.out)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    result: dict[str, Any] = {"bench": "operator_memory", "scales": {}, "machine": machine()}
    for label, hours, state_mb in (("1x", args.hours, args.state_mb), ("10x", args.hours * 10, args.state_mb * 10)):
        root = out / label
        t0 = time.monotonic()
        props = make_table(root / "data", hours, args.rows_per_hour, args.missing)
        generated = time.monotonic() - t0
        baseline = in_process_compare(props, hours)
        run = asyncio.run(operator_run(root, props, hours, state_mb, args.timeout))
        result["scales"][label] = {
            "hours": hours,
            "window_rows_branch": hours * args.rows_per_hour,
            "generate_s": round(generated, 1),
            **run,
            "in_process_compare": baseline,
        }
    one, ten = result["scales"]["1x"], result["scales"]["10x"]
    result["operator_rss_ratio_10x"] = round(ten["operator_peak_rss_mb"] / one["operator_peak_rss_mb"], 3)
    result["operator_peak_rss_mb"] = {"1x": one["operator_peak_rss_mb"], "10x": ten["operator_peak_rss_mb"]}
    result["spark_publish_vs_in_process_compare_1x"] = round(
        one["publish_app_s"] / one["in_process_compare"]["seconds"], 2
    )
    result["in_process_compare_peak_rss_mb"] = {
        "1x": one["in_process_compare"]["peak_rss_mb"],
        "10x": ten["in_process_compare"]["peak_rss_mb"],
        "chart_limit_mb": LIMIT_MB,
    }
    print(json.dumps(result, indent=2 if args.json else None, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
