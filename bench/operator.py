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

``--real-apiserver`` (issue 27): the same load against a real kube-apiserver instead of kmock.
A control plane (etcd, kube-apiserver, kube-controller-manager: operator/local_cluster/control_plane.py,
built once by cluster/build.sh) starts in a temporary directory, audit off; the CRDs are
applied, the chart is installed by the real helm (release ``kappa`` in ``kappa-system``), the
bench namespace gets the coordinator-secrets RoleBinding the chart README documents, and
``kappa operator`` runs with the installed Deployment's arguments and a token of the chart's
ServiceAccount (exactly the chart's RBAC: harness/operator_process.py). No kubelet and no
Spark operator run: a SparkApplication's existence is the end of a create. The jobs' snapshot
and checkpoint locations are a local directory (the example's ``s3://lake`` does not resolve
here): the progress timer reads the live jobs' reports there every 30 s, as in a cluster.

The bench creates as the administrator, 16 POSTs in flight (a 429 is retried after
Retry-After, as kubectl does, and counts in the latency), and follows StreamingJobs,
Backfills and SparkApplications with list+watch (each event timed on arrival, in this
process). It reports: create to SparkApplication p50/p99/max (also by kind), the operator's
CPU per object (idle subtracted) and the CPU of kube-apiserver, etcd, the controller manager
and the bench itself (all on the same cores), the operator's RSS and peak RSS (VmHWM), the API
server's own request counts per object (``apiserver_request_total``), the Events posted, and
what the operator's log says (warnings, refusals, how often each handler ran), and the operator's
own ``/metrics`` once every object is followed (``metrics``: series in all and per family, those
naming one object, bytes, the scrape's time; issue 61's cardinality). Then both kinds
are deleted at once (one deletecollection per kind, in flight together) and the time until
every CR and every SparkApplication is gone is measured. Baseline, same run: one StreamingJob
created and deleted alone on the idle operator. ``steady_state`` (issue 62): once every object has
settled, the API server's requests per object per minute and the operator's requests to the
jobs' stores per StreamingJob per minute (``kappa_operator_store_requests_total``), over
``--follow`` seconds but the first 10; ``refused_429`` counts the server's 429s (a low
``--max-requests-inflight`` makes them); ``applications_created_twice`` and ``objects_left``
must be empty. ``--operator-env NAME=VALUE`` passes an
environment variable to the operator (experiments)::

    .venv/bin/python -m bench.operator --real-apiserver --objects 200 --json
    .venv/bin/python -m bench.operator --real-apiserver --objects 1000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

import aiohttp
import kmock
import yaml

from harness.kube_api import BACKFILLS, JOBS, ROOT, manifest, register
from kappa_operator.local.ports import free_port

TICK = os.sysconf("SC_CLK_TCK")
FOLLOW_S = 35.0
"""How long the real-server bench follows the objects before deleting them: past the live jobs'
first progress tick, so the deletion meets their timers (issue 39)."""


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def example(name: str, namespace: str) -> dict[str, Any]:
    """An example manifest as a user would send it to a real API server (no uid, no
    resourceVersion: a create carrying one is refused)."""
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    body["metadata"]["namespace"] = namespace
    return body


