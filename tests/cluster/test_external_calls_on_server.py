"""The limit on a job's external calls through the operator on the real server (issue 31 item
3): the StreamingJob's and the Backfill's limits rendered into their applications' JobConfigs,
and each driver's report (``_kappa/external-calls.json`` next to its checkpoint) shown in
``status.externalCalls`` and as gauges. The limit's keeping is tested with real Spark calling
a real service in tests/spark/test_external_calls.py; the decisions in
tests/unit/kappa_operator/reconcile/test_external_calls_operator.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from spark_app.contract.config import parse_config
from spark_app.contract.reports.external_calls import REPORT_NAME, ExternalCallsReport
from spark_app.contract.storage import REPORT_DIR
from tests.cluster.conftest import LIVE_PROGRESS_INTERVAL
from tests.cluster.operator_runs import InProcess
from tests.cluster.spark_operator import APP, create, example, get, in_phase, spark_state, status

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ, BF = "StreamingJob", "Backfill"


def leave_report(checkpoint: Path, limit: float, observed: float, calls: int) -> None:
    """What the driver's lease server writes (``spark_app.contract.reports.external_calls``)."""
    report = ExternalCallsReport(
        rate_per_second=limit,
        observed_per_second=observed,
        calls=calls,
        granted=calls + 4,
        expired=1,
        waited_seconds=12.5,
        seconds=60.0,
        at=datetime.now(UTC),
    )
    (checkpoint / REPORT_DIR).mkdir(parents=True, exist_ok=True)
    (checkpoint / REPORT_DIR / REPORT_NAME).write_text(report.model_dump_json(by_alias=True))


def rendered(plane: ControlPlane, ns: str, config_map: str) -> Any:
    cm = eventually(lambda: get(plane, "ConfigMap", ns, config_map), f"ConfigMap {config_map}", 60)
    return parse_config(json.loads(cm["data"]["job.json"]))


def test_the_limits_reach_the_runs_and_their_reports_the_status(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, fresh_namespace
    job = example(
        "rmi-streamingjob.yaml",
        ns,
        checkpoints={"location": str(tmp_path / "ck")},
        externalCalls={"ratePerSecond": 50, "backfillRatePerSecond": 10},
    )
    leave_report(tmp_path / "ck" / "live", 50.0, 48.25, 9000)
    create(plane, job)
    eventually(lambda: in_phase(plane, SJ, ns, "rmi", "Submitted"), "submitted")
    live = rendered(plane, ns, "rmi-jobconfig")
    assert live.external_calls is not None and live.external_calls.rate_per_second == 50

    create(plane, example("rmi-backfill.yaml", ns))  # no limit of its own: the job's backfill limit
    eventually(lambda: get(plane, APP, ns, "rmi-outage-backfill"), "the backfill's SparkApplication", 60)
    cfg = rendered(plane, ns, "rmi-outage-backfill-jobconfig")
    assert cfg.external_calls is not None and cfg.external_calls.rate_per_second == 10
    assert status(plane, BF, ns, "rmi-outage")["externalCalls"] == {"ratePerSecond": 10.0}, "before any report"
    leave_report(Path(cfg.checkpoint.location), 10.0, 9.9, 700)
    spark_state(plane, ns, "rmi-outage-backfill", "RUNNING")

    def reported(kind: str, name: str, observed: float) -> dict[str, Any] | None:
        calls = status(plane, kind, ns, name).get("externalCalls") or {}
        return calls if calls.get("observedPerSecond") == observed else None

    shown = eventually(lambda: reported(BF, "rmi-outage", 9.9), "the backfill's calls in status", 60)
    assert shown["calls"] == 700 and shown["waitedSeconds"] == 12.5 and shown["ratePerSecond"] == 10.0

    spark_state(plane, ns, "rmi", "RUNNING")
    shown = eventually(lambda: reported(SJ, "rmi", 48.25), "the job's calls in status", 2 * LIVE_PROGRESS_INTERVAL + 15)
    assert shown["calls"] == 9000 and shown["ratePerSecond"] == 50.0

    metrics = in_process_operator.context.metrics
    assert metrics is not None
    text = generate_latest(metrics.registry).decode()
    assert f'kappa_streamingjob_external_calls_per_second{{namespace="{ns}",streamingjob="rmi"}} 48.25' in text
    assert f'kappa_backfill_external_calls_limit_per_second{{backfill="rmi-outage",namespace="{ns}"}} 10.0' in text
