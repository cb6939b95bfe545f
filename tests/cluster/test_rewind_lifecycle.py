"""A Rewind through the operator on the real kube-apiserver (``kappa operator`` with the
installed Deployment's arguments and the chart's ServiceAccount, processes of their own), killed
once in each phase and started again: it walks Pending -> Stopping -> Restoring -> Resuming ->
Succeeded, and with ``downstream`` rewinds a second job that reads the first job's table (a
Rewind the operator creates itself).

Every operator process runs with each function that reads rows or copies files made to raise
(``operator_runs.DATA_PLANE``): the snapshots are copied and the sinks undone by the restore
applications the operator renders, which the test runs as the Spark operator would (``python
-m spark_app restore`` in a process of their own); the operator reads manifests and reports and
patches status.

Checkpoints are Spark-format directories written by the test (offsets, commits, metadata,
state files) and externalized with ``spark_app.contract.checkpoints``; the sink tables are real Iceberg
tables (SQLite catalog) whose snapshots carry each batch's query and batch id, as the
exactly-once sink writes them. (The same path with real Spark is tests/spark.)
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from harness.chart import Installed, grant_coordinator_secrets
from harness.checkpoint_data import T0, live_ids, sink_batches, tree_hash, write_checkpoint
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from spark_app.contract.checkpoints import externalize, list_snapshots, open_location
from tests.cluster.operator_runs import Processes
from tests.cluster.spark_operator import APP, SparkPlayer, create, example, get, status

pytestmark = pytest.mark.usefixtures("never_forbidden")

PHASES = ("Stopping", "Restoring", "Resuming")
RW = "Rewind"


def test_rewind_walks_every_phase_through_restarts_and_rewinds_downstream(
    control_plane: ControlPlane, installed: Installed, own_operators: Processes, namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, namespace
    grant_coordinator_secrets(plane, installed, ns)
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    catalog = SqlCatalog("default", **{k: v for k, v in props.items() if k != "type"})
    catalog.create_namespace("marts")
    sink_batches(catalog, "marts.attributed_plays", "q-up", 6)
    sink_batches(catalog, "marts.plays_per_title", "q-down", 4)

    # live checkpoints and their snapshots: up at batches 2 and 5, down at 1 and 3
    live = {
        name: tmp_path / "ckpt" / name / "live" / sink
        for name, sink in (("rmi", "attributed_plays"), ("titles", "per_title"))
    }
    write_checkpoint(live["rmi"], "q-up", 6, minute=0)
    write_checkpoint(live["titles"], "q-down", 4, minute=5)
    for name, sink, cuts in (("rmi", "attributed_plays", (2, 5)), ("titles", "per_title", (1, 3))):
        external = open_location(str(tmp_path / "ext" / name / sink))
        for b in cuts:
            externalize(open_location(str(live[name])), external, batch_id=b)
    before = {name: tree_hash(p) for name, p in live.items()}
    up_points = list_snapshots(open_location(str(tmp_path / "ext" / "rmi" / "attributed_plays")))
    assert [m.batch_id for m in up_points] == [2, 5]

    up = example(
        "rmi-streamingjob.yaml",
        ns,
        catalogs={"default": props},
        checkpoints={"location": str(tmp_path / "ckpt" / "rmi"), "externalLocation": str(tmp_path / "ext" / "rmi")},
    )
    down = example(
        "rmi-streamingjob.yaml",
        ns,
        "titles",
        catalogs={"default": props},
        sources={
            "plays": {
                "live": {"kind": "icebergLive", "table": "marts.attributed_plays"},
                "history": {"table": "marts.attributed_plays"},
            }
        },
        sinks={"per_title": {"kind": "iceberg", "table": "marts.plays_per_title", "timeColumn": "playback_ts"}},
        checkpoints={
            "location": str(tmp_path / "ckpt" / "titles"),
            "externalLocation": str(tmp_path / "ext" / "titles"),
        },
    )
    rw = example("rmi-rewind.yaml", ns, target={"time": (T0 + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")})

    refused = tmp_path / "refused.txt"
    with SparkPlayer(plane, ns, "restore", tmp_path) as spark:
        first = own_operators.start(ns, refused=refused)
        create(plane, up)
        create(plane, down)
        eventually(lambda: get(plane, APP, ns, "rmi"), "rmi's application")
        eventually(lambda: get(plane, APP, ns, "titles"), "titles' application")
        first.stop()

        # one operator per phase, each killed right after it records that phase
        for i, phase in enumerate(PHASES):
            proc = own_operators.start(ns, fault=f"exit-in-phase:{phase}", refused=refused)
            if i == 0:
                create(plane, rw)
            assert proc.proc.wait(90) == 137, f"no crash in {phase}: {proc.tail()}"
            s = status(plane, RW, ns, "rmi-before-outage")
            assert s.get("phase") == phase, f"expected to die in {phase}, status {s}"
        own_operators.start(ns, refused=refused)

        def succeeded(name: str) -> dict[str, Any] | None:
            s = status(plane, RW, ns, name)
            assert s.get("phase") != "Failed", s
            return s if s.get("phase") == "Succeeded" else None

        parent = eventually(lambda: succeeded("rmi-before-outage"), "the rewind to succeed", 90)
        child = eventually(lambda: succeeded("rmi-before-outage-titles"), "the downstream rewind", 90)

    assert not refused.exists(), f"the operator touched data: {refused.read_text()}"
    assert sorted(spark.ran) == [("rmi-before-outage-rewind", 0), ("rmi-before-outage-titles-rewind", 0)]
    assert parent["restoreApplicationName"] == "rmi-before-outage-rewind"
    assert parent["restoreApplicationState"] == "COMPLETED"
    # upstream: restored at batch 2 (the newest snapshot before 12:30), batches 3-5 undone
    assert parent["restores"][0]["batchId"] == 2 and parent["restores"][0]["filesRemoved"] == 3
    assert parent["downstream"] == ["rmi-before-outage-titles"]
    assert live_ids(catalog, "marts.attributed_plays") == ["q-up-0", "q-up-1", "q-up-2"]
    # downstream: to before the first upstream output removed (batch 2's commit, 12:20): its batch 1
    assert child["restores"][0]["batchId"] == 1 and child["restores"][0]["filesRemoved"] == 2
    assert live_ids(catalog, "marts.plays_per_title") == ["q-down-0", "q-down-1"]

    # restored checkpoints: fresh directories ending at the restored batch, the same query resumed
    restored = Path(parent["checkpointLocation"]) / "attributed_plays"
    assert sorted(p.name for p in (restored / "commits").iterdir()) == ["0", "1", "2"]
    assert json.loads((restored / "metadata").read_text())["id"] == "q-up"
    assert {name: tree_hash(p) for name, p in live.items()} == before, "the live checkpoints are untouched"
    remaining = list_snapshots(open_location(str(tmp_path / "ext" / "rmi" / "attributed_plays")))
    assert [m.batch_id for m in remaining] == [2], "the abandoned timeline's snapshot is dropped"

    # the jobs run again from the restored checkpoints
    job = get(plane, "StreamingJob", ns, "rmi")
    assert job is not None
    annotations = job["metadata"].get("annotations") or {}
    assert annotations.get("kappa.dev/checkpoint-location") == parent["checkpointLocation"]
    assert "kappa.dev/paused-by" not in annotations
    cm = get(plane, "ConfigMap", ns, "rmi-jobconfig")
    assert cm is not None
    assert json.loads(cm["data"]["job.json"])["checkpoint"]["location"] == parent["checkpointLocation"]
    eventually(lambda: get(plane, APP, ns, "rmi"), "rmi's application again")
