"""The examples the other node tests do not run (issue 59: "every example runs" on the three
nodes), each applied with kubectl as its comment says, pointed at the cluster
(``LocalCluster.streaming_job``: its catalog, S3, image and sizes):
- ``enrich-streamingjob.yaml`` and its Backfill ``enrich-backfill.yaml`` (the price of the time
  from ``dims.promotions``' snapshots);
- ``enrich-changes-streamingjob.yaml`` and ``enrich-changes-backfill.yaml`` (the change log as
  a second, aligned source, joined in event time with state);
- ``own-pipeline/watch-time-streamingjob.yaml`` (a team's package, zipped and uploaded to S3,
  shipped to the pods by ``deps.pyFiles``);
- ``plays-labelled.yaml`` (a lookup service outside the cluster called once per row through the
  job's limiter; the service listens on the nodes' gateway, as S3 and the broker do).
The StreamingJobs run side by side until each sink holds the history; then the three Backfills
run side by side (their jobs suspended: a Backfill needs no live application) and publish, each
validated against what its live job wrote. (The rmi and Kafka examples: ``test_node.py``.)

Sized for two cores (``EXECUTORS``): the enrich jobs and their Backfills run their tasks in their
drivers (what they prove is their pipelines' output, and executor pods are the other node tests'
subject); watch-time and plays-labelled have one executor each, the pod their package is shipped
to and the service is called from. Twelve JVMs side by side were six."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from harness.external_service import RecordingService
from kappa_operator.local.example_data import START
from kappa_operator.local_cluster.addresses import GATEWAY
from kappa_operator.local_cluster.cluster import JOBS, LocalCluster
from kappa_operator.local_cluster.control_plane import ROOT, eventually
from kappa_operator.local_cluster.storage import BUCKET
from spark_app.examples.generator import GeneratedStats
from spark_app.examples.promotions import PromotionsConfig, write_promotions
from tests.node.objects import WINDOW, kubectl, phase_of, removed_after
from tests.spark.test_own_pipeline import package_zip

EXAMPLES = ROOT / "examples"
JOBS_AND_SINKS = {
    "enrich": ("enrich-streamingjob.yaml", "marts.priced_impressions"),
    "enrich-changes": ("enrich-changes-streamingjob.yaml", "marts.priced_impressions_by_changes"),
    "watch-time": ("own-pipeline/watch-time-streamingjob.yaml", "insights.engaged_plays"),
    "plays-labelled": ("plays-labelled.yaml", "insights.plays_labelled"),
}
BACKFILLS = {
    "enrich-reprice": "enrich-backfill.yaml",
    "enrich-changes-reprice": "enrich-changes-backfill.yaml",
    "plays-labelled-nov-1": "plays-labelled.yaml",
}
EXECUTORS = {"enrich": 0, "enrich-changes": 0, "watch-time": 1, "plays-labelled": 1}
"""Each job's executors (0: its tasks in its driver); its Backfill takes its job's."""
ZIP_KEY = "pipelines/watch_time-0.1.0.zip"


def documents(name: str) -> dict[str, dict[str, Any]]:
    """The example file's objects by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc}


def in_window(rows: pa.Table) -> int:
    """Rows whose event_ts is in the Backfills' window (``WINDOW``)."""
    ts = rows["event_ts"]
    zone = UTC if getattr(ts.type, "tz", None) else None
    start, end = (datetime.fromisoformat(WINDOW[k].replace("Z", "")).replace(tzinfo=zone) for k in ("start", "end"))
    inside = pc.and_(pc.greater_equal(ts, pa.scalar(start, ts.type)), pc.less(ts, pa.scalar(end, ts.type)))
    return int(pc.sum(inside).as_py() or 0)


