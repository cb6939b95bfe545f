"""A Backfill's life through the operator (``kappa operator`` in this process, with the chart's
ServiceAccount) on the real kube-apiserver, with the coordinator embedded and a real local
Iceberg catalog (SQLite); inside the operator every function that reads rows or copies files
raises: the operator renders, reads reports and patches status.

- The lifecycle: Pending until its job exists; then a ConfigMap and a SparkApplication
  (AvailableNow, fresh checkpoint, output to the branch), the token Secret, the alignment group
  declared; progress and lag in status from the driver's reports (the test plays the driver and
  the Spark operator); once its query ended the same driver validates the branch against main
  and publishes the window (the test runs that step as its own process, as the driver would),
  its application completes, and the operator ends on its report: one application, no second
  one; the group is left. A second Backfill deleted while running stops its application and
  leaves its group.
- A publish refused in the driver: the application completed, the Backfill is Failed
  (ValidationFailed) and nothing restarts; the gate lowered and restartNonce bumped, a new
  application runs; one that completes without a publish report of its run (an image from
  before publish ran in the driver) gets the separate publish application, whose report decides.
- The dry run: ``spec.dryRun`` renders a plan application (run as its pod would: ``python -m
  spark_app plan``), the operator stops in Planned with the plan in status and submits nothing;
  ``dryRun: false`` runs it; its run report calibrates the next dry run's ETA.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from prometheus_client import generate_latest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from kappa_operator.coordinator.scopes import verify
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.reconcile.estimates import CONFIG_MAP
from spark_app.contract.config import parse_config
from spark_app.contract.reports.run import read_report, write_report
from spark_app.examples.generator import GeneratorConfig, generate
from tests.cluster.operator_runs import TOKEN, InProcess, forbid_data_plane, outside_the_operator
from tests.cluster.spark_operator import (
    APP,
    absent,
    create,
    driver_publishes,
    events,
    example,
    get,
    in_phase,
    reasons,
    run_application,
    spark_state,
    status,
)

pytestmark = pytest.mark.usefixtures("never_forbidden")

START = datetime(2026, 11, 1, 14, tzinfo=UTC)
END = datetime(2026, 11, 1, 18, tzinfo=UTC)
BF = "Backfill"


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


def report(
    url: str, group: str, member: str, watermark: datetime | None, token: str, read: tuple[int, int] | None = None
) -> None:
    """As the driver reports: ``read`` is its cumulative (bytes, file opens) of admitted splits."""
    body: dict[str, Any] = {
        "member": member,
        "watermark": None if watermark is None else int(watermark.timestamp() * 1e6),
        "finished": watermark is None,
    }
    if read is not None:
        body["readBytes"], body["readFiles"] = read
    r = requests.post(
        f"{url}/v1/groups/{group}/reports", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert r.status_code == 200, r.text


def test_backfill_lifecycle(
    control_plane: ControlPlane,
    in_process_operator: InProcess,
    fresh_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plane, ns, op = control_plane, fresh_namespace, in_process_operator
    group = f"{ns}.rmi-outage"
    props, catalog = outage_table(tmp_path)
    checkpoints = {"location": str(tmp_path / "checkpoints"), "interval": "10m"}
    job = example("rmi-streamingjob.yaml", ns, catalogs={"default": props}, checkpoints=checkpoints)
    refused = forbid_data_plane(monkeypatch)

    # the Backfill first: it waits for its job
    create(plane, example("rmi-backfill.yaml", ns, publish={"enabled": True, "minMatchRatio": 0.4}))
    eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Pending"), "Pending while the job is missing")
    assert absent(plane, APP, ns, "rmi-outage-backfill")
    create(plane, job)

    app = eventually(lambda: get(plane, APP, ns, "rmi-outage-backfill"), "the backfill's SparkApplication", 60)
    spec = app["spec"]
    assert spec["restartPolicy"] == {"type": "Never"}
    assert spec["driver"]["env"][0]["valueFrom"]["secretKeyRef"] == {
        "name": "rmi-outage-backfill-coordinator",
        "key": "token",
    }
    assert app["metadata"]["ownerReferences"][0]["kind"] == "Backfill"
    cm = get(plane, "ConfigMap", ns, "rmi-outage-backfill-jobconfig")
    assert cm is not None
    cfg = parse_config(json.loads(cm["data"]["job.json"]))
    assert cfg.mode == "backfill" and cfg.trigger.kind == "availableNow"
    assert cfg.sink_branch("attributed_plays") == "backfill-rmi-outage"
    uid = (get(plane, BF, ns, "rmi-outage") or {})["metadata"]["uid"]
    assert cfg.checkpoint.location == f"{tmp_path}/checkpoints/backfills/rmi-outage-{uid[:8]}"
    assert {s.kind for s in cfg.sources.values()} == {"icebergBackfill"}
    assert cfg.coordinator is not None and cfg.coordinator.url == op.context.coordinator_url
    secret = get(plane, "Secret", ns, "rmi-outage-backfill-coordinator")
    assert secret is not None and secret["metadata"]["ownerReferences"][0]["name"] == "rmi-outage"
    driver = base64.b64decode(secret["data"]["token"]).decode()  # as the driver's env gets it
    scope = verify(TOKEN, driver)
    assert scope is not None and scope.groups == {group}, "the driver's credential is scoped to its group"

    declared = op.groups()[group].spec
    members = declared.members
    assert set(members) == {"rmi-outage/attributed_plays/impressions", "rmi-outage/attributed_plays/playbacks"}
    assert declared.max_drift_us == 10 * 60 * 1_000_000

    # play the Spark operator and the driver: a quarter, then half of the window
    url = str(op.context.coordinator_url)
    spark_state(plane, ns, "rmi-outage-backfill", "RUNNING")
    hour1 = START + timedelta(hours=1)
    report(url, group, members[0], hour1, driver, read=(4_000_000, 2))
    report(url, group, members[1], hour1 + timedelta(minutes=5), driver, read=(1_000_000, 1))

    def progress(percent: str) -> dict[str, Any] | None:
        s = status(plane, BF, ns, "rmi-outage")
        return s if s.get("progress") == percent else None

    s = eventually(lambda: progress("25%"), "progress 25%")
    assert s["globalWatermark"] == "2026-11-01T15:00:00Z" and s["alignmentLag"] == "300s"
    assert (s["readBytes"], s["readFiles"]) == (5_000_000, 3), "what the sources read, summed"
    assert s.get("readRate") is None, "one report per member: no rate yet"
    report(url, group, members[0], START + timedelta(hours=2), driver, read=(9_000_000, 4))
    report(url, group, members[1], START + timedelta(hours=2), driver, read=(2_000_000, 2))
    s = eventually(lambda: progress("50%"), "progress 50%")
    assert s["eta"], "a second observation gives a rate, hence an ETA"
    assert (s["readBytes"], s["readFiles"]) == (11_000_000, 6)
    assert s["readBytesPerSecond"] > 0 and s["readRate"].endswith("files/s"), s
    assert op.context.metrics is not None
    registry = op.context.metrics.registry
    ratio = f'kappa_backfill_progress_ratio{{backfill="rmi-outage",namespace="{ns}"}} 0.5'

    # the gauge is set just after the status write that the test saw: wait for it, not a race
    def scrape() -> str | None:
        text = generate_latest(registry).decode()
        return text if ratio in text else None

    scraped = eventually(scrape, "kappa_backfill_progress_ratio 0.5")
    assert f'kappa_alignment_global_watermark_seconds{{group="{group}"}}' in scraped
    assert 'kappa_operator_backfills{phase="Running"} 1.0' in scraped
    assert 'kappa_operator_reconciles_total{kind="Backfill"}' in scraped

    # the query ends; the same driver validates and publishes, and its application completes:
    # the operator ends on the report it left, with no second application
    assert window_ids(catalog) == ["after", "before", "p0", "p1"], "nothing published by the operator"
    assert driver_publishes(plane, ns, "rmi-outage-backfill", tmp_path) == 0
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Succeeded"), "Succeeded after publish", 60)
    assert absent(plane, APP, ns, "rmi-outage-backfill-publish"), "one application per Backfill"
    assert "publishApplicationName" not in s and s["applicationState"] == "COMPLETED"
    published = s["published"][0]
    assert published["table"] == "marts.attributed_plays"
    assert (published["rowsRemoved"], published["rowsAdded"]) == (2, 4)
    assert (published["mainRows"], published["branchRows"]) == (2, 4)
    assert sorted(published["differingKeys"]) == [
        '{"impression_id": "i-p2", "playback_id": "p2"}',
        '{"impression_id": "i-p3", "playback_id": "p3"}',
    ]
    assert s["matchRatio"] == 0.5, "main had 2 of the branch's 4 rows"
    assert window_ids(catalog) == ["after", "before", "p0", "p1", "p2", "p3"]
    assert group not in op.groups(), "the group is left once published"
    assert absent(plane, "Secret", ns, "rmi-outage-backfill-coordinator"), "the credential is removed"

    # a status left in Publishing (an operator stopped before it recorded the end) is decided
    # again from the report; main is not changed twice, the status reports what the one publish did
    with outside_the_operator():
        head = catalog.load_table("marts.attributed_plays").snapshot_by_name("main")
    plane.admin.ok(
        plane.admin.merge(path_of(BF, ns, "rmi-outage") + "/status", {"status": {"phase": "Publishing"}}),
        "the publish marked unfinished",
    )
    again = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Succeeded"), "the resumed publish", 60)
    assert again["published"] == s["published"]
    with outside_the_operator():
        assert catalog.load_table("marts.attributed_plays").snapshot_by_name("main") == head
    assert refused == [], f"the operator touched data: {refused}"

    def said(*wanted: str) -> list[str] | None:
        seen = reasons(plane, ns, "rmi-outage")
        return seen if set(wanted) <= set(seen) else None

    eventually(lambda: said("JobNotFound", "Submitted", "Running", "Published"), "the events", 10)
    assert "Publishing" not in reasons(plane, ns, "rmi-outage"), "no separate publish application"

    # a second backfill, deleted while it runs: its application stops, its group goes
    create(plane, example("rmi-backfill.yaml", ns, "rmi-second", publish={"enabled": False}))
    eventually(lambda: get(plane, APP, ns, "rmi-second-backfill"), "the second application")
    assert f"{ns}.rmi-second" in op.groups()
    spark_state(plane, ns, "rmi-second-backfill", "RUNNING")
    eventually(lambda: in_phase(plane, BF, ns, "rmi-second", "Running"), "the second one running")
    plane.admin.ok(plane.admin.delete(path_of(BF, ns, "rmi-second")), "delete")
    eventually(lambda: absent(plane, APP, ns, "rmi-second-backfill"), "the application stopped on delete")
    eventually(lambda: absent(plane, BF, ns, "rmi-second"), "the finalizer released")
    assert f"{ns}.rmi-second" not in op.groups()
    scraped = generate_latest(op.context.metrics.registry).decode()
    assert "rmi-second" not in scraped, "a deleted backfill's series disappear"


def test_a_refused_publish_stays_failed_and_a_resubmission_without_a_report_is_published_by_a_second_application(
    control_plane: ControlPlane,
    in_process_operator: InProcess,
    fresh_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plane, ns = control_plane, fresh_namespace
    props, catalog = outage_table(tmp_path)
    checkpoints = {"location": str(tmp_path / "checkpoints"), "interval": "10m"}
    create(plane, example("rmi-streamingjob.yaml", ns, catalogs={"default": props}, checkpoints=checkpoints))
    refused = forbid_data_plane(monkeypatch)
    create(plane, example("rmi-backfill.yaml", ns, publish={"enabled": True, "minMatchRatio": 0.999}))
    first = eventually(lambda: get(plane, APP, ns, "rmi-outage-backfill"), "the backfill's SparkApplication", 60)
    spark_state(plane, ns, "rmi-outage-backfill", "RUNNING")
    eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Running"), "Running")

    # its driver's validation refuses (main matches 2 of 4 rows): the application completed,
    # the Backfill fails from the report, and nothing is restarted or published
    assert driver_publishes(plane, ns, "rmi-outage-backfill", tmp_path) == 3
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Failed"), "Failed from the refusal", 60)
    assert [c["reason"] for c in s["conditions"] if c["type"] == "Failed"] == ["ValidationFailed"]
    assert "0.999" in s["message"] and s.get("restarts", 0) == 0 and s["applicationState"] == "COMPLETED"
    kept = get(plane, APP, ns, "rmi-outage-backfill")
    assert kept is not None and kept["metadata"]["uid"] == first["metadata"]["uid"], "not restarted"
    assert absent(plane, APP, ns, "rmi-outage-backfill-publish")
    assert status(plane, BF, ns, "rmi-outage")["phase"] == "Failed"
    assert window_ids(catalog) == ["after", "before", "p0", "p1"], "main unchanged"

    # the gate lowered and restartNonce bumped: a new application; it completes without a
    # publish report of its run (an image from before publish ran in the driver): the separate
    # publish application validates and publishes, and its report decides
    bump = {"spec": {"restartNonce": 1, "publish": {"enabled": True, "minMatchRatio": 0.4}}}
    plane.admin.ok(plane.admin.merge(path_of(BF, ns, "rmi-outage"), bump), "restartNonce 1, minMatchRatio 0.4")

    def resubmitted() -> dict[str, Any] | None:
        app = get(plane, APP, ns, "rmi-outage-backfill")
        return app if app is not None and app["metadata"]["uid"] != first["metadata"]["uid"] else None

    second = eventually(resubmitted, "the resubmitted application", 60)
    assert json.loads(second["metadata"]["annotations"]["kappa.dev/publish"])["minMatchRatio"] == 0.4
    spark_state(plane, ns, "rmi-outage-backfill", "COMPLETED")
    eventually(lambda: get(plane, APP, ns, "rmi-outage-backfill-publish"), "the separate publish application")

    def publishing_said() -> list[str] | None:
        said = [str(e["message"]) for e in events(plane, ns, "rmi-outage") if e["reason"] == "Publishing"]
        return said or None

    (why,) = eventually(publishing_said, "the Publishing Event", 10)
    assert "no publish report of this run" in why, "the earlier attempt's report is not this run's"
    assert run_application(plane, ns, "rmi-outage-backfill-publish", tmp_path) == 0
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Succeeded"), "Succeeded", 60)
    assert s["publishApplicationState"] == "COMPLETED" and s["matchRatio"] == 0.5
    assert window_ids(catalog) == ["after", "before", "p0", "p1", "p2", "p3"]
    assert refused == [], f"the operator touched data: {refused}"


# --- the dry run ------------------------------------------------------------------------------


def example_tables(root: Path) -> dict[str, str]:
    """An hour (14:00-15:00) of the examples' ingest.impressions and ingest.playbacks."""
    props = {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": f"file://{root / 'warehouse'}"}
    root.mkdir(parents=True)
    gen = GeneratorConfig(start=START, hours=1, impressions_per_hour=2000, namespace="ingest")
    generate(SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"]), gen)
    return props


def test_dry_run_plans_then_runs_and_calibrates_the_next_plans_eta(
    control_plane: ControlPlane,
    in_process_operator: InProcess,
    fresh_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plane, ns = control_plane, fresh_namespace
    props = example_tables(tmp_path / "lake")
    checkpoints = {"location": str(tmp_path / "checkpoints"), "interval": "10m"}
    refused = forbid_data_plane(monkeypatch)
    create(plane, example("rmi-streamingjob.yaml", ns, catalogs={"default": props}, checkpoints=checkpoints))
    create(plane, example("rmi-backfill.yaml", ns, "first", dryRun=True, publish={"enabled": False}))
    s = eventually(lambda: in_phase(plane, BF, ns, "first", "Planning"), "Planning")
    assert s["planApplicationName"] == "first-backfill-plan"
    plan_app = eventually(lambda: get(plane, APP, ns, "first-backfill-plan"), "the plan application")
    assert plan_app["spec"]["arguments"][0] == "plan"
    assert plan_app["metadata"]["ownerReferences"][0]["kind"] == "Backfill"
    assert run_application(plane, ns, "first-backfill-plan", tmp_path) == 0

    s = eventually(lambda: in_phase(plane, BF, ns, "first", "Planned"), "Planned", 60)
    plan = s["plan"]
    assert plan["rows"] == 2500, "2000 impressions + 500 playbacks, from manifests"
    # alignment.mode auto, the example's: the plan application chose bounded, one batch query
    assert plan["mode"] == "bounded" and "no row arrived behind the live watermark" in plan["modeReason"]
    assert plan["expectedBatches"] == 1 and plan["latenessOk"] is True
    assert {p["table"] for p in plan["sources"]} == {"ingest.impressions", "ingest.playbacks"}
    assert plan.get("eta") is None and "no calibration yet" in plan["etaBasis"]
    time.sleep(2.0)
    assert absent(plane, APP, ns, "first-backfill"), "a dry run submits nothing"

    # dryRun false: it runs (no limits: admitted at once)
    plane.admin.ok(plane.admin.merge(path_of(BF, ns, "first"), {"spec": {"dryRun": False}}), "dryRun: false")
    eventually(lambda: in_phase(plane, BF, ns, "first", "Running"), "Running after dryRun: false")
    app = eventually(lambda: get(plane, APP, ns, "first-backfill"), "the backfill's application")
    # play its driver: the run report it leaves next to its checkpoint when its query ends
    cm = get(plane, "ConfigMap", ns, app["spec"]["volumes"][0]["configMap"]["name"])
    assert cm is not None
    cfg = parse_config(json.loads(cm["data"]["job.json"]))
    batches = [(400, 1300), (900, 1350), (300, 1250), (600, 1300), (300, 1280)]
    progress = [{"numInputRows": r, "durationMs": {"triggerExecution": ms}} for r, ms in batches]
    assert write_report(cfg, 9.0, progress) is not None and read_report(cfg) is not None
    time.sleep(2.0)  # the operator times a run in whole seconds, from its submission
    spark_state(plane, ns, "first-backfill", "COMPLETED")

    s = eventually(lambda: in_phase(plane, BF, ns, "first", "Succeeded"), "Succeeded")
    calibration = s["calibration"]
    assert calibration["rows"] == 2500 and calibration["batches"] == 5
    assert 1.0 < calibration["secondsPerBatch"] < 1.4 and calibration["coreMicrosecondsPerRow"] > 0
    recorded = eventually(lambda: get(plane, "ConfigMap", ns, CONFIG_MAP), "the calibration ConfigMap")
    (entry,) = [json.loads(v) for v in recorded["data"].values()]
    assert entry["backfill"] == f"{ns}/first" and entry["costs"]["batches"] == 5

    # the next dry run's plan has an ETA from that run's costs
    create(plane, example("rmi-backfill.yaml", ns, "second", dryRun=True, publish={"enabled": False}))
    eventually(lambda: get(plane, APP, ns, "second-backfill-plan"), "the second plan application")
    assert run_application(plane, ns, "second-backfill-plan", tmp_path) == 0
    s = eventually(lambda: in_phase(plane, BF, ns, "second", "Planned"), "the second Planned", 60)
    plan = s["plan"]
    assert plan["eta"] and "batches x" in plan["etaBasis"] and f"{ns}/first" in plan["etaBasis"]
    assert refused == [], f"the operator touched data: {refused}"
