"""The operator's side of the limit on external calls: which limit each run of a job gets
(live, its Backfills, a Backfill's own, a Rewind's restore), the CRD refusing what the models
refuse, and the driver's report becoming ``status.externalCalls`` and gauges."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from prometheus_client import generate_latest

from kappa_operator.handlers import backfill as bf_handler
from kappa_operator.handlers import context
from kappa_operator.handlers.progress import external_calls as job_calls
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill
from kappa_operator.reconcile.external_calls import EVERY_S, calls_status, calls_update, due
from kappa_operator.render.jobconfig import backfill_config, live_checkpoint, restore_config, streaming_job_config
from kappa_operator.service.metrics import OperatorMetrics
from spark_app.contract.reports.external_calls import REPORT_NAME, ExternalCallsReport
from spark_app.contract.storage import REPORT_DIR
from tests.crd_validation import admit
from tests.unit.crd_documents import crd

ROOT = Path(__file__).resolve().parents[4]
NOW = "2026-11-26T10:00:00Z"


def manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


def job(calls: dict[str, Any] | None, location: str | None = None) -> StreamingJob:
    data = manifest("rmi-streamingjob.yaml")
    data["metadata"]["uid"] = "sj-uid"
    if calls is not None:
        data["spec"]["externalCalls"] = calls
    if location is not None:
        data["spec"]["checkpoints"]["location"] = location
    return StreamingJob.model_validate(data)


def backfill(calls: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> Backfill:
    data = manifest("rmi-backfill.yaml")
    data["metadata"].update(uid="bf-uid-1234", generation=1)
    if calls is not None:
        data["spec"]["externalCalls"] = calls
    if status is not None:
        data["status"] = status
    return Backfill.model_validate(data)


def rate(cfg: Any) -> float | None:
    return None if cfg.external_calls is None else cfg.external_calls.rate_per_second


@pytest.mark.parametrize(
    ("job_calls_spec", "own", "live", "in_backfill"),
    [
        (None, None, None, None),
        ({"ratePerSecond": 50}, None, 50, 50),  # a backfill never calls faster than live may
        ({"ratePerSecond": 50, "backfillRatePerSecond": 20}, None, 50, 20),
        ({"ratePerSecond": 50, "backfillRatePerSecond": 20}, {"ratePerSecond": 5}, 50, 5),
        ({"backfillRatePerSecond": 20}, None, None, 20),  # live unlimited, backfills limited
        (None, {"ratePerSecond": 7.5}, None, 7.5),
    ],
)
def test_each_run_gets_its_limit_rendered_into_its_job_config(
    job_calls_spec: dict[str, Any] | None, own: dict[str, Any] | None, live: float | None, in_backfill: float | None
) -> None:
    j = job(job_calls_spec)
    assert rate(streaming_job_config(j)) == live
    assert rate(backfill_config(backfill(own), j, None)) == in_backfill
    point = SinkRestore(sink="attributed_plays", batch_id=3, query_id="q", committed_at=NOW)
    rw = _rewind()
    assert rate(restore_config(rw, j, (point,), "file:///tmp/restored")) == live  # the job resumes at its live limit


def _rewind() -> Any:
    from kappa_operator.models.rewind import Rewind

    data = manifest("rmi-rewind.yaml")
    data["metadata"]["uid"] = "rw-uid"
    return Rewind.model_validate(data)


def test_no_limit_leaves_the_configs_and_their_hashes_as_they_were() -> None:
    assert "externalCalls" not in streaming_job_config(job(None)).to_json()
    assert "externalCalls" not in streaming_job_config(job({})).to_json()


@pytest.mark.parametrize(
    ("where", "value", "error"),
    [
        ("job", {"ratePerSecond": 0}, "greater than or equal to 0.001"),
        ("job", {"backfillRatePerSecond": 2_000_000}, "less than or equal to 1000000"),
        ("job", {"ratePerSecond": "fast"}, "valid number"),
        ("job", {"ratePerSecond": 1, "burst": 5}, "Extra inputs"),
        ("backfill", {}, "Field required"),
        ("backfill", {"ratePerSecond": -1}, "greater than or equal to 0.001"),
    ],
)
def test_the_models_and_the_api_server_refuse_the_same_limits(where: str, value: Any, error: str) -> None:
    data = manifest("rmi-streamingjob.yaml" if where == "job" else "rmi-backfill.yaml")
    data["spec"]["externalCalls"] = value
    model = StreamingJob if where == "job" else Backfill
    with pytest.raises(pydantic.ValidationError, match=error):
        model.model_validate(data)
    _, errors = admit(crd(data["kind"]), copy.deepcopy(data))
    assert errors and any("externalCalls" in e for e in errors), errors


def test_the_crds_accept_a_limit() -> None:
    data = manifest("rmi-streamingjob.yaml")
    data["spec"]["externalCalls"] = {"ratePerSecond": 50, "backfillRatePerSecond": 12.5}
    stored, errors = admit(crd("StreamingJob"), data)
    assert errors == [] and stored["spec"]["externalCalls"]["backfillRatePerSecond"] == 12.5
    data = manifest("rmi-backfill.yaml")
    data["spec"]["externalCalls"] = {"ratePerSecond": 5}
    assert admit(crd("Backfill"), data)[1] == []


def test_a_submitted_backfill_shows_its_limit_before_any_report() -> None:
    plan = decide_backfill(backfill(), job({"ratePerSecond": 50, "backfillRatePerSecond": 20}), None, None, NOW)
    assert plan.create_app is not None and plan.status["externalCalls"] == {"ratePerSecond": 20}
    unlimited = decide_backfill(backfill(), job(None), None, None, NOW)
    assert "externalCalls" not in unlimited.status


def _report(**over: Any) -> ExternalCallsReport:
    values: dict[str, Any] = {
        "ratePerSecond": 20.0,
        "observedPerSecond": 19.456,
        "calls": 1234,
        "granted": 1240,
        "expired": 3,
        "waitedSeconds": 88.04,
        "seconds": 70.0,
        "at": datetime(2026, 11, 26, 10, 0, 5, tzinfo=UTC),
    }
    return ExternalCallsReport.model_validate({**values, **over})


def test_the_status_is_the_drivers_report_and_says_only_what_changed() -> None:
    shown = calls_status(_report(), 20.0)
    assert shown == {
        "ratePerSecond": 20.0,
        "observedPerSecond": 19.46,
        "calls": 1234,
        "waitedSeconds": 88.0,
        "at": "2026-11-26T10:00:05Z",
    }
    assert calls_status(None, 20.0) == {"ratePerSecond": 20.0}  # before the first report
    assert calls_status(None, None) is None
    assert calls_update(shown, dict(shown)) is None
    assert calls_update({**shown, "calls": 1}, shown) == shown
    assert due(None, 5.0) and not due(1.0, 1.0 + EVERY_S - 0.1) and due(1.0, 1.0 + EVERY_S)


def _write(checkpoint: Path, report: ExternalCallsReport) -> None:
    (checkpoint / REPORT_DIR).mkdir(parents=True, exist_ok=True)
    (checkpoint / REPORT_DIR / REPORT_NAME).write_text(report.model_dump_json(by_alias=True))


def test_a_running_backfill_shows_its_drivers_report_and_the_gauges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = OperatorMetrics()
    monkeypatch.setattr(context.CONTEXT, "metrics", metrics)
    monkeypatch.setattr(bf_handler, "CALLS_READ", {})
    ckpt = tmp_path / "bf-ckpt"
    running = backfill(status={"phase": "Running", "checkpoint": str(ckpt), "externalCalls": {"ratePerSecond": 20.0}})
    assert bf_handler._external_calls(running) is None  # no report yet: nothing new to say
    bf_handler.CALLS_READ.clear()
    _write(ckpt, _report())
    fields = bf_handler._external_calls(running)
    assert fields is not None and fields["observedPerSecond"] == 19.46 and fields["calls"] == 1234
    assert bf_handler._external_calls(running) is None, "read again only after 30 s"
    text = generate_latest(metrics.registry).decode()
    assert 'kappa_backfill_external_calls_limit_per_second{backfill="rmi-outage",namespace="default"} 20.0' in text
    assert 'kappa_backfill_external_calls_per_second{backfill="rmi-outage",namespace="default"} 19.46' in text
    waited = fields["waitedSeconds"]
    labels = '{backfill="rmi-outage",namespace="default"}'
    assert f"kappa_backfill_external_calls_waited_seconds_total{labels} {waited}" in text
    unlimited = backfill(status={"phase": "Running", "checkpoint": str(ckpt)})
    bf_handler.CALLS_READ.clear()
    assert bf_handler._external_calls(unlimited) is None  # no limit rendered: its storage is not read


def test_a_live_job_with_a_limit_shows_its_drivers_report(tmp_path: Path) -> None:
    j = job({"ratePerSecond": 50}, location=str(tmp_path / "ckpt"))
    assert job_calls(j) == {"ratePerSecond": 50}  # before the driver's first report
    _write(Path(live_checkpoint(j)), _report(ratePerSecond=50.0, observedPerSecond=48.0))
    shown = job_calls(j)
    assert shown is not None and shown["ratePerSecond"] == 50.0 and shown["observedPerSecond"] == 48.0
    assert job_calls(job(None, location=str(tmp_path / "ckpt"))) is None


@pytest.mark.parametrize("kind", ["StreamingJob", "Backfill"])
def test_the_crds_declare_the_status_the_operator_writes(kind: str) -> None:
    """The status schema types every field (``kubectl explain``; the server checks them)."""
    data = manifest("rmi-streamingjob.yaml" if kind == "StreamingJob" else "rmi-backfill.yaml")
    data["status"] = {"externalCalls": calls_status(_report(), 20.0)}
    stored, errors = admit(crd(kind), data)
    assert errors == [] and stored["status"]["externalCalls"] == data["status"]["externalCalls"]
    data["status"]["externalCalls"]["calls"] = "many"
    assert any("status.externalCalls.calls" in e for e in admit(crd(kind), data)[1])


def test_kappa_run_says_what_the_limit_did() -> None:
    from rich.console import Console

    from kappa_operator.local.display import Display
    from spark_app.apps.result import RunResult

    console = Console(record=True, width=200)
    run = RunResult("calls", "backfill", 70.0)
    run.external_calls = _report()
    Display(console).runs("runs", [("backfill", run), ("unlimited", RunResult("free", "backfill", 1.0))])
    text = console.export_text()
    assert "external calls (backfill): 1234 at most 20/s for the whole job, 17.6/s over the run, waited 88.0 s" in text
    assert "external calls (unlimited)" not in text
