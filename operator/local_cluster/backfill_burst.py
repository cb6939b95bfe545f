"""Many Backfills applied at once against a queue limit, on the one-node cluster: what a team
does after an outage (one Backfill per affected window, all `kubectl apply`d together) and
what the node test of the queue and `bench/node_queue.py` run. The limit is set as a user sets
it (`helm upgrade --set backfills.maxConcurrent=N`); the operator pod's memory is read from
/proc (its resident size sampled, its kernel high-water mark at the end)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import yaml

from kappa_operator.local.example_data import START
from kappa_operator.local_cluster.cluster import JOBS, OPERATOR_NAMESPACE, LocalCluster
from kappa_operator.local_cluster.control_plane import ROOT, eventually
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.reconcile.backfill_queue import ACTIVE

JOB = "burst"
WAVE_S = 6.0
"""How far apart the Backfills admitted by one freed wave may start: the operator looks at a
waiting Backfill every 5 s (``handlers.backfill.PROGRESS_INTERVAL``), this samples every second."""
ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Started:
    name: str
    priority: int
    phase: str
    started_s: float
    """When it was first seen holding a slot, in seconds after the Backfills were applied (seen
    every second: one restarted later keeps its first start)."""
    queued: bool
    """It waited in phase Queued (the first ones applied may find free slots)."""
    restarts: int
    mode: str | None = None
    """The alignment mode its driver ran (``alignment.mode: auto``, the default, resolved)."""


@dataclass
class Burst:
    count: int
    limit: int
    wall_s: float = 0.0
    max_running: int = 0
    """The most Backfills seen at once in a phase that holds a slot (sampled every second)."""
    max_drivers: int = 0
    """The most Backfill driver pods seen running (or starting) at once."""
    max_executors: int = 0
    """The most of their executor pods seen at once (none when their tasks run in the drivers)."""
    rss_before: int = 0
    """The operator's resident bytes before the Backfills were applied."""
    hwm_before: int = 0
    """Its high-water mark then (its start's own peak)."""
    rss_samples: list[int] = field(default_factory=list)
    rss_peak: int = 0
    """The operator process's peak resident bytes (VmHWM) at the end, since its start."""
    runs: list[Started] = field(default_factory=list)

    def out_of_order(self, within_s: float = 0.0) -> list[tuple[str, str]]:
        """(higher, lower) priority pairs of Backfills that waited where the lower one was
        seen running more than ``within_s`` before the higher one. When slots free at once,
        each waiting Backfill the queue admits submits on its own next look (within the
        operator's 5-s timer): ``within_s`` of a wave, its starts follow the timers."""
        waited = [r for r in self.runs if r.queued]
        return [
            (a.name, b.name)
            for a in waited
            for b in waited
            if a.priority > b.priority and a.started_s > b.started_s + within_s
        ]

    @property
    def growth(self) -> int:
        """How far the operator's resident memory rose over its idle size while they ran: the
        samples' maximum, or the high-water mark if the Backfills raised it."""
        peak = max([*self.rss_samples, self.rss_peak if self.rss_peak > self.hwm_before else 0])
        return max(peak - self.rss_before, 0)

    def summary(self) -> dict[str, Any]:
        mib = 1 << 20
        return {
            "backfills": self.count,
            "max_concurrent": self.limit,
            "wall_s": round(self.wall_s, 1),
            "max_running_seen": self.max_running,
            "max_driver_pods_seen": self.max_drivers,
            "max_executor_pods_seen": self.max_executors,
            "succeeded": sum(r.phase == "Succeeded" for r in self.runs),
            "restarts": sum(r.restarts for r in self.runs),
            "modes": sorted({str(r.mode) for r in self.runs}),
            "waited": sum(r.queued for r in self.runs),
            "out_of_order": len(self.out_of_order()),
            "out_of_order_beyond_a_wave": len(self.out_of_order(WAVE_S)),
            "operator_rss_before_mib": round(self.rss_before / mib, 1),
            "operator_rss_max_sampled_mib": round(max(self.rss_samples, default=0) / mib, 1),
            "operator_rss_end_mib": round((self.rss_samples or [0])[-1] / mib, 1),
            "operator_peak_rss_mib": round(self.rss_peak / mib, 1),
            "operator_growth_mib": round(self.growth / mib, 1),
        }


