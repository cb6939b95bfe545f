"""Alignment through the HTTP coordinator with real local Spark: one query's two sources, two
jobs in one group, and a coordinator restart in the middle of a backfill."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.coordinator.store import GroupStore
from spark_app.apps.run import run
from spark_app.contract.alignment import aligned_members
from spark_app.contract.config import JobConfig
from spark_app.contract.trace import read_trace
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

TOKEN = "t0ken"
DRIFT = timedelta(minutes=4)
DRIFT_US = int(DRIFT.total_seconds() * 1_000_000)
WINDOW = {
    "start": (T0 + timedelta(minutes=40)).isoformat(),
    "end": (T0 + timedelta(minutes=80)).isoformat(),
    "warmup": "30m",
}
COLUMNS = ["playback_id", "impression_id", "profile_id", "title_id", "impression_ts", "playback_ts", "duration_s"]


def rmi_config(
    dataset: Dataset, tmp: Path, coordinator: EmbeddedCoordinator | None, name: str = "rmi-http"
) -> JobConfig:
    extra: dict[str, Any] = {}
    if coordinator is not None:
        extra["coordinator"] = {"url": coordinator.url, "token": TOKEN}
    return dataset.config(
        tmp,
        name=name,
        mode="backfill",
        sink_time_column="playback_ts",
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        window=WINDOW,
        alignment={"maxDrift": "4m", "group": "rmi"},
        **extra,
    )


def declare(c: EmbeddedCoordinator, group: str, members: tuple[str, ...]) -> None:
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
    body = json.dumps({"members": list(members), "maxDrift": "4m"})
    conn.request("PUT", f"/v1/groups/{group}", body, {"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200


def output(spark: SparkSession, tmp: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.parquet(str(tmp / "out")).select(*COLUMNS).collect())


def admissions(trace: Path) -> list[dict[str, Any]]:
    return [e for e in read_trace(trace) if e["event"] == "admission"]


def assert_within_drift(
    events: list[dict[str, Any]], history: list[tuple[int, str, int | None, int | None, int | None]]
) -> None:
    """Every admitted split's lower bound <= the coordinator's global watermark + maxDrift,
    where that global watermark is one the coordinator actually answered."""
    answered = {h[3] for h in history}
    admitted = 0
    for e in events:
        if not e["admitted"]:
            continue
        assert e["global_watermark"] in answered, "the bound came from the coordinator"
        assert max(lower for lower, _, _ in e["admitted"]) <= e["global_watermark"] + DRIFT_US
        admitted += 1
    assert admitted > 3


@pytest.fixture
def reference(rmi_window_reference: tuple[list[tuple[Any, ...]], int]) -> list[tuple[Any, ...]]:
    """The same backfill aligned through the local state file (``conftest``, shared)."""
    return rmi_window_reference[0]


def test_rmi_backfill_through_the_http_coordinator(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, reference: list[tuple[Any, ...]]
) -> None:
    with EmbeddedCoordinator(Service(TOKEN)) as c:
        cfg = rmi_config(dataset, tmp_path, c)
        declare(c, "rmi", aligned_members(cfg))
        report = run(cfg, spark)
        history = [tuple(h) for h in c.service.core.history("rmi")]
    assert report.dropped_by_watermark == 0
    assert {h[1] for h in history} == set(aligned_members(cfg))
    events = admissions(tmp_path / "trace.jsonl")
    assert_within_drift(events, history)  # type: ignore[arg-type]
    assert any(e["throttled"] for e in events), "the faster source was held back"
    globals_ = [h[3] for h in history if h[3] is not None and h[3] > 0]
    assert globals_ == sorted(globals_), "the global watermark never goes back"
    assert output(spark, tmp_path) == reference


def copy_job(dataset: Dataset, tmp: Path, name: str, table: str, c: EmbeddedCoordinator, **alignment: Any) -> JobConfig:
    """A copy backfill of one table over WINDOW, aligned through the coordinator ``c``."""
    return dataset.config(
        tmp / name,
        name=name,
        pipeline="spark_app.examples.copy:pipeline",
        output="copy",
        mode="backfill",
        sources=sources("icebergBackfill", (table,), split={"maxBundleSpan": alignment.pop("bundle", "2m")}),
        window={"start": WINDOW["start"], "end": WINDOW["end"]},
        alignment={"maxDrift": "4m", **alignment},
        coordinator={"url": c.url, "token": TOKEN},
    )


def run_together(spark: SparkSession, cfgs: tuple[JobConfig, ...]) -> None:
    """Run the jobs concurrently (one thread each, one SparkSession), as one group's jobs run."""
    errors: list[BaseException] = []

    def go(cfg: JobConfig) -> None:
        try:
            run(cfg, spark)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(cfg,)) for cfg in cfgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors


