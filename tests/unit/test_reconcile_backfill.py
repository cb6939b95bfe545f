"""The Backfill decision (pure): job resolution, launch, state, progress and ETA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill import plan_backfill, progress, progress_status

ROOT = Path(__file__).resolve().parents[2]
NOW = "2026-11-21T10:00:00Z"
START, END = datetime(2026, 11, 1, 14, tzinfo=UTC), datetime(2026, 11, 1, 18, tzinfo=UTC)


def load(name: str, **meta: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"].update(meta)
    return data


def bf(status: dict[str, Any] | None = None) -> Backfill:
    data = load("rmi-backfill.yaml", uid="bf-uid-1234", generation=2)
    if status is not None:
        data["status"] = status
    return Backfill.model_validate(data)


JOB = StreamingJob.model_validate(load("rmi-streamingjob.yaml", uid="sj"))


def test_a_missing_job_waits_with_a_warning_once() -> None:
    plan = plan_backfill(bf(), None, None, None, NOW)
    assert plan.status["phase"] == "Pending" and plan.retry_after and plan.create_app is None
    assert [e.type for e in plan.events] == ["Warning"]
    again = plan_backfill(bf(plan.status), None, None, None, NOW)
    assert again.events == ()


def test_launch_renders_the_history_run_into_the_branch() -> None:
    plan = plan_backfill(bf(), JOB, None, "http://c:8471", NOW, token_secret="kappa-coordinator")
    assert plan.create_app is not None and plan.config_map is not None
    spec = plan.create_app["spec"]
    assert spec["restartPolicy"] == {"type": "Never"}
    assert spec["driver"]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "kappa-coordinator"
    assert plan.status["phase"] == "Running" and plan.status["branch"] == "backfill-rmi-outage"
    assert plan.status["checkpoint"].endswith("/backfills/rmi-outage-bf-uid-1")


def test_application_states_become_backfill_phases() -> None:
    app = plan_backfill(bf(), JOB, None, None, NOW).create_app
    assert app is not None
    for state, phase in (("RUNNING", "Running"), ("COMPLETED", "Succeeded"), ("FAILED", "Failed")):
        plan = plan_backfill(bf(), JOB, {**app, "status": {"applicationState": {"state": state}}}, None, NOW)
        assert plan.status["phase"] == phase
    done = plan_backfill(bf({"phase": "Succeeded"}), JOB, None, None, NOW)
    assert done.create_app is None, "a finished backfill whose application is gone is not rerun"


def test_progress_and_eta() -> None:
    now = datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert progress(START, END, None, None, now).ratio == 0.0
    half = progress(START, END, START + timedelta(hours=2), None, now)
    assert half.percent == "50%" and half.eta is None
    later = progress(START, END, START + timedelta(hours=3), (now, 0.5), now + timedelta(minutes=10))
    assert later.percent == "75%" and later.eta == timedelta(minutes=10)  # 25% per 10 min
    assert progress(START, END, END + timedelta(hours=1), None, now).ratio == 1.0


def test_progress_status_uses_the_previous_observation_for_the_eta() -> None:
    t0 = datetime(2026, 11, 21, 10, tzinfo=UTC)
    us = int((START + timedelta(hours=1)).timestamp() * 1e6)
    first = progress_status(bf({"phase": "Running"}), us, 90_000_000, t0)
    assert first["progress"] == "25%" and first["alignmentLag"] == "90s" and first["eta"] is None
    us2 = int((START + timedelta(hours=2)).timestamp() * 1e6)
    second = progress_status(bf({"phase": "Running", **first}), us2, 0, t0 + timedelta(minutes=5))
    assert second["progress"] == "50%" and second["eta"] == "0:10:00"
    assert progress_status(bf(), -(2**62), None, t0)["globalWatermark"] is None, "held: no watermark yet"
