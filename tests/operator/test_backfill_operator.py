"""A Backfill through the operator process (kopf) against the kmock emulator, with the
coordinator embedded and a real local Iceberg catalog (SQLite) for the publish:

Pending until its job exists; then a ConfigMap and a SparkApplication (AvailableNow, fresh
checkpoint, output to the branch), the token Secret, the alignment group declared; progress
and lag in status from the driver's reports (the test plays the driver and the Spark
operator); on completion a second SparkApplication validates the branch against main and
publishes the window (the test runs it as its own process, as its pod would), and the
operator ends on its report; the group is left. Inside the operator's process every function
that reads rows or copies files raises: the operator renders, reads a report, patches status.
A second Backfill deleted while running stops its application and leaves its group."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

import kappa_operator.handlers as handlers
from kappa_operator.coordinator.groups import EmbeddedGroups
from kappa_operator.coordinator.scopes import verify
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.metrics import OperatorMetrics
from spark_app.config import parse_config
from tests.operator.apiserver import ApiServer
from tests.operator.kube import (
    APPS,
    BACKFILLS,
    CMS,
    JOBS,
    SECRETS,
    Api,
    absent,
    eventually,
    forbid_data_plane,
    manifest,
    outside_the_operator,
    reasons,
    register,
    run_application,
    spark_state,
    start_operator,
    stop_operator,
)

START = datetime(2026, 11, 1, 14, tzinfo=UTC)
END = datetime(2026, 11, 1, 18, tzinfo=UTC)
TOKEN = "test-token"
GROUP = "default.rmi-outage"


def rows(ids: list[str], times: list[datetime]) -> pa.Table:
    return pa.table(
        {
            "playback_id": pa.array(ids, pa.string()),
            "impression_id": pa.array([f"i-{i}" for i in ids], pa.string()),
            "playback_ts": pa.array(times, pa.timestamp("us", tz="UTC")),
        }
    )


def outage_table(tmp_path: Path) -> tuple[dict[str, str], SqlCatalog]:
    """main lost two of the window's four rows; the backfill branch has all four."""
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    catalog = SqlCatalog("default", **{k: v for k, v in props.items() if k != "type"})
    catalog.create_namespace("marts")
    before, after = START - timedelta(hours=1), END + timedelta(hours=1)
    inside = [START + timedelta(minutes=30 * k) for k in range(4)]
    table: Table = catalog.create_table("marts.attributed_plays", rows([], []).schema)
    table.append(rows(["before", "p0", "p1", "after"], [before, inside[0], inside[1], after]))
    table.append(rows(["p0", "p1", "p2", "p3"], inside), branch="backfill-rmi-outage")
    return props, catalog


def window_ids(catalog: SqlCatalog) -> list[str]:
    with outside_the_operator():
        t = catalog.load_table("marts.attributed_plays")
        return sorted(t.scan().to_arrow()["playback_id"].to_pylist())


async def report(
    http: aiohttp.ClientSession,
    url: str,
    member: str,
    watermark: datetime | None,
    token: str = TOKEN,
    read: tuple[int, int] | None = None,
) -> None:
    """As the driver reports: ``read`` is its cumulative (bytes, file opens) of admitted splits."""
    body: dict[str, Any] = {
        "member": member,
        "watermark": None if watermark is None else int(watermark.timestamp() * 1e6),
    }
    body["finished"] = watermark is None
    if read is not None:
        body["readBytes"], body["readFiles"] = read
    async with http.post(
        f"{url}/v1/groups/{GROUP}/reports", json=body, headers={"Authorization": f"Bearer {token}"}
    ) as r:
        assert r.status == 200, await r.text()


