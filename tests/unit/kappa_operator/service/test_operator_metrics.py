"""Operator metrics: phases and progress as scrape-time gauges, runs and errors by kind."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from kappa_operator.handlers import context
from kappa_operator.service.metrics import OperatorMetrics


def scrape(m: OperatorMetrics) -> str:
    return generate_latest(m.registry).decode()


def test_phases_and_progress_follow_the_objects() -> None:
    m = OperatorMetrics()
    m.resources.observe("Backfill", "ns", "a", "Running", 0.25)
    m.resources.observe("Backfill", "ns", "b", "Pending")
    m.resources.observe("StreamingJob", "ns", "rmi", "Failed")
    text = scrape(m)
    assert 'kappa_operator_backfills{phase="Running"} 1.0' in text
    assert 'kappa_operator_backfills{phase="Pending"} 1.0' in text
    assert 'kappa_backfill_progress_ratio{backfill="a",namespace="ns"} 0.25' in text
    assert 'kappa_streamingjob_phase{namespace="ns",phase="Failed",streamingjob="rmi"} 1.0' in text
    m.resources.observe("Backfill", "ns", "a", "Running")  # a status write without progress keeps it
    assert 'kappa_backfill_progress_ratio{backfill="a",namespace="ns"} 0.25' in scrape(m)
    m.resources.forget("Backfill", "ns", "a")
    text = scrape(m)
    assert 'backfill="a"' not in text and 'kappa_operator_backfills{phase="Running"}' not in text


def test_an_embedded_registry_is_served_alongside() -> None:
    other = CollectorRegistry()
    Counter("kappa_coordinator_reports", "reports", registry=other).inc(3)
    m = OperatorMetrics()
    m.include(other)
    assert "kappa_coordinator_reports_total 3.0" in scrape(m)


def test_counted_handlers_count_runs_and_errors_by_kind() -> None:
    m = OperatorMetrics()
    context.configure("http://unused", metrics=m)

    @context.counted("Backfill")
    def handler(fail: bool) -> None:
        if fail:
            raise RuntimeError("API server unreachable")

    handler(False)
    with pytest.raises(RuntimeError):
        handler(True)
    text = scrape(m)
    assert 'kappa_operator_reconciles_total{kind="Backfill"} 2.0' in text
    assert 'kappa_operator_reconcile_errors_total{kind="Backfill"} 1.0' in text


def test_queue_wait_elapsed_and_planned_times_for_the_dashboard() -> None:
    """Queue wait (Queued until started), run time (started until ended) and the plan's ETA:
    the queue and plan-vs-actual panels. A status write without them keeps what was seen."""
    from kappa_operator.service.metrics import backfill_times, duration_seconds

    assert duration_seconds("0:01:00") == 60 and duration_seconds("1 day, 2:00:05") == 93605
    assert duration_seconds(None) is None and duration_seconds("soon") is None
    m = OperatorMetrics()
    queued = {"phase": "Queued", "queuedSince": "2026-11-24T10:00:00Z", "plan": {"eta": "0:30:00"}}
    m.resources.observe("Backfill", "ns", "a", "Queued", None, backfill_times(queued))
    text = scrape(m)
    assert 'kappa_backfill_planned_seconds{backfill="a",namespace="ns"} 1800.0' in text
    assert 'kappa_backfill_queue_wait_seconds{backfill="a",namespace="ns"}' in text
    assert "kappa_backfill_elapsed_seconds{" not in text, "not started"
    started = {"phase": "Running", "startedAt": "2026-11-24T10:05:00Z"}
    m.resources.observe("Backfill", "ns", "a", "Running", None, backfill_times(started))
    m.resources.observe("Backfill", "ns", "a", "Running", 0.5, backfill_times({"phase": "Running"}))
    text = scrape(m)
    assert 'kappa_backfill_queue_wait_seconds{backfill="a",namespace="ns"} 300.0' in text, "5 minutes in the queue"
    assert 'kappa_backfill_planned_seconds{backfill="a",namespace="ns"} 1800.0' in text
    assert 'kappa_backfill_elapsed_seconds{backfill="a",namespace="ns"}' in text
    m.resources.observe("Backfill", "ns", "a", "Succeeded", None, backfill_times({"phase": "Succeeded"}))
    first = scrape(m).split('kappa_backfill_elapsed_seconds{backfill="a",namespace="ns"} ')[1].split("\n")[0]
    assert scrape(m).split('kappa_backfill_elapsed_seconds{backfill="a",namespace="ns"} ')[1].split("\n")[0] == first