def backfills(cluster: LocalCluster, count: int, history_hours: int = 2) -> list[dict[str, Any]]:
    """``count`` small Backfills of the example job, 10-minute windows spread over the
    history, applied lowest priority first (the queue's order is the reverse of their age, so
    first come, first served would show); no publish (their branches are what they leave);
    the default alignment mode (auto: the example's range join runs bounded)."""
    spacing = (history_hours * 60 - 10) / max(count - 1, 1)
    out = []
    for i in range(count):
        start = START + timedelta(minutes=round(i * spacing))
        window = {
            "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end": (start + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "warmup": "0s",
            "allowShortWarmup": True,
        }
        out.append(
            {
                "apiVersion": "kappa.dev/v1alpha1",
                "kind": "Backfill",
                "metadata": {"name": f"{JOB}-{i:02d}", "namespace": JOBS},
                "spec": {
                    "jobRef": {"name": JOB},
                    "window": window,
                    "priority": i * 10 - 100,
                    "publish": {"enabled": False},
                },
            }
        )
    return out


def job(cluster: LocalCluster, in_driver: bool = False) -> dict[str, Any]:
    """The example StreamingJob, suspended (only its Backfills run), its pods' CPU requests
    small enough that the limit, not the node's 2 CPUs, is what holds the rest back.
    ``in_driver``: no executors, each Backfill's tasks on its driver's two cores."""
    example = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    example["metadata"]["name"] = JOB
    body = cluster.streaming_job(example, executors=0 if in_driver else None)
    body["spec"]["suspend"] = True
    body["spec"]["sinks"]["attributed_plays"]["table"] = f"marts.{JOB}_plays"
    body["spec"]["sparkConf"].update(
        {"spark.kubernetes.driver.request.cores": "100m", "spark.kubernetes.executor.request.cores": "100m"}
    )
    return body


def run(cluster: LocalCluster, count: int, limit: int, timeout: float = 3600, in_driver: bool = False) -> Burst:
    """Apply ``count`` Backfills at once under ``backfills.maxConcurrent: limit``, follow them
    to the end, then put the limit back (none) and delete them and their job (``in_driver``:
    theirs, ``job``'s)."""
    burst = Burst(count, limit)
    admin, kube = cluster.kube.plane.admin, cluster.kube
    cluster.upgrade_operator(**{"backfills.maxConcurrent": str(limit)})
    try:
        cluster.kube.plane.apply_manifests([job(cluster, in_driver)])
        operator = cluster.operator_pod()
        burst.rss_before, burst.hwm_before = kube.process_memory(OPERATOR_NAMESPACE, operator)
        began, first_active = time.monotonic(), dict[str, float]()
        cluster.kube.plane.apply_manifests(backfills(cluster, count))

        def ended() -> bool:
            items = admin.get(path_of("Backfill", JOBS)).body.get("items") or []
            mine = [b for b in items if b["metadata"]["name"].startswith(f"{JOB}-")]
            phases = [(b.get("status") or {}).get("phase") for b in mine]
            seen = time.monotonic() - began  # one time per look: those first seen together tie
            for b, phase in zip(mine, phases, strict=True):
                if phase in ACTIVE or phase in ENDED:
                    first_active.setdefault(b["metadata"]["name"], seen)
            burst.max_running = max(burst.max_running, sum(p in ACTIVE for p in phases))
            drivers = admin.get(path_of("Pod", JOBS) + "?labelSelector=spark-role=driver").body.get("items") or []
            live = [p for p in drivers if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
            burst.max_drivers = max(burst.max_drivers, sum(p["metadata"]["name"].startswith(f"{JOB}-") for p in live))
            executors = admin.get(path_of("Pod", JOBS) + "?labelSelector=spark-role=executor").body.get("items") or []
            app_of = [p["metadata"].get("labels", {}).get("sparkoperator.k8s.io/app-name", "") for p in executors]
            mine_executors = [a for a in app_of if a.startswith(f"{JOB}-")]
            burst.max_executors = max(burst.max_executors, len(mine_executors))
            burst.rss_samples.append(kube.process_memory(OPERATOR_NAMESPACE, operator)[0])
            return len(mine) == count and all(p in ENDED for p in phases)

        eventually(ended, f"{count} Backfills ended", timeout=timeout, every=1)
        burst.wall_s = time.monotonic() - began
        burst.rss_peak = kube.process_memory(OPERATOR_NAMESPACE, operator)[1]
        if cluster.operator_pod() != operator:
            raise AssertionError("the operator pod was replaced mid-burst: its memory is not one process's")
        for body in admin.get(path_of("Backfill", JOBS)).body.get("items") or []:
            if body["metadata"]["name"].startswith(f"{JOB}-"):
                st = body.get("status") or {}
                burst.runs.append(
                    Started(
                        body["metadata"]["name"],
                        int(body["spec"].get("priority") or 0),
                        str(st.get("phase")),
                        first_active[body["metadata"]["name"]],
                        bool(st.get("queuedSince")),
                        int(st.get("restarts") or 0),
                        st.get("alignmentMode"),
                    )
                )
        return burst
    finally:
        for body in admin.get(path_of("Backfill", JOBS)).body.get("items") or []:
            if body["metadata"]["name"].startswith(f"{JOB}-"):
                admin.delete(path_of("Backfill", JOBS, body["metadata"]["name"]))
        admin.delete(path_of("StreamingJob", JOBS, JOB))
        cluster.upgrade_operator(**{"backfills.maxConcurrent": "0"})