def objects(
    n: int, namespace: str | None = None, snapshots: Path | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """(collection, name, body) for n/2 jobs and n/2 backfills, interleaved job-then-backfill:
    for kmock (``namespace`` None: ``default``, with the fields kmock does not assign), or
    for a real server's ``namespace``. ``snapshots``: the jobs' checkpoints and externalized
    checkpoints there (``file://``) instead of the example's ``s3://lake``, which this machine
    cannot resolve: the operator's snapshot and progress timers read a store that answers, as
    they would in a cluster."""
    jobs, backfills = (
        (JOBS, BACKFILLS)
        if namespace is None
        else (collection("streamingjobs", namespace), collection("backfills", namespace))
    )
    out = []
    for i in range(n // 2):
        if namespace is None:
            job, bf = manifest("rmi-streamingjob.yaml", f"uid-job-{i}"), manifest("rmi-backfill.yaml", f"uid-bf-{i}")
        else:
            job, bf = example("rmi-streamingjob.yaml", namespace), example("rmi-backfill.yaml", namespace)
        job["metadata"]["name"] = f"rmi-{i}"
        if snapshots is not None:
            job["spec"]["checkpoints"]["externalLocation"] = f"file://{snapshots}/rmi-{i}"
            job["spec"]["checkpoints"]["location"] = f"file://{snapshots}/checkpoints/rmi-{i}"
        bf["metadata"]["name"] = f"rmi-{i}-bf"
        bf["spec"]["jobRef"] = {"name": f"rmi-{i}"}
        out += [(jobs, f"rmi-{i}", job), (backfills, f"rmi-{i}-bf", bf)]
    return out


def app_of(name: str) -> str:
    """The SparkApplication of a bench object: a StreamingJob's has its name, a Backfill's
    ``<name>-backfill``."""
    return f"{name}-backfill" if name.endswith("-bf") else name


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
    apps = {app_of(name): name for name in names}
    deadline = time.monotonic() + timeout
    while len(seen) < len(names):
        now = time.monotonic()
        for app in present_apps(emulator) & apps.keys():
            seen.setdefault(apps[app], now)
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
            created[name] = time.monotonic()  # from the first try: a server's 429 counts in the latency
            while True:
                async with http.post(base + collection, json=body) as r:
                    if r.status == 429:  # as kubectl does: wait Retry-After (a CRD's storage starting, APF)
                        await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                    assert r.status < 300, await r.text()
                    return

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


# --- a real kube-apiserver (--real-apiserver) ----------------------------------------------

KAPPA, SPARK = "/apis/kappa.dev/v1alpha1", "/apis/sparkoperator.k8s.io/v1beta2"
METADATA_ONLY = "application/json;as=PartialObjectMetadata{};g=meta.k8s.io;v=v1"
"""What a metadata-only client asks for (``{}``: ``List`` for a list): names without bodies."""


def collection(plural: str, namespace: str) -> str:
    group = SPARK if plural == "sparkapplications" else KAPPA
    return f"{group}/namespaces/{namespace}/{plural}"


def proc_status(pid: int, key: str) -> int:
    """A /proc/<pid>/status field in bytes (VmRSS, VmHWM: kB there)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


@dataclass
class Tracker:
    """A collection followed as a controller follows it (list, then watch from the list's
    resourceVersion): when each name was first seen, when it was seen deleted, its phase."""

    url: str
    metadata_only: bool = False
    added: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)
    phases: dict[str, str] = field(default_factory=dict)
    uids: dict[str, set[str]] = field(default_factory=dict)
    """Every uid seen under a name: more than one, the name was created again (handled twice)."""
    events: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def see(self, kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if uid := obj["metadata"].get("uid"):
            self.uids.setdefault(name, set()).add(uid)
        self.events += 1
        if kind == "DELETED":
            self.present.discard(name)
            self.deleted[name] = now
            return
        self.present.add(name)
        self.added.setdefault(name, now)
        phase = (obj.get("status") or {}).get("phase")
        if phase:
            self.phases[name] = phase

    async def list(self, http: aiohttp.ClientSession) -> str:
        """Lists the collection (what a relist finds gone was deleted meanwhile); its version."""
        headers = {"Accept": METADATA_ONLY.format("List")} if self.metadata_only else {}
        while True:
            async with http.get(self.url, headers=headers) as r:
                if r.status == 429:  # "storage is (re)initializing": a CRD's watch cache starting
                    await asyncio.sleep(1.0)
                    continue
                assert r.status == 200, await r.text()
                listed = json.loads(await r.read())
            break
        now = time.monotonic()
        items = listed.get("items") or []  # a metadata-only list of nothing: null
        for name in self.present - {item["metadata"]["name"] for item in items}:
            self.see("DELETED", {"metadata": {"name": name}}, now)
        for item in items:
            self.see("ADDED", item, now)
        return str(listed["metadata"]["resourceVersion"])

    async def run(self, http: aiohttp.ClientSession) -> None:
        headers = {"Accept": METADATA_ONLY.format("")} if self.metadata_only else {}
        version = await self.list(http)
        self.ready.set()
        while True:
            params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
            async with http.get(
                self.url, params=params, headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)
            ) as r:
                if r.status in (410, 429):  # too old: relist; the watch cache (re)initializing: again
                    await asyncio.sleep(1.0 if r.status == 429 else 0)
                    version = await self.list(http) if r.status == 410 else version
                    continue
                assert r.status == 200, await r.text()
                async for line in r.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        if event["object"].get("code") in (410, 429):
                            version = await self.list(http)
                            break
                        raise RuntimeError(f"watch {self.url}: {event['object']}")
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.see(event["type"], event["object"], time.monotonic())


class Procs:
    """CPU seconds of the operator and of the control plane's processes, by name."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()} | {"bench": time.process_time()}

    @staticmethod
    def shares(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
        return {name: round((after[name] - before[name]) / seconds, 3) for name in before}


def quantiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"p50_s": round(q[49], 3), "p99_s": round(q[98], 3), "max_s": round(values[-1], 3)}


REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.MULTILINE)


async def server_requests(http: aiohttp.ClientSession, server: str) -> dict[str, float]:
    """kube-apiserver's own count of the requests it served (all clients: the operator, the
    bench, the controller manager), by verb and resource: what each object costs the server."""
    async with http.get(server + "/metrics") as r:
        assert r.status == 200, await r.text()
        text = await r.text()
    out: dict[str, float] = {}
    for m in REQUEST_TOTAL.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("code") == "429":  # refused by priority and fairness, whatever the verb
            out["429"] = out.get("429", 0.0) + float(m["value"])
        if labels.get("verb") in ("WATCH", "CONNECT"):
            continue
        what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        key = f"{labels.get('verb')} {what}"
        out[key] = out.get(key, 0.0) + float(m["value"])
    return out


def per_object(before: dict[str, float], after: dict[str, float], n: int, top: int = 14) -> dict[str, float]:
    """Requests per object between two counts, the largest first (and their total)."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    rows = sorted(((v / n, k) for k, v in delta.items() if v > 0), reverse=True)
    return {"total": round(sum(v for v, _ in rows), 2)} | {k: round(v, 2) for v, k in rows[:top]}


async def until(
    check: Any, trackers: list[asyncio.Task[None]], what: str, timeout: float, every: float = 0.02
) -> float:
    """Polls ``check()`` (the trackers' state, in this process) until true; the time then.
    A watch that failed fails the wait."""
    deadline = time.monotonic() + timeout
    while not check():
        for task in trackers:
            if task.done():
                task.result()
                raise RuntimeError(f"a watch ended while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        await asyncio.sleep(every)
    return time.monotonic()


async def real_load(
    server: str,
    token: str,
    ca: Path,
    namespace: str,
    pids: dict[str, int],
    n: int,
    concurrency: int,
    timeout: float,
    snapshots: Path,
    metrics_url: str,
    follow_s: float = FOLLOW_S,
) -> dict[str, Any]:
    pid = pids["operator"]
    procs = Procs(pids)
    ssl_context = ssl.create_default_context(cafile=str(ca))
    connector = aiohttp.TCPConnector(limit=concurrency + 8, ssl=ssl_context)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(connector=connector, headers=headers, read_bufsize=1 << 22) as http:
        jobs = Tracker(server + collection("streamingjobs", namespace))
        backfills = Tracker(server + collection("backfills", namespace))
        apps = Tracker(server + collection("sparkapplications", namespace), metadata_only=True)
        trackers = [asyncio.create_task(t.run(http)) for t in (jobs, backfills, apps)]
        try:
            await until(lambda: all(t.ready.is_set() for t in (jobs, backfills, apps)), trackers, "the watches", 60)
            await quiet(pid)

            # baseline: one job alone on the idle operator, created and deleted
            created: dict[str, float] = {}
            alone = example("rmi-streamingjob.yaml", namespace)
            alone["metadata"]["name"] = "baseline"
            alone["spec"]["checkpoints"]["externalLocation"] = f"file://{snapshots}/baseline"
            alone["spec"]["checkpoints"]["location"] = f"file://{snapshots}/checkpoints/baseline"
            await create(http, server, [(collection("streamingjobs", namespace), "baseline", alone)], created, 1)
            seen = await until(lambda: "baseline" in apps.added, trackers, "the baseline's application", timeout)
            baseline = seen - created["baseline"]
            await until(lambda: jobs.phases.get("baseline"), trackers, "the baseline's status", timeout)
            await quiet(pid)
            start = time.monotonic()
            async with http.delete(server + collection("streamingjobs", namespace) + "/baseline") as r:
                assert r.status < 300, await r.text()
            gone = await until(
                lambda: "baseline" not in jobs.present | apps.present, trackers, "the baseline gone", timeout
            )
            baseline_delete = gone - start
            await quiet(pid)

            idle_from, idle_cpu = time.monotonic(), cpu_seconds(pid)
            await asyncio.sleep(3.0)
            idle_rate = (cpu_seconds(pid) - idle_cpu) / (time.monotonic() - idle_from)
            rss_idle = proc_status(pid, "VmRSS")

            # N at once
            items = objects(n, namespace, snapshots)
            names = [name for _, name, _ in items]
            created = {}
            requests0 = await server_requests(http, server)
            load_start = start = time.monotonic()
            cpu0 = procs.cpu()
            await create(http, server, items, created, concurrency)
            created_s = time.monotonic() - start
            all_present = await until(
                lambda: all(app_of(x) in apps.added for x in names), trackers, f"{n} SparkApplications", timeout
            )
            latency = [apps.added[app_of(x)] - created[x] for x in names]
            done = await until(
                lambda: all(x in jobs.phases or x in backfills.phases for x in names),
                trackers,
                "a status on every object",
                timeout,
            )
            elapsed = done - start
            cpu1 = procs.cpu()
            requests1 = await server_requests(http, server)
            cpu = cpu1["operator"] - cpu0["operator"] - idle_rate * elapsed
            rss_loaded = proc_status(pid, "VmRSS")
            phases: dict[str, int] = {}
            for x in names:
                phase = jobs.phases.get(x) or backfills.phases.get(x) or "?"
                phases[phase] = phases.get(phase, 0) + 1

            # steady state: the Backfills' timers and the live jobs' progress timer (its first tick
            # 30 s after each job's start, the chart's liveJobs.progressInterval), nothing else
            await asyncio.sleep(10.0)
            follow0, follow_from = cpu_seconds(pid), time.monotonic()
            steady0, stores0 = await server_requests(http, server), await store_requests(http, metrics_url)
            await asyncio.sleep(follow_s - 10.0)
            steady1, stores1 = await server_requests(http, server), await store_requests(http, metrics_url)
            minutes = (time.monotonic() - follow_from) / 60
            follow_share = (cpu_seconds(pid) - follow0) / (time.monotonic() - follow_from)
            jobs_n = sum(1 for x in names if not x.endswith("-bf"))
            steady = {
                "seconds": round(minutes * 60, 1),
                "api_requests_per_object_per_minute": per_object(steady0, steady1, round(n * minutes) or 1),
                "store_requests_per_job_per_minute": {
                    op: round((stores1.get(op, 0) - stores0.get(op, 0)) / jobs_n / minutes, 2) for op in stores1
                },
            }
            metrics = await scrape(http, metrics_url)
            print(f"bench.operator: /metrics at {n} objects: {json.dumps(metrics)}", file=sys.stderr, flush=True)

            # all deleted at once: one deletecollection per kind, both in flight together
            async with http.get(f"{server}/api/v1/namespaces/{namespace}/events") as r:
                assert r.status == 200, await r.text()
                posted: dict[str, int] = {}
                for event in json.loads(await r.read())["items"]:
                    key = f"{event.get('type')} {event.get('reason')}"
                    posted[key] = posted.get(key, 0) + int(event.get("count") or 1)
            requests2 = await server_requests(http, server)
            start, dcpu0 = time.monotonic(), procs.cpu()

            async def delete_all(plural: str) -> float:
                # A deletecollection longer than the server's request timeout (60 s: 2,000
                # objects on a slow machine) answers 504, or its connection closes, with part of
                # the collection deleted; asked again, it deletes the rest.
                url = server + collection(plural, namespace)
                while True:
                    try:
                        async with http.delete(
                            url, params={"propagationPolicy": "Background"}, timeout=aiohttp.ClientTimeout(total=None)
                        ) as r:
                            if r.status == 504:
                                continue
                            assert r.status < 300, await r.text()
                            await r.read()
                    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError):
                        continue  # the same, the connection closed instead (before or in its body)
                    return time.monotonic() - start

            requests_s = max(await asyncio.gather(delete_all("streamingjobs"), delete_all("backfills")))
            crs_gone = await until(lambda: not (jobs.present | backfills.present), trackers, f"{n} CRs gone", timeout)
            all_gone = await until(lambda: not apps.present, trackers, "every SparkApplication gone", timeout)
            dcpu1 = procs.cpu()
            requests3 = await server_requests(http, server)
            gone_latency = [(jobs.deleted.get(x) or backfills.deleted[x]) - start for x in names]
            delete_cpu = dcpu1["operator"] - dcpu0["operator"] - idle_rate * (all_gone - start)
            peak = proc_status(pid, "VmHWM")
        finally:
            for task in trackers:
                task.cancel()
    create_q = quantiles(latency)
    delete_q = quantiles(gone_latency)
    by_kind = {
        kind: {
            "create": quantiles([v for x, v in zip(names, latency, strict=True) if x.endswith("-bf") == bf]),
            "gone": quantiles([v for x, v in zip(names, gone_latency, strict=True) if x.endswith("-bf") == bf]),
        }
        for kind, bf in (("StreamingJob", False), ("Backfill", True))
    }
    return {
        "objects": n,
        **create_q,
        "by_kind": by_kind,
        "baseline_single_s": round(baseline, 3),
        "created_in_s": round(created_s, 2),
        "all_present_s": round(all_present - load_start, 2),
        "objects_per_s": round(n / (all_present - load_start), 1),
        "reconciled_s": round(elapsed, 2),
        "phases": phases,
        "cpu_ms_per_object": round(cpu * 1000 / n, 2),
        "operator_cpu_share": round(cpu / elapsed, 3),
        "idle_cpu_share": round(idle_rate, 4),
        "cpu_share_while_creating": Procs.shares(cpu0, cpu1, elapsed),
        "cpu_ms_per_object_by_process": {k: round((cpu1[k] - cpu0[k]) * 1000 / n, 1) for k in cpu0},
        "following_cpu_share": round(follow_share, 3),
        "following_backfills": n // 2,
        "metrics": metrics,
        "rss_idle_mb": round(rss_idle / 2**20, 1),
        "rss_after_create_mb": round(rss_loaded / 2**20, 1),
        "peak_rss_mb": round(peak / 2**20, 1),
        "delete": {
            "requests_s": round(requests_s, 2),
            "crs_gone_s": round(crs_gone - start, 2),
            "all_gone_s": round(all_gone - start, 2),
            "cr_gone_p50_s": delete_q["p50_s"],
            "cr_gone_p99_s": delete_q["p99_s"],
            "baseline_single_s": round(baseline_delete, 3),
            "cpu_ms_per_object": round(delete_cpu * 1000 / n, 2),
            "cpu_share": Procs.shares(dcpu0, dcpu1, all_gone - start),
        },
        "events_before_delete": posted,
        "server_requests_per_object": {
            "create": per_object(requests0, requests1, n),
            f"follow_{follow_s:.0f}s": per_object(requests1, requests2, n),
            "delete": per_object(requests2, requests3, n),
        },
        "watch_events": {"streamingjobs": jobs.events, "backfills": backfills.events, "sparkapplications": apps.events},
        "steady_state": steady,
        "refused_429": round(requests3.get("429", 0.0)),
        "applications_created_twice": sorted(name for name, uids in apps.uids.items() if len(uids) > 1),
        "objects_left": sorted(jobs.present | backfills.present | apps.present),
    }


OBJECT_LABELS = ("streamingjob", "backfill")
"""The labels that name one custom resource: a series carrying one exists once per object."""


def series_summary(exposition: str) -> dict[str, Any]:
    """What one scrape of ``/metrics`` holds: series in all, per metric family (the most first),
    and how many name one StreamingJob or Backfill (``OBJECT_LABELS``, the part that grows with
    the objects). Pure."""
    from prometheus_client.parser import text_string_to_metric_families

    by_family: dict[str, int] = {}
    per_object = 0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            by_family[family.name] = by_family.get(family.name, 0) + 1
            per_object += any(label in sample.labels for label in OBJECT_LABELS)
    ordered = dict(sorted(by_family.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"series": sum(by_family.values()), "naming_an_object": per_object, "by_family": ordered}


STORE_REQUESTS = re.compile(r'^kappa_operator_store_requests_total\{op="(?P<op>\w+)"\} (?P<value>\S+)$', re.MULTILINE)


async def store_requests(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """What the operator asked the jobs' stores so far, by operation (its own counter)."""
    async with http.get(url, ssl=False) as r:
        assert r.status == 200, await r.text()
        text = await r.text()
    return {m["op"]: float(m["value"]) for m in STORE_REQUESTS.finditer(text)}


async def scrape(http: aiohttp.ClientSession, url: str, times: int = 5) -> dict[str, Any]:
    """The operator's ``/metrics`` scraped ``times`` times, one after another as Prometheus does
    (issue 61: at 1,000 StreamingJobs, how many series, and an answer in under a second)."""
    seconds, body = [], ""
    for _ in range(times):
        start = time.monotonic()
        async with http.get(url, ssl=False) as r:
            assert r.status == 200, await r.text()
            body = await r.text()
        seconds.append(time.monotonic() - start)
    return {
        **series_summary(body),
        "bytes": len(body.encode()),
        "scrape_s": {"p50": round(statistics.median(seconds), 3), "max": round(max(seconds), 3)},
        "scrapes": times,
    }


def log_summary(log: Path) -> dict[str, Any]:
    """What the operator's log says: lines by level, refusals by the server (HTTP codes in
    warnings and errors), and how often each handler ran (kopf's "Handler 'x' succeeded."; a
    handler that ran more often than there are objects re-ran on a state kopf saw as new)."""
    counts: dict[str, Any] = {"lines": 0, "warning": 0, "error": 0, "403": 0, "409": 0, "422": 0}
    runs: dict[str, int] = {}
    samples: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        counts["lines"] += 1
        parts = line.split(" ", 4)
        level = parts[3] if len(parts) > 4 and line[:4].isdigit() else ""
        if level in ("WARNING", "ERROR", "CRITICAL"):
            counts["warning" if level == "WARNING" else "error"] += 1
            if len(samples) < 5:  # what they said: a count alone cannot be acted on
                samples.append(line[:400])
            for code in set(re.findall(r"\b(403|409|422)\b", parts[4])):
                counts[code] += 1
        found = re.match(r"(?:Handler|Timer) '(\w+)' (succeeded|failed)", parts[4] if len(parts) > 4 else "")
        if found:
            key = found[1] if found[2] == "succeeded" else f"{found[1]} (failed)"
            runs[key] = runs.get(key, 0) + 1
    return counts | {"handler_runs": runs, "samples": samples}


def real_server(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The control plane, the chart installed by helm, the operator as the chart runs it, and
    the load; everything stopped and removed after (``--workdir``: kept there)."""
    from harness.chart import (
        OPERATOR_NAMESPACE,
        RELEASE,
        Helm,
        crd_documents,
        grant_coordinator_secrets,
        install,
    )
    from harness.operator_process import running_operator
    from kappa_operator.local_cluster.control_plane import ControlPlane, binaries

    parts = binaries()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kappa-bench-operator-"))
    plane = ControlPlane.start(
        workdir / "control-plane", parts.current, audit=False, max_requests_inflight=args.max_requests_inflight
    )
    try:
        plane.apply_manifests(crd_documents())
        admin = plane.write_kubeconfig(workdir / "admin.kubeconfig", plane.admin_token, "kappa-admin")
        helm = Helm(parts.helm, admin)
        installed = install(plane, helm, RELEASE, OPERATOR_NAMESPACE)
        namespace = plane.namespace(args.namespace)
        grant_coordinator_secrets(plane, installed, namespace)
        (workdir / "snapshots").mkdir(exist_ok=True)
        env = dict(pair.split("=", 1) for pair in args.operator_env)
        with running_operator(
            plane, installed.namespace, installed.args, installed.kubeconfig, workdir / "operator", env
        ) as operator:
            pids = {"operator": operator.proc.pid} | {Path(p.args[0]).name: p.pid for p in plane.procs}
            try:
                result = asyncio.run(
                    real_load(
                        plane.server,
                        plane.admin_token,
                        plane.ca,
                        namespace,
                        pids,
                        args.objects,
                        args.concurrency,
                        args.timeout,
                        workdir / "snapshots",
                        operator.metrics_url,
                        args.follow,
                    )
                )
            finally:
                shutil.copyfile(operator.log, args.log)
        result["operator_log"] = log_summary(args.log)
        config = {
            "concurrency": args.concurrency,
            "server": f"kube-apiserver {plane.version} (etcd {etcd_version()}, kube-controller-manager, RBAC, "
            f"audit off, --max-requests-inflight={args.max_requests_inflight})",
            "helm": helm("version", "--short").stdout.strip(),
            "operator": "kappa operator (subprocess), the chart's Deployment args and ServiceAccount token",
            "namespace": namespace,
            "operator_env": env,
        }
    finally:
        plane.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return result, config


def etcd_version() -> str:
    from kappa_operator.local_cluster.control_plane import etcd_binary

    out = subprocess.run([etcd_binary(), "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0].split()[-1] if out else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--objects", type=int, default=1000, help="StreamingJobs + Backfills (half each)")
    p.add_argument("--concurrency", type=int, default=16, help="creates in flight")
    p.add_argument("--timeout", type=float, default=900, help="give up after this many seconds")
    p.add_argument("--log", type=Path, default=Path("/tmp/kappa-bench-operator.log"), help="the operator's log")
    p.add_argument(
        "--real-apiserver",
        action="store_true",
        help="against a real kube-apiserver (built by cluster/build.sh), the chart installed by helm",
    )
    p.add_argument("--namespace", default="kappa-bench", help="(real server) the namespace of the objects")
    p.add_argument(
        "--follow",
        type=float,
        default=FOLLOW_S,
        metavar="SECONDS",
        help="(real server) how long every object is followed before the deletion (the steady state: all but "
        "its first 10 s)",
    )
    p.add_argument(
        "--max-requests-inflight",
        type=int,
        default=800,
        metavar="N",
        help="(real server) kube-apiserver's --max-requests-inflight (mutating: N/2); low, it answers 429s",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="(real server) the control plane's directory, kept after (default: a temporary one)",
    )
    p.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="(real server) an environment variable of the operator process (repeatable)",
    )
    args = p.parse_args(argv)
    machine = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    if args.real_apiserver:
        result, config = real_server(args)
    else:
        result = asyncio.run(run(args.objects, args.concurrency, args.timeout, args.log))
        config = {"concurrency": args.concurrency, "emulator": "kmock", "operator": "kappa operator (subprocess)"}
    machine["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    out = {**result, "machine": machine, "config": config}
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
