"""A Backfill's dry run through the operator process (kopf) against API-server semantics, with
the example's tables in a real local Iceberg catalog: ``spec.dryRun`` renders a plan
application (the test runs it as its pod would: ``python -m spark_app plan``), the operator
stops in Planned with the plan in status (no ETA yet: nothing calibrated) and submits nothing;
``dryRun: false`` runs it; once its driver's run report is there and the application completes,
it records its costs in status and in the namespace's calibration ConfigMap, and the next dry
run's plan has an ETA built from them. Inside the operator's process every function that
reads rows or copies files raises."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
from pyiceberg.catalog.sql import SqlCatalog

import kappa_operator.handlers as handlers
from kappa_operator.reconcile.estimates import CONFIG_MAP
from spark_app.config import parse_config
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.run_report import read_report, write_report
from tests.operator.apiserver import ApiServer
from tests.operator.kube import (
    APPS,
    BACKFILLS,
    CMS,
    JOBS,
    Api,
    eventually,
    forbid_data_plane,
    manifest,
    register,
    run_application,
    spark_state,
    start_operator,
    stop_operator,
)


def example_tables(root: Path) -> dict[str, str]:
    """An hour (14:00-15:00) of the examples' ingest.impressions and ingest.playbacks."""
    props = {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": f"file://{root / 'warehouse'}"}
    root.mkdir(parents=True)
    gen = GeneratorConfig(
        start=datetime(2026, 11, 1, 14, tzinfo=UTC), hours=1, impressions_per_hour=2000, namespace="ingest"
    )
    generate(SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"]), gen)
    return props


async def phase(api: Api, name: str, want: str) -> dict[str, Any] | None:
    status = ((await api.get(f"{BACKFILLS}/{name}")) or {}).get("status") or {}
    return status if status.get("phase") == want else None


def dry_run(name: str, uid: str) -> dict[str, Any]:
    bf = manifest("rmi-backfill.yaml", uid, dryRun=True, publish={"enabled": False})
    bf["metadata"]["name"] = name
    return bf


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_dry_run_plans_then_runs_and_calibrates_the_next_plans_eta(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(kmock)
    base = str(kmock.url).rstrip("/")
    handlers.configure(base)
    props = example_tables(tmp_path / "lake")
    checkpoints = {"location": str(tmp_path / "checkpoints"), "interval": "10m"}
    job = manifest("rmi-streamingjob.yaml", "uid-rmi", catalogs={"default": props}, checkpoints=checkpoints)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)
        refused = forbid_data_plane(monkeypatch)
        stop, task = start_operator()
        try:
            await asyncio.sleep(1.0)  # the watch must be open before objects appear
            await api.post(JOBS, job)
            await api.post(BACKFILLS, dry_run("first", "uid-first"))
            s = await eventually(lambda: phase(api, "first", "Planning"), "Planning", 30)
            assert s["planApplicationName"] == "first-backfill-plan"
            plan_app = await eventually(lambda: api.get(f"{APPS}/first-backfill-plan"), "the plan application")
            assert plan_app["spec"]["arguments"][0] == "plan"
            assert plan_app["metadata"]["ownerReferences"][0]["kind"] == "Backfill"
            assert await run_application(api, "first-backfill-plan", tmp_path) == 0

            s = await eventually(lambda: phase(api, "first", "Planned"), "Planned", 60)
            plan = s["plan"]
            assert plan["rows"] == 2500, "2000 impressions + 500 playbacks, from manifests"
            assert plan["expectedBatches"] >= 2 and plan["latenessOk"] is True  # merged rounds: few rows, few batches
            assert {p["table"] for p in plan["sources"]} == {"ingest.impressions", "ingest.playbacks"}
            assert plan.get("eta") is None and "no calibration yet" in plan["etaBasis"]
            await asyncio.sleep(2.0)
            assert await api.get(f"{APPS}/first-backfill") is None, "a dry run submits nothing"

            # dryRun false: it runs (no limits: admitted at once)
            await api.patch(f"{BACKFILLS}/first", {"spec": {"dryRun": False}})
            await eventually(lambda: phase(api, "first", "Running"), "Running after dryRun: false", 30)
            app = await eventually(lambda: api.get(f"{APPS}/first-backfill"), "the backfill's application")
            # play its driver: the run report it leaves next to its checkpoint when its query ends
            cm = await api.get(f"{CMS}/{app['spec']['volumes'][0]['configMap']['name']}")
            cfg = parse_config(json.loads(cm["data"]["job.json"]))  # type: ignore[index]
            batches = [(400, 1300), (900, 1350), (300, 1250), (600, 1300), (300, 1280)]
            progress = [{"numInputRows": r, "durationMs": {"triggerExecution": ms}} for r, ms in batches]
            assert write_report(cfg, 9.0, progress) is not None and read_report(cfg) is not None
            await asyncio.sleep(2.0)  # the operator times a run in whole seconds, from its submission
            await spark_state(api, "first-backfill", "COMPLETED")

            s = await eventually(lambda: phase(api, "first", "Succeeded"), "Succeeded", 30)
            calibration = s["calibration"]
            assert calibration["rows"] == 2500 and calibration["batches"] == 5
            assert 1.0 < calibration["secondsPerBatch"] < 1.4 and calibration["coreMicrosecondsPerRow"] > 0
            recorded = await eventually(lambda: api.get(f"{CMS}/{CONFIG_MAP}"), "the calibration ConfigMap")
            (entry,) = [json.loads(v) for v in recorded["data"].values()]
            assert entry["backfill"] == "default/first" and entry["costs"]["batches"] == 5

            # the next dry run's plan has an ETA from that run's costs
            await api.post(BACKFILLS, dry_run("second", "uid-second"))
            await eventually(lambda: api.get(f"{APPS}/second-backfill-plan"), "the second plan application")
            assert await run_application(api, "second-backfill-plan", tmp_path) == 0
            s = await eventually(lambda: phase(api, "second", "Planned"), "the second Planned", 60)
            plan = s["plan"]
            assert plan["eta"] and "batches x" in plan["etaBasis"] and "default/first" in plan["etaBasis"]
            assert refused == [], f"the operator touched data: {refused}"
        finally:
            await stop_operator(stop, task)
