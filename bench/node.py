"""A Backfill on the real one-node cluster, from `kubectl apply` to `Succeeded`, split into where
the time goes; baseline, measured in the same run: the same Backfill run by `kappa run` on this
machine (local Spark, the same tables on the same S3 API and catalog database).

The cluster is `kappa cluster up`'s (kappa_operator/local_cluster: the node, CoreDNS, the
spark-operator and kappa installed by their charts, moto's S3 and PostgreSQL on the node's
bridge), started in a temporary directory: its ports must be free (`kappa cluster down`
first). The example data (`kappa example-data`'s: 8 hours, 20,000 impressions an hour) is
written to the catalog, the example StreamingJob runs until it has read the history
(``caught_up``: the Backfill then validates against a full main, and does not share the two
cores with the live job's catch-up), and the example Backfill (14:00-18:00, two sources,
publish) is applied with kubectl. Its phases, from the API's own timestamps and
the driver's log:

- ``operator``: Backfill created -> its SparkApplication created (kappa's render);
- ``submission``: SparkApplication -> driver pod created (the spark-operator's spark-submit);
- ``scheduling``: driver pod created -> scheduled;
- ``image_start``: scheduled -> driver container started (sandbox, image, container);
- ``spark_start``: container started -> the first task on an executor (driver JVM and
  SparkContext, the executor pod's scheduling and start, registration, the plan);
- ``data_and_publish``: first task -> driver container finished (the backfill's batches and
  commits, then its validation against main and the publish, in the same driver: issue 58);
- ``report``: driver finished -> Backfill Succeeded (the operator sees the application
  COMPLETED and ends on the publish report the driver left).

Then the same Backfill again with its tasks in its driver (``executor.instances: 0``, the
driver's two cores: `kappa run`'s ``local[2]``), measured the same way (``in_driver_*``):
what a Backfill small enough for one pod costs when it asks for no executor.

Needs root (the node). Run from the repository root::

    .venv/bin/python -m bench.node --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.local.example_data import HOURS, PER_HOUR, START
from kappa_operator.local_cluster.cluster import JOBS, LocalCluster
from kappa_operator.local_cluster.control_plane import ROOT, eventually
from kappa_operator.local_cluster.rest import path_of
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.jvm import class_sharing

LOG_TIME = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) ")


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def log_time(line: str) -> float | None:
    found = LOG_TIME.match(line)
    return datetime.strptime(found.group(1), "%y/%m/%d %H:%M:%S").replace(tzinfo=UTC).timestamp() if found else None


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(cluster.parts.current / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return done.stdout


def get(cluster: LocalCluster, kind: str, name: str) -> dict[str, Any]:
    return cluster.kube.plane.admin.get(path_of(kind, JOBS, name)).body


def phases(cluster: LocalCluster, name: str, keep: Path) -> dict[str, float]:
    """The Backfill's phases (seconds), from the objects' timestamps and the driver's log (kept
    in ``keep``, for the stages' own times: `Job N finished ... took` lines)."""
    bf = get(cluster, "Backfill", name)
    app_name = bf["status"]["applicationName"]
    app = get(cluster, "SparkApplication", app_name)
    driver = get(cluster, "Pod", f"{app_name}-driver")
    scheduled = next(c for c in driver["status"]["conditions"] if c["type"] == "PodScheduled")
    state = driver["status"]["containerStatuses"][0]["state"]["terminated"]
    log = cluster.kube.pod_log(JOBS, f"{app_name}-driver")
    (keep / f"{app_name}-driver.log").write_text(log)
    first_task = next(t for line in log.splitlines() if "Starting task" in line and (t := log_time(line)))
    done = next(c for c in bf["status"]["conditions"] if c["type"] == "Succeeded")
    marks = [
        ts(bf["metadata"]["creationTimestamp"]),
        ts(app["metadata"]["creationTimestamp"]),
        ts(driver["metadata"]["creationTimestamp"]),
        ts(scheduled["lastTransitionTime"]),
        ts(state["startedAt"]),
        first_task,
        ts(state["finishedAt"]),
        ts(done["lastTransitionTime"]),
    ]
    names = ("operator", "submission", "scheduling", "image_start", "spark_start", "data_and_publish", "report")
    out: dict[str, Any] = {n: round(b - a, 1) for n, a, b in zip(names, marks, marks[1:], strict=False)}
    out["total"] = round(marks[-1] - marks[0], 1)
    out["spark_start_split"] = spark_start_split(log, ts(state["startedAt"]), first_task)
    return out


SPARK_START_MARKS = (
    ("driver_jvm_and_python", "Running Spark version"),
    ("spark_context", "Going to request"),
    ("executor_pod_and_jvm", "Registered executor"),
)
"""Where the spark_start phase goes, from the driver's log (whole seconds): the container's
start to the SparkContext's first line (spark-submit's launcher and driver JVMs, Python), to
the executors asked of Kubernetes (the SparkContext), to the first executor registered (its
pod scheduled and started, its JVM), and the rest to the first task (what the driver still
plans once an executor is there)."""


def spark_start_split(log: str, started: float, first_task: float) -> dict[str, float]:
    """``spark_start`` split by ``SPARK_START_MARKS``; a mark missing from the log is left out."""
    out, last = {}, started
    for name, text in SPARK_START_MARKS:
        seen = next((t for line in log.splitlines() if text in line and (t := log_time(line))), None)
        if seen is None:
            continue
        out[name] = round(seen - last, 1)
        last = seen
    out["plan_until_first_task"] = round(first_task - last, 1)
    return out