def test_every_other_example_runs_on_the_three_nodes(
    cluster: LocalCluster, history: GeneratedStats, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    catalog = cluster.host_catalog()
    began = time.monotonic()
    write_promotions(catalog, PromotionsConfig(START, hours=2))
    archive = package_zip(tmp_path / "watch_time-0.1.0.zip")
    cluster.store.client().upload_file(str(archive), BUCKET, ZIP_KEY)
    objects = [("backfill", name) for name in BACKFILLS] + [("streamingjob", name) for name in JOBS_AND_SINKS]
    # the jobs deleted first, then the service they call stopped
    with RecordingService(host=GATEWAY) as service, removed_after(cluster, *objects):
        for name, (file, _) in JOBS_AND_SINKS.items():
            job = cluster.streaming_job(documents(file)["StreamingJob"], executors=EXECUTORS[name])
            assert job["metadata"]["name"] == name
            for source in job["spec"]["sources"].values():
                source["live"]["startingPosition"] = "earliest"
            job["spec"]["triggerInterval"] = "5s"
            if name == "watch-time":  # the team's bucket is the cluster's
                job["spec"]["deps"]["pyFiles"] = [f"s3a://{BUCKET}/{ZIP_KEY}"]
            if name == "plays-labelled":
                job["spec"]["pipelineArgs"]["url"] = service.url
            kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))

        # each live job through the history: every playback in the stateless jobs' sinks, and
        # every impression of the Backfills' window in the enrich jobs' (the changes join emits
        # a row once both sources' watermarks pass it), so that what each Backfill is validated
        # against is complete: a count that merely stopped moving may be a slow batch
        playbacks = catalog.load_table("ingest.playbacks").scan().to_arrow().num_rows
        impressions = in_window(catalog.load_table("ingest.impressions").scan().to_arrow())
        expected = {"enrich": impressions, "enrich-changes": impressions, "watch-time": playbacks}
        expected["plays-labelled"] = playbacks
        counts: dict[str, int] = {}

        def caught_up() -> bool:
            for name, (_, table) in JOBS_AND_SINKS.items():
                if catalog.table_exists(table):
                    rows = catalog.load_table(table).scan().to_arrow()
                    counts[name] = in_window(rows) if name.startswith("enrich") else rows.num_rows
            return all(counts.get(n) == expected[n] for n in JOBS_AND_SINKS)

        eventually(caught_up, f"every example's sink holding the history: {expected}", timeout=600, every=10)
        through_history = time.monotonic() - began
        assert playbacks >= history.playbacks and impressions > 0, (playbacks, impressions)
        calls = len(service.times())
        assert calls >= counts["plays-labelled"], "a call per row, from the executors on the nodes"

        for name in ("enrich", "enrich-changes", "plays-labelled"):
            kubectl(cluster, "patch", "sj", name, "--type", "merge", "-p", '{"spec":{"suspend":true}}')
        publishes = {}
        for name, file in BACKFILLS.items():
            body = documents(file)["Backfill"]
            publishes[name] = (body["spec"].get("publish") or {}).get("enabled", False)
            assert body["metadata"]["name"] == name
            body["metadata"]["namespace"] = JOBS
            body["spec"]["window"] = {**body["spec"]["window"], "start": WINDOW["start"], "end": WINDOW["end"]}
            kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(body))
        for name in BACKFILLS:
            status = eventually(
                lambda n=name: phase_of(cluster, "Backfill", n, "Succeeded", "Failed"),
                f"the Backfill {name}",
                timeout=600,
                every=3,
            )
            assert status["phase"] == "Succeeded", (name, status)
            if publishes[name]:  # validated against what the live job wrote, then published
                published = status.get("published") or []
                assert published and all(p["matchRatio"] >= 0.999 for p in published), (name, published)
            else:  # plays-labelled's: into its branch, left for a person to look at
                loaded = catalog.load_table(JOBS_AND_SINKS["plays-labelled"][1])
                ref = loaded.refs()[status["branch"]].snapshot_id
                rows = loaded.scan(snapshot_id=ref).to_arrow().to_pylist()
                assert rows and all(r["label"] == f"label-{r['title_id']}" for r in rows), status
        backfills = time.monotonic() - began - through_history
        said = json.loads(kubectl(cluster, "get", "bf", "plays-labelled-nov-1", "-n", JOBS, "-o", "json"))
        limit = said["status"]["externalCalls"]
        assert limit, said["status"]
        assert len(service.times()) > calls, "the Backfill called the service too"
    record_property(
        "measured",
        json.dumps(
            {
                "four_jobs_through_the_history_s": round(through_history, 1),
                "three_backfills_s": round(backfills, 1),
                "sink_rows": counts,
                "service_calls": len(service.times()),
            }
        ),
    )
