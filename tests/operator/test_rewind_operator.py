"""A Rewind through the operator (a real ``kappa operator`` process) against the kmock
emulator, killed once in each phase and restarted: it walks Pending -> Stopping -> Restoring ->
Resuming -> Succeeded, and with ``downstream`` rewinds a second job that reads the first job's
table.

Every operator process runs with each function that reads rows or copies files made to raise
(``kube.DATA_PLANE``): the snapshots are copied and the sinks undone by the restore
applications the operator renders, which the test runs as the Spark operator would
(``python -m spark_app restore`` in a process of their own); the operator reads manifests and
reports and patches status.

Checkpoints are Spark-format directories written by the test (offsets, commits, metadata,
state files) and externalized with ``spark_app.checkpoints``; the sink tables are real
Iceberg tables (SQLite catalog) whose snapshots carry each batch's query and batch id, as
the exactly-once sink writes them. (The same path with real Spark is tests/spark.)"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from spark_app.checkpoints import externalize, list_snapshots, open_location
from tests.checkpoint_data import T0, live_ids, sink_batches, tree_hash, write_checkpoint
from tests.operator.apiserver import ApiServer
from tests.operator.kube import APPS, CMS, JOBS, Api, eventually, manifest, play_applications, register
from tests.operator.test_operator_restart import free_port, start, stop

REWINDS = "/apis/kappa.dev/v1alpha1/namespaces/default/rewinds"
PHASES = ("Stopping", "Restoring", "Resuming")


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_rewind_walks_every_phase_through_restarts_and_rewinds_downstream(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    register(kmock)
    kmock.resources["kappa.dev/v1alpha1/rewinds"] = kmock.ResourceInfo(
        kind="Rewind",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete", "update"},
        subresources={"status"},
        shortnames={"rw"},
    )
    base = str(kmock.url).rstrip("/")
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

    up = manifest("rmi-streamingjob.yaml", "uid-rmi")
    up["spec"]["catalogs"] = {"default": props}
    up["spec"]["checkpoints"] = {
        "location": str(tmp_path / "ckpt" / "rmi"),
        "externalLocation": str(tmp_path / "ext" / "rmi"),
    }
    down = manifest("rmi-streamingjob.yaml", "uid-titles")
    down["metadata"]["name"] = "titles"
    down["spec"].update(
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
    rw = yaml_rewind(target=(T0 + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ"))

    log, refused = tmp_path / "operator.log", tmp_path / "refused.txt"
    procs: list[Any] = []
    restores: list[tuple[str, int]] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)
        spark = asyncio.create_task(play_applications(api, "restore", tmp_path, restores))
        try:
            procs.append(await start(base, free_port(), log, kmock, refused=refused))
            await api.post(JOBS, up)
            await api.post(JOBS, down)
            await eventually(lambda: api.get(f"{APPS}/rmi"), "rmi's application")
            await eventually(lambda: api.get(f"{APPS}/titles"), "titles' application")
            await stop(procs[-1])

            # one operator per phase, each killed right after it records that phase
            for i, phase in enumerate(PHASES):
                proc = await start(base, free_port(), log, kmock, f"exit-in-phase:{phase}", refused)
                procs.append(proc)
                if i == 0:
                    await api.post(REWINDS, rw)
                assert await asyncio.wait_for(proc.wait(), 90) == 137, f"no crash in {phase}: {log.read_text()[-3000:]}"
                status = ((await api.get(f"{REWINDS}/rmi-before-outage")) or {}).get("status") or {}
                assert status.get("phase") == phase, f"expected to die in {phase}, status {status}"
            procs.append(await start(base, free_port(), log, kmock, refused=refused))

            async def succeeded(name: str) -> dict[str, Any] | None:
                s = ((await api.get(f"{REWINDS}/{name}")) or {}).get("status") or {}
                assert s.get("phase") != "Failed", s
                return s if s.get("phase") == "Succeeded" else None

            parent = await eventually(lambda: succeeded("rmi-before-outage"), "the rewind to succeed", 90)
            child = await eventually(lambda: succeeded("rmi-before-outage-titles"), "the downstream rewind", 90)
        finally:
            spark.cancel()
            for p in procs:
                await stop(p)

    assert not refused.exists(), f"the operator touched data: {refused.read_text()}"
    assert sorted(restores) == [("rmi-before-outage-rewind", 0), ("rmi-before-outage-titles-rewind", 0)]
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
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)
        job = await api.get(f"{JOBS}/rmi")
        annotations = job["metadata"].get("annotations") or {}  # type: ignore[index]
        assert annotations.get("kappa.dev/checkpoint-location") == parent["checkpointLocation"]
        assert "kappa.dev/paused-by" not in annotations
        cm = await api.get(f"{CMS}/rmi-jobconfig")
        assert json.loads(cm["data"]["job.json"])["checkpoint"]["location"] == parent["checkpointLocation"]  # type: ignore[index]
        assert await api.get(f"{APPS}/rmi") is not None


def yaml_rewind(target: str) -> dict[str, Any]:
    rw = manifest("rmi-rewind.yaml", "uid-rw-1234567")
    rw["spec"]["target"] = {"time": target}
    return rw