def caught_up(job: dict[str, Any]) -> bool:
    """Whether the live job has read the history: each of its sink queries reported an idle event
    (its trigger found nothing new) after its last batch, or after its start where a restarted
    query had nothing left to read. Until then it reads the history batch after batch, on the
    same two cores as the Backfill measured next: its first batch alone (what this waited for
    until 2026-11-30) left the Backfill sharing them with the rest of the catch-up, and `kappa
    run`, measured last, did not (bench/RESULTS.md)."""
    progress = (job.get("status") or {}).get("progress") or []
    return bool(progress) and all(p.get("lastHeartbeat") and ts(p["lastHeartbeat"]) > ts(p["at"]) for p in progress)


def applied_and_finished(cluster: LocalCluster, backfill: dict[str, Any]) -> dict[str, Any]:
    """``backfill`` applied with kubectl; its status once Succeeded (a failure raises)."""
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(backfill))
    name = backfill["metadata"]["name"]

    def finished() -> dict[str, Any] | None:
        status = get(cluster, "Backfill", name).get("status") or {}
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = eventually(finished, f"Backfill {name} to finish", timeout=1800, every=1)
    if status["phase"] != "Succeeded":
        raise RuntimeError(f"Backfill {name} failed: {status.get('message')}")
    return status


def image_sizes(nodes: list[dict[str, Any]]) -> dict[str, float]:
    """MB of each image as containerd reports it, through the kubelets' ``status.images`` of
    ``nodes``: the content containerd stores (compressed layers), what a node pulls and keeps
    (issue 58's measure). The largest a node reports, for an image on several."""
    sizes: dict[str, float] = {}
    for node in nodes:
        for image in node["status"].get("images") or []:
            named = [n for n in image["names"] if "@sha256:" not in n] or image["names"]
            mb = round(image["sizeBytes"] / 1e6, 1)
            sizes[named[-1]] = max(mb, sizes.get(named[-1], 0.0))
    return dict(sorted(sizes.items()))


def run(workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    cluster = LocalCluster.up(workdir / "cluster")
    up_s = time.monotonic() - started
    try:
        catalog = cluster.host_catalog()
        gen = GeneratorConfig(START, HOURS, PER_HOUR, commit_interval=timedelta(minutes=5), namespace="ingest")
        stats = generate(catalog, gen)
        job = cluster.streaming_job(yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text()))
        for source in job["spec"]["sources"].values():
            source["live"]["startingPosition"] = "earliest"
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))

        eventually(
            lambda: caught_up(get(cluster, "StreamingJob", "rmi")), "the live job caught up", timeout=900, every=2
        )
        backfill = yaml.safe_load((ROOT / "examples" / "rmi-backfill.yaml").read_text())
        name = backfill["metadata"]["name"]
        status = applied_and_finished(cluster, backfill)
        node = phases(cluster, name, workdir)
        apps = cluster.kube.plane.admin.get(path_of("SparkApplication", JOBS)).body.get("items") or []
        ran = sorted(a["metadata"]["name"] for a in apps if a["metadata"]["name"].startswith(f"{name}-"))
        # the same Backfill with its tasks in its driver (executor.instances 0, the driver's two
        # cores as local[2]'s): no executor pod to start, no hops between JVMs
        in_driver = json.loads(json.dumps(backfill))
        in_driver["metadata"]["name"] = f"{name}-in-driver"
        in_driver["spec"]["executor"], in_driver["spec"]["driver"] = {"instances": 0}, {"cores": 2}
        in_driver_status = applied_and_finished(cluster, in_driver)
        in_driver_node = phases(cluster, in_driver["metadata"]["name"], workdir)

        # baseline: the same Backfill by `kappa run`, on this machine, same tables
        local_dir = workdir / "kappa-run"
        local_dir.mkdir()
        (local_dir / "job.yaml").write_text(yaml.safe_dump(job))
        backfill["metadata"]["name"] = f"{name}-local"
        (local_dir / "backfill.yaml").write_text(yaml.safe_dump(backfill))
        t0 = time.monotonic()
        done = subprocess.run(
            [str(Path(sys.executable).parent / "kappa"), "run", str(local_dir / "backfill.yaml"),
             "--job", str(local_dir / "job.yaml"), "--state", str(local_dir / "objects")],
            capture_output=True, text=True, timeout=3600, env={**os.environ, **cluster.store.environment()},
        )  # fmt: skip
        local_s = time.monotonic() - t0
        if done.returncode != 0:
            raise RuntimeError(f"kappa run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        overhead = {k: v for k, v in node.items() if k not in ("data_and_publish", "total", "spark_start_split")}
        return {
            "bench": "node",
            "machine": f"{platform.node()} {os.cpu_count()} cores",
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "profile": {"hours": HOURS, "impressions_per_hour": PER_HOUR, "playbacks": stats.playbacks,
                        "window": backfill["spec"]["window"]},
            "cluster_up_s": round(up_s, 1),
            "images_mb_by_containerd": image_sizes(cluster.kube.plane.admin.get(path_of("Node")).body["items"]),
            "node_phases_s": node,
            "node_published": status.get("published"),
            "node_applications": ran,
            "kappa_run_s": round(local_s, 1),
            "kappa_run_class_sharing": bool(class_sharing.java_options()),
            "ratio_node_over_kappa_run": round(node["total"] / local_s, 2),
            "overhead_s": round(sum(overhead.values()), 1),
            "in_driver_phases_s": in_driver_node,
            "in_driver_published": in_driver_status.get("published"),
            "ratio_in_driver_over_kappa_run": round(in_driver_node["total"] / local_s, 2),
        }  # fmt: skip
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--workdir", type=Path, default=None, help="keep the cluster's files and the drivers' logs there")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        result = run(args.workdir or Path(tmp))
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
