"""A bootstrapped job's phase and status through the operator on the real server (issue 31
item 1): ``Bootstrapping`` while its application runs on the archives, then, once the driver's
record (``_kappa/bootstrap.json``, written here as the driver writes it) says Kafka took over,
``status.bootstrap`` with the switch and its offsets, phase ``Running`` and a ``Switched`` Event.
The record's making, the seam and a kill at the switch are tested on a real broker and real
Spark in tests/spark/test_bootstrap.py; the decisions in tests/unit/spark_app/bootstrap/test_bootstrap.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from spark_app.contract.reports.bootstrap import EARLIEST, RECORD, BootstrapRecord, write_record
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.contract.storage import open_location
from tests.cluster.conftest import LIVE_PROGRESS_INTERVAL
from tests.cluster.operator_runs import InProcess
from tests.cluster.spark_operator import create, example, in_phase, reasons, spark_state, status

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ = "StreamingJob"
NAME = "rmi-kafka-new"


def test_a_bootstrapped_job_is_bootstrapping_then_running_with_the_switch_in_status(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, fresh_namespace
    job = example("kafka-rmi-bootstrap-streamingjob.yaml", ns, checkpoints={"location": str(tmp_path / "ck")})
    create(plane, job)
    eventually(lambda: in_phase(plane, SJ, ns, NAME, "Submitted"), "submitted")
    spark_state(plane, ns, NAME, "RUNNING")
    s = eventually(lambda: in_phase(plane, SJ, ns, NAME, "Bootstrapping"), "bootstrapping")
    assert "reading the archives from 2026-11-19T00:00:00Z" in s["message"]
    assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "False", "not live yet"

    t = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
    record = BootstrapRecord(
        start=datetime(2026, 11, 19, tzinfo=UTC),
        archives={
            n: IcebergBackfillSource(kind="icebergBackfill", table=f"archive.{n}", snapshot_id=11)
            for n in ("impressions", "playbacks")
        },
        offsets={"impressions": {"impressions": {0: 5000, 1: 4980}}, "playbacks": {"playbacks": {0: EARLIEST}}},
        decided_at=t,
        archive_end={"impressions": datetime(2026, 11, 26, 9, 29, tzinfo=UTC), "playbacks": None},
        switched_at=datetime(2026, 11, 26, 9, 41, tzinfo=UTC),
    )
    write_record(open_location(str(tmp_path / "ck" / "live" / "_kappa")), record, RECORD)

    s = eventually(
        lambda: in_phase(plane, SJ, ns, NAME, "Running"),
        "running after the switch",
        timeout=2 * LIVE_PROGRESS_INTERVAL + 15,
    )
    assert s["bootstrap"] == {
        "from": "2026-11-19T00:00:00Z",
        "decidedAt": "2026-11-26T09:30:00Z",
        "archiveEnd": "2026-11-26T09:29:00Z",
        "switchedAt": "2026-11-26T09:41:00Z",
        "offsets": [
            {"source": "impressions", "topic": "impressions", "partition": 0, "offset": 5000},
            {"source": "impressions", "topic": "impressions", "partition": 1, "offset": 4980},
            {"source": "playbacks", "topic": "playbacks", "partition": 0},
        ],
    }
    assert {c["type"]: c["status"] for c in status(plane, SJ, ns, NAME)["conditions"]}["Ready"] == "True"
    assert "Switched" in reasons(plane, ns, NAME)
