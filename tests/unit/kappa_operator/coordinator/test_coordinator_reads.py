"""What backfills read, as the coordinator keeps it: cumulative bytes and files per member
(optional on the wire, both ways), the read rate over the last minute or two, the Prometheus
counters, and the fields of the progress view the operator puts into a Backfill's status."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kappa_operator.coordinator import groups as groups_module
from kappa_operator.coordinator.core import (
    RATE_WINDOW_US,
    ReadSample,
    ReadStats,
    ReadTotals,
    apply_report,
    count_reads,
    declare,
    read_rate,
    read_totals,
)
from kappa_operator.coordinator.groups import EmbeddedGroups, GroupProgress
from kappa_operator.coordinator.messages import GroupSpec, Report
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.coordinator.store import GroupStore
from spark_app.alignment.http import CoordinatorRejectedError, HttpWatermarkProvider
from spark_app.contract.alignment import ReadCount
from tests.unit.coordinator_http import TOKEN, call, provider
from tests.unit.coordinator_http import declare as declare_over_http

MIN = 60_000_000
S = 1_000_000
A, B, OTHER = "bf/out/a", "bf/out/b", "other/out/a"


def reported(member: str, wm: int | None, nbytes: int | None = None, nfiles: int | None = None, **kw: Any) -> Report:
    return Report(member=member, watermark=wm, finished=wm is None, read_bytes=nbytes, read_files=nfiles, **kw)


# --- the pure core ---------------------------------------------------------------------------


def test_the_rate_is_measured_from_a_mark_one_to_two_windows_old() -> None:
    stats = count_reads(None, 100, 1, now_us=0)
    assert stats == ReadStats(100, 1, 0, ReadSample(0, 100, 1), ReadSample(0, 100, 1))
    stats = count_reads(stats, 700, 4, now_us=30 * S)  # within the window: the marks stay
    assert (stats.mark, stats.next_mark) == (ReadSample(0, 100, 1), ReadSample(0, 100, 1))
    stats = count_reads(stats, 1300, 7, now_us=RATE_WINDOW_US)  # a window on: the next mark moves up
    assert (stats.mark, stats.next_mark) == (ReadSample(0, 100, 1), ReadSample(RATE_WINDOW_US, 1300, 7))
    stats = count_reads(stats, 1900, 9, now_us=2 * RATE_WINDOW_US)
    assert stats.mark == ReadSample(RATE_WINDOW_US, 1300, 7)


def test_totals_that_go_down_start_the_measurement_again() -> None:
    stats = count_reads(count_reads(None, 100, 1, 0), 900, 5, 10 * S)
    again = count_reads(stats, 300, 2, 20 * S)
    assert again.mark == again.next_mark == ReadSample(20 * S, 300, 2)


def test_members_reporting_reads_get_a_rate_that_decays_and_is_zero_once_finished() -> None:
    state = declare(None, GroupSpec(name="g", members=(A, B, OTHER), max_drift_us=MIN), 0)
    state, _, _ = apply_report(state, reported(A, 1 * MIN, 0, 0), 0)
    assert read_rate(state.members[A], 5 * S) is None, "one sample: no rate yet"
    state, _, _ = apply_report(state, reported(A, 2 * MIN), 5 * S)  # a report without reads keeps them
    assert state.members[A].reads is not None and state.members[A].reads.bytes == 0
    state, _, _ = apply_report(state, reported(A, 3 * MIN, 10_000, 10), 10 * S)
    assert read_rate(state.members[A], 10 * S) == (1000.0, 1.0)
    assert read_rate(state.members[A], 20 * S) == (500.0, 0.5), "quiet since: the rate decays"
    state, _, _ = apply_report(state, reported(B, 1 * MIN, 4_000, 2), 10 * S)
    state, _, _ = apply_report(state, reported(OTHER, 1 * MIN, 10**9, 99), 10 * S)
    totals = read_totals(state, (A, B), 10 * S)
    assert totals == ReadTotals(bytes=14_000, files=12, bytes_per_s=1000.0, files_per_s=1.0)
    state, _, _ = apply_report(state, reported(A, None), 11 * S)
    assert read_rate(state.members[A], 12 * S) == (0.0, 0.0)
    assert read_totals(state, (A,), 12 * S) == ReadTotals(10_000, 10, 0.0, 0.0), "finished keeps its totals"


def test_a_reset_keeps_what_the_member_read_until_it_reports_again() -> None:
    """A restarted reader resets its watermark before its first admission; its totals come
    from its offsets and continue, so the totals shown must not drop (nor the counter vanish)."""
    state = declare(None, GroupSpec(name="g", members=(A,), max_drift_us=MIN), 0)
    state, _, _ = apply_report(state, reported(A, 5 * MIN, 5000, 5), 0)
    state, _, _ = apply_report(state, reported(A, 1 * MIN, reset=True), 1 * S)
    totals = read_totals(state, (A,), 1 * S)
    assert totals is not None and (totals.bytes, totals.files) == (5000, 5)
    state, _, _ = apply_report(state, reported(A, 2 * MIN, 6000, 6), 2 * S)
    totals = read_totals(state, (A,), 2 * S)
    assert totals is not None and (totals.bytes, totals.files) == (6000, 6)
    state, _, _ = apply_report(state, reported(A, 2 * MIN, 100, 1), 3 * S)  # a fresh ledger: measured afresh
    totals = read_totals(state, (A,), 3 * S)
    assert totals is not None and (totals.bytes, totals.files) == (100, 1)


def test_no_reads_reported_means_no_totals() -> None:
    state = declare(None, GroupSpec(name="g", members=(A,), max_drift_us=MIN), 0)
    state, _, _ = apply_report(state, reported(A, 5 * MIN), 0)
    assert read_totals(state, (A,), 0) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"read_bytes": 10}, "readBytes and readFiles: give both or neither"),
        ({"read_files": 1}, "readBytes and readFiles: give both or neither"),
        ({"read_bytes": -1, "read_files": 0}, "read_bytes"),
    ],
)
def test_read_counts_are_validated(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Report(member=A, watermark=1, **kwargs)


# --- over HTTP, with the Spark side's client -----------------------------------------------


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[EmbeddedCoordinator]:
    with EmbeddedCoordinator(Service(TOKEN, GroupStore(tmp_path / "groups.json"))) as c:
        yield c


def test_reads_travel_to_the_group_view_and_the_metrics(coordinator: EmbeddedCoordinator) -> None:
    declare_over_http(coordinator.url, members=(A, B))
    p = provider(coordinator.url)
    p.report(A, 1 * MIN, read=ReadCount(1000, 2))
    p.report(A, 2 * MIN, read=ReadCount(5000, 6))
    p.report(B, 1 * MIN)  # an older Spark side: no read counts
    status, group = call(coordinator.url, "GET", "/v1/groups/g")
    assert status == 200
    a = group["members"][A]
    assert (a["readBytes"], a["readFiles"]) == (5000, 6) and a["readBytesPerSecond"] > 0
    assert "readBytes" not in group["members"][B]
    status, text = call(coordinator.url, "GET", "/metrics")
    assert status == 200
    assert f'kappa_backfill_read_bytes_total{{backfill="bf",group="g",member="{A}"}} 5000.0' in text
    assert f'kappa_backfill_read_files_total{{backfill="bf",group="g",member="{A}"}} 6.0' in text
    assert f'member="{B}"' not in text.split("kappa_backfill_read_bytes_total", 1)[1]
    assert "# TYPE kappa_backfill_read_bytes_total counter" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"readBytes": -5, "readFiles": 1}, "readBytes: Input should be greater than or equal to 0"),
        ({"readBytes": 5}, "readBytes and readFiles: give both or neither"),
        ({"readBytes": "lots", "readFiles": 1}, "readBytes"),
    ],
)
def test_bad_read_counts_get_400_naming_the_field(
    coordinator: EmbeddedCoordinator, extra: dict[str, Any], message: str
) -> None:
    declare_over_http(coordinator.url, members=(A,))
    status, body = call(coordinator.url, "POST", "/v1/groups/g/reports", {"member": A, "watermark": MIN, **extra})
    assert status == 400 and message in body["error"], body


class OldCoordinator(BaseHTTPRequestHandler):
    """A coordinator from before read counts: unknown body fields are a 400."""

    bodies: list[dict[str, Any]] = []
    refusal = "readBytes: Extra inputs are not permitted"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        OldCoordinator.bodies.append(body)
        if "readBytes" in body:
            status, answer = 400, {"error": OldCoordinator.refusal}
        else:
            status, answer = 200, {"globalWatermark": body["watermark"], "held": False, "missing": [], "holders": []}
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_older_coordinator_gets_reports_without_read_counts() -> None:
    server = HTTPServer(("127.0.0.1", 0), OldCoordinator)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        p = HttpWatermarkProvider(f"http://127.0.0.1:{server.server_port}", "g", TOKEN, 5.0, 2.0)
        OldCoordinator.bodies.clear()
        assert p.report(A, 1 * MIN, read=ReadCount(10, 1)).global_watermark == 1 * MIN
        assert p.report(A, 2 * MIN, read=ReadCount(20, 2)).global_watermark == 2 * MIN
        assert ["readBytes" in b for b in OldCoordinator.bodies] == [True, False, False], "asked once, then not"
        # another refusal whose text merely holds "read" (a member named job/reader/x, "already")
        # is not taken for an old coordinator: it is raised, and reads are still sent after it
        OldCoordinator.refusal = "member 'job/reader/x' is already finished"
        q = HttpWatermarkProvider(f"http://127.0.0.1:{server.server_port}", "g", TOKEN, 5.0, 2.0)
        with pytest.raises(CoordinatorRejectedError, match="already finished"):
            q.report(A, 3 * MIN, read=ReadCount(30, 3))
        assert q._send_reads, "still sending reads"
    finally:
        OldCoordinator.refusal = "readBytes: Extra inputs are not permitted"
        server.shutdown()
        server.server_close()


# --- the progress view the operator reads ---------------------------------------------------


def test_progress_carries_the_backfill_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service(TOKEN)
    groups = EmbeddedGroups(service)
    clock = [1_000 * S]
    monkeypatch.setattr(groups_module, "_now", lambda: clock[0])
    groups.join(GroupSpec(name="ns.g", members=(A, B), max_drift_us=10 * MIN))
    groups.join(GroupSpec(name="ns.g", members=(OTHER,), max_drift_us=10 * MIN))
    core = service.core
    for member, nbytes in ((A, 0), (B, 0), (OTHER, 0)):
        core.report("ns.g", reported(member, 1 * MIN, nbytes, 0), clock[0])
    assert groups.progress("ns.g", "bf") == GroupProgress(
        1 * MIN, 0, False, read_bytes=0, read_files=0, read_bytes_per_s=None, read_files_per_s=None
    )
    clock[0] += 10 * S
    core.report("ns.g", reported(A, 2 * MIN, 30_000_000, 3), clock[0])
    core.report("ns.g", reported(B, 2 * MIN, 20_000_000, 2), clock[0])
    core.report("ns.g", reported(OTHER, 2 * MIN, 10**12, 900), clock[0])
    seen = groups.progress("ns.g", "bf")
    assert seen is not None
    assert (seen.read_bytes, seen.read_files) == (50_000_000, 5), "only this backfill's members"
    assert seen.read_bytes_per_s == pytest.approx(5_000_000) and seen.read_files_per_s == pytest.approx(0.5)


def test_progress_without_reads_keeps_the_fields_empty() -> None:
    service = Service(TOKEN)
    groups = EmbeddedGroups(service)
    groups.join(GroupSpec(name="ns.g", members=(A,), max_drift_us=10 * MIN))
    service.core.report("ns.g", reported(A, 1 * MIN), groups_module._now())
    seen = groups.progress("ns.g", "bf")
    assert seen is not None and seen.global_watermark_us == 1 * MIN
    assert (seen.read_bytes, seen.read_files, seen.read_bytes_per_s, seen.read_files_per_s) == (None,) * 4