async def status_of(api: Api, name: str) -> dict[str, Any]:
    bf = await api.get(f"{BACKFILLS}/{name}")
    return (bf or {}).get("status") or {}


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_backfill_lifecycle(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(kmock)
    base = str(kmock.url).rstrip("/")
    props, catalog = outage_table(tmp_path)
    coordinator = EmbeddedCoordinator(Service(TOKEN)).start()
    metrics = OperatorMetrics()
    metrics.include(coordinator.service.metrics.registry)
    handlers.configure(
        base,
        groups=EmbeddedGroups(coordinator.service),
        coordinator_url=coordinator.url,
        token=TOKEN,
        metrics=metrics,
    )
    checkpoints = {"location": str(tmp_path / "checkpoints"), "interval": "10m"}
    job = manifest("rmi-streamingjob.yaml", "uid-rmi", catalogs={"default": props}, checkpoints=checkpoints)
    bf = manifest("rmi-backfill.yaml", "uid-bf-12345678", publish={"enabled": True, "minMatchRatio": 0.4})
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)
        refused = forbid_data_plane(monkeypatch)
        stop, task = start_operator()
        try:
            await asyncio.sleep(1.0)  # the watch must be open before objects appear
            # the Backfill first: it waits for its job
            await api.post(BACKFILLS, bf)
            await eventually(lambda: _phase(api, "rmi-outage", "Pending"), "Pending while the job is missing")
            assert await api.get(f"{APPS}/rmi-outage-backfill") is None
            await api.post(JOBS, job)

            app = await eventually(
                lambda: api.get(f"{APPS}/rmi-outage-backfill"), "the backfill's SparkApplication", 60
            )
            spec = app["spec"]
            assert spec["restartPolicy"] == {"type": "Never"}
            assert spec["driver"]["env"][0]["valueFrom"]["secretKeyRef"] == {
                "name": "rmi-outage-backfill-coordinator",
                "key": "token",
            }
            assert app["metadata"]["ownerReferences"][0]["kind"] == "Backfill"
            cm = await api.get(f"{CMS}/rmi-outage-backfill-jobconfig")
            cfg = parse_config(json.loads(cm["data"]["job.json"]))  # type: ignore[index]
            assert cfg.mode == "backfill" and cfg.trigger.kind == "availableNow"
            assert cfg.sink_branch("attributed_plays") == "backfill-rmi-outage"
            uid = (await api.get(f"{BACKFILLS}/rmi-outage"))["metadata"]["uid"]  # type: ignore[index]
            assert cfg.checkpoint.location == f"{tmp_path}/checkpoints/backfills/rmi-outage-{uid[:8]}"
            assert {s.kind for s in cfg.sources.values()} == {"icebergBackfill"}
            assert cfg.coordinator is not None and cfg.coordinator.url == coordinator.url
            secret = await api.get(f"{SECRETS}/rmi-outage-backfill-coordinator")
            assert secret is not None and secret["metadata"]["ownerReferences"][0]["name"] == "rmi-outage"
            driver = base64.b64decode(secret["data"]["token"]).decode()  # as the driver's env gets it
            scope = verify(TOKEN, driver)
            assert scope is not None and scope.groups == {GROUP}, "the driver's credential is scoped to its group"

            group = coordinator.service.core.groups()[GROUP].spec
            members = group.members
            assert set(members) == {"rmi-outage/attributed_plays/impressions", "rmi-outage/attributed_plays/playbacks"}
            assert group.max_drift_us == 10 * 60 * 1_000_000

            # play the Spark operator and the driver: a quarter, then half of the window
            await spark_state(api, "rmi-outage-backfill", "RUNNING")
            hour1 = START + timedelta(hours=1)
            await report(http, coordinator.url, members[0], hour1, driver, read=(4_000_000, 2))
            await report(http, coordinator.url, members[1], hour1 + timedelta(minutes=5), driver, read=(1_000_000, 1))
            s = await eventually(lambda: _progress(api, "25%"), "progress 25%", 30)
            assert s["globalWatermark"] == "2026-11-01T15:00:00Z" and s["alignmentLag"] == "300s"
            assert (s["readBytes"], s["readFiles"]) == (5_000_000, 3), "what the sources read, summed"
            assert s.get("readRate") is None, "one report per member: no rate yet"
            await report(http, coordinator.url, members[0], START + timedelta(hours=2), driver, read=(9_000_000, 4))
            await report(http, coordinator.url, members[1], START + timedelta(hours=2), driver, read=(2_000_000, 2))
            s = await eventually(lambda: _progress(api, "50%"), "progress 50%", 30)
            assert s["eta"], "a second observation gives a rate, hence an ETA"
            assert (s["readBytes"], s["readFiles"]) == (11_000_000, 6)
            assert s["readBytesPerSecond"] > 0 and s["readRate"].endswith("files/s"), s
            scraped = generate_latest(metrics.registry).decode()
            assert 'kappa_backfill_progress_ratio{backfill="rmi-outage",namespace="default"} 0.5' in scraped
            assert f'kappa_alignment_global_watermark_seconds{{group="{GROUP}"}}' in scraped
            assert 'kappa_operator_backfills{phase="Running"} 1.0' in scraped
            assert 'kappa_operator_reconciles_total{kind="Backfill"}' in scraped

            # the application completes: the operator submits the publish application
            await spark_state(api, "rmi-outage-backfill", "COMPLETED")
            s = await eventually(lambda: _phase(api, "rmi-outage", "Publishing"), "Publishing", 30)
            assert s["publishApplicationName"] == "rmi-outage-backfill-publish"
            pub = await eventually(lambda: api.get(f"{APPS}/rmi-outage-backfill-publish"), "the publish application")
            assert pub["spec"]["arguments"][0] == "publish"
            assert pub["metadata"]["ownerReferences"][0]["uid"] == uid
            assert window_ids(catalog) == ["after", "before", "p0", "p1"], "nothing published by the operator"
            assert await run_application(api, "rmi-outage-backfill-publish", tmp_path) == 0
            s = await eventually(lambda: _phase(api, "rmi-outage", "Succeeded"), "Succeeded after publish", 60)
            assert s["published"][0]["table"] == "marts.attributed_plays"
            assert (s["published"][0]["rowsRemoved"], s["published"][0]["rowsAdded"]) == (2, 4)
            assert (s["published"][0]["mainRows"], s["published"][0]["branchRows"]) == (2, 4)
            assert sorted(s["published"][0]["differingKeys"]) == [
                '{"impression_id": "i-p2", "playback_id": "p2"}',
                '{"impression_id": "i-p3", "playback_id": "p3"}',
            ]
            assert s["matchRatio"] == 0.5, "main had 2 of the branch's 4 rows"
            assert s["publishApplicationState"] == "COMPLETED"
            assert window_ids(catalog) == ["after", "before", "p0", "p1", "p2", "p3"]
            assert GROUP not in coordinator.service.core.groups(), "the group is left once published"
            assert await absent(api, f"{SECRETS}/rmi-outage-backfill-coordinator"), "the credential is removed"
            # an operator restarted mid-publish resumes it: it reads the finished application's
            # report again; main is not changed twice, the status reports what the one publish did
            head = catalog.load_table("marts.attributed_plays").snapshot_by_name("main")
            await api.patch(f"{BACKFILLS}/rmi-outage/status", {"status": {"phase": "Publishing"}})
            await eventually(lambda: _phase(api, "rmi-outage", "Publishing"), "the publish marked unfinished")
            again = await eventually(lambda: _phase(api, "rmi-outage", "Succeeded"), "the resumed publish", 60)
            assert again["published"] == s["published"]
            assert catalog.load_table("marts.attributed_plays").snapshot_by_name("main") == head
            assert refused == [], f"the operator touched data: {refused}"
            seen = reasons(kmock)
            for reason in ("JobNotFound", "Submitted", "Running", "Publishing", "Published"):
                assert reason in seen, f"no {reason} event in {seen}"

            # a second backfill, deleted while it runs: its application stops, its group goes
            other = manifest("rmi-backfill.yaml", "uid-bf-2", publish={"enabled": False})
            other["metadata"]["name"] = "rmi-second"
            await api.post(BACKFILLS, other)
            await eventually(lambda: api.get(f"{APPS}/rmi-second-backfill"), "the second application")
            assert "default.rmi-second" in coordinator.service.core.groups()
            await spark_state(api, "rmi-second-backfill", "RUNNING")
            await eventually(lambda: _phase(api, "rmi-second", "Running"), "the second one running")
            await api.delete(f"{BACKFILLS}/rmi-second")
            await eventually(lambda: absent(api, f"{APPS}/rmi-second-backfill"), "the application stopped on delete")
            await eventually(lambda: absent(api, f"{BACKFILLS}/rmi-second"), "the finalizer released")
            assert "default.rmi-second" not in coordinator.service.core.groups()
            scraped = generate_latest(metrics.registry).decode()
            assert "rmi-second" not in scraped, "a deleted backfill's series disappear"
        finally:
            await stop_operator(stop, task)
            coordinator.stop()


async def _phase(api: Api, name: str, phase: str) -> dict[str, Any] | None:
    s = await status_of(api, name)
    return s if s.get("phase") == phase else None


async def _progress(api: Api, percent: str) -> dict[str, Any] | None:
    s = await status_of(api, "rmi-outage")
    return s if s.get("progress") == percent else None