def test_two_jobs_in_one_group_stay_aligned(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    with EmbeddedCoordinator(Service(TOKEN)) as c:
        a = copy_job(dataset, tmp_path, "imp-bf", "impressions", c, group="shared")
        b = copy_job(dataset, tmp_path, "play-bf", "playbacks", c, group="shared")
        declare(c, "shared", aligned_members(a) + aligned_members(b))
        run_together(spark, (a, b))
        history = [tuple(h) for h in c.service.core.history("shared")]
    members = {h[1] for h in history}
    assert members == set(aligned_members(a) + aligned_members(b))
    throttled = 0
    for name in ("imp-bf", "play-bf"):
        events = admissions(tmp_path / name / "trace.jsonl")
        assert_within_drift(events, history)  # type: ignore[arg-type]
        throttled += sum(e["throttled"] for e in events)
    assert throttled > 0, "one job was held back by the other"
    rows = {n: spark.read.parquet(str(tmp_path / n / "out")).count() for n in ("imp-bf", "play-bf")}
    assert rows["imp-bf"] > 3 * rows["play-bf"] > 0  # 4x skew, both read to the end


def test_coordinator_restart_mid_backfill(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, reference: list[tuple[Any, ...]]
) -> None:
    store = GroupStore(tmp_path / "groups.json")
    c = EmbeddedCoordinator(Service(TOKEN, store)).start()
    cfg = rmi_config(dataset, tmp_path, c, name="rmi-restart")
    declare(c, "rmi", aligned_members(cfg))
    port = c.port
    done: list[BaseException | None] = []
    worker = threading.Thread(target=lambda: done.append(_run(cfg, spark)))
    worker.start()
    deadline = time.monotonic() + 300
    while len(c.service.core.history("rmi")) < 6:
        assert time.monotonic() < deadline and worker.is_alive(), "the backfill should still be running"
        time.sleep(0.05)
    tried = Tried()
    logging.getLogger("kappa.alignment").addHandler(tried)
    try:
        c.stop()
        stopped = time.time()
        before = [tuple(h) for h in c.service.core.history("rmi")]  # after the stop: a report may land until then
        _wait_for_a_call_after(tmp_path / "trace.jsonl", stopped, worker, tried)  # the sources keep calling
    finally:
        logging.getLogger("kappa.alignment").removeHandler(tried)
    restarted_at = time.time()
    c2 = EmbeddedCoordinator(Service(TOKEN, store), port=port).start()
    worker.join(timeout=600)
    after = [tuple(h) for h in c2.service.core.history("rmi")]
    c2.stop()
    assert done == [None], done

    last_bound = max(h[4] for h in before if h[4] is not None)
    during = [e for e in admissions(tmp_path / "trace.jsonl") if stopped <= e["t"] < restarted_at]
    assert during or tried.unreachable, "sources asked while the coordinator was down"
    for e in during:
        assert e["bound"] is None or e["bound"] <= last_bound, "nothing beyond the last bound while down"
    first = after[0]
    assert first[3] is not None and first[3] < 0, "after the restart the group holds until every member re-reports"
    assert output(spark, tmp_path) == reference


class Tried(logging.Handler):
    """Counts the alignment client's calls that found the coordinator unreachable."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.unreachable = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("coordinator unreachable"):
            self.unreachable += 1


def _wait_for_a_call_after(trace: Path, since: float, worker: threading.Thread, tried: Tried) -> None:
    """Until a source has asked while the coordinator is down: answered from its last bound (an
    admission in the trace), or found it unreachable and waits with a stale view (a source at
    its last bound, since 8f964b9 an AvailableNow source waits instead of ending short). A
    micro-batch on a loaded 2-core machine can take longer than any fixed pause."""
    deadline = time.monotonic() + 120
    while not tried.unreachable:
        try:
            if any(e["t"] >= since for e in admissions(trace)):
                return
        except json.JSONDecodeError:
            pass  # a line being written
        assert time.monotonic() < deadline and worker.is_alive(), "the sources should ask while the coordinator is down"
        time.sleep(0.2)


def _run(cfg: JobConfig, spark: SparkSession) -> BaseException | None:
    try:
        run(cfg, spark)
    except BaseException as exc:
        return exc
    return None


def test_a_declared_source_the_pipeline_does_not_read_does_not_hold_the_group(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """The operator declares a member per configured (sink, source) before the driver starts;
    the windows pipeline reads playbacks only. The driver reports the impressions member
    finished, so the group moves and the whole window is read (it used to end at once,
    'complete', with nothing admitted)."""
    cfg = dataset.config(
        tmp_path,
        name="windows-http",
        pipeline="spark_app.examples.windows:pipeline",
        output="title_windows",
        mode="backfill",
        sink_time_column="window_start",
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        window={**WINDOW, "warmup": "10m"},
        alignment={"maxDrift": "4m", "group": "windows"},
        coordinator={"url": "http://127.0.0.1:1", "token": TOKEN},
    )
    with EmbeddedCoordinator(Service(TOKEN)) as c:
        cfg = cfg.model_copy(update={"coordinator": cfg.coordinator.model_copy(update={"url": c.url})})  # type: ignore[union-attr]
        declare(c, "windows", aligned_members(cfg))
        assert len(aligned_members(cfg)) == 2
        report = run(cfg, spark)
    assert report.edges is not None and report.edges.unused == ("impressions",)
    assert report.input_rows > 100 and report.batches >= 3
    events = admissions(tmp_path / "trace.jsonl")
    assert {e["source"] for e in events} == {"playbacks"}
    assert events[-1]["end"] == events[-1]["total"], "the whole window was admitted"
