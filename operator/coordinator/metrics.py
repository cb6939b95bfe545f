"""Prometheus metrics of the coordinator (prometheus-client), named by the conventions: base
units (`_seconds`), `_total` counters, and no `job` label (Prometheus renames it on scrape).

Watermarks, lags and membership are computed from the core's state at scrape time (a
collector), so a member's lag follows the global watermark even when that member is quiet;
reports, rejections, latency and throttle time are counted as they happen. What members read
is a counter whose value the members keep (cumulative bytes and file opens of the splits
they admitted, from their offsets), exported as reported: a restarted member continues it, and
``rate()`` gives the read rate a Backfill's ``readLimit`` caps.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kappa_operator.coordinator.core import Coordinator, view

US = 1_000_000


class AlignmentCollector(Collector):
    def __init__(self, core: Coordinator, throttled: dict[tuple[str, str], float]) -> None:
        self.core, self.throttled = core, throttled

    def collect(self) -> Iterator[Metric]:
        member_wm = GaugeMetricFamily(
            "kappa_alignment_member_watermark_seconds",
            "Event-time watermark a member last reported (Unix seconds)",
            labels=["group", "member"],
        )
        global_wm = GaugeMetricFamily(
            "kappa_alignment_global_watermark_seconds",
            "Global watermark of an alignment group: min over unfinished, non-idle members (Unix seconds)",
            labels=["group"],
        )
        lag = GaugeMetricFamily(
            "kappa_alignment_lag_seconds",
            "Member watermark minus the group's global watermark: how far ahead the member is",
            labels=["group", "member"],
        )
        throttled = GaugeMetricFamily(
            "kappa_alignment_member_throttled",
            "1 while the member's last admission was cut by the drift bound",
            labels=["group", "member"],
        )
        members = GaugeMetricFamily(
            "kappa_alignment_group_members",
            "Members of a group by state (active, idle, missing, finished; none in a state: no series)",
            labels=["group", "state"],
        )
        read_labels = ["group", "member", "backfill"]
        read_bytes = CounterMetricFamily(
            "kappa_backfill_read_bytes",
            "Bytes of data files (or row groups) a backfill member's admitted splits read, as Iceberg sizes them",
            labels=read_labels,
        )
        read_files = CounterMetricFamily(
            "kappa_backfill_read_files",
            "Data file opens of a backfill member's admitted splits",
            labels=read_labels,
        )
        now = time.time_ns() // 1000
        for name, state in self.core.groups().items():
            answer = view(state, now)
            gw = None if answer.held else answer.global_watermark
            if gw is not None:
                global_wm.add_metric([name], gw / US)
            finished = 0
            for member, m in state.members.items():
                finished += m.finished
                if m.watermark is not None and not m.finished:
                    member_wm.add_metric([name, member], m.watermark / US)
                    if gw is not None:
                        lag.add_metric([name, member], (m.watermark - gw) / US)
                throttled.add_metric([name, member], 1.0 if (name, member) in self.throttled else 0.0)
                if m.reads is not None:
                    labels = [name, member, member.split("/", 1)[0]]  # member ids are backfill/sink/source
                    read_bytes.add_metric(labels, m.reads.bytes)
                    read_files.add_metric(labels, m.reads.files)
            counts = {
                "missing": len(answer.missing),
                "idle": len(answer.idle),
                "finished": finished,
                "active": len(state.roster) - len(answer.missing) - len(answer.idle) - finished,
            }
            for s, n in counts.items():
                if n:  # a state no member is in: no series (3 of 4 per group at 1,000 groups, issue 61)
                    members.add_metric([name, s], n)
        yield from (member_wm, global_wm, lag, throttled, members, read_bytes, read_files)


class CoordinatorMetrics:
    def __init__(self, core: Coordinator, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._throttled_since: dict[tuple[str, str], float] = {}
        r.register(AlignmentCollector(core, self._throttled_since))
        self.throttled_seconds = Counter(
            "kappa_alignment_throttled_seconds_total",
            "Wall time members spent throttled by the drift bound",
            ["group", "member"],
            registry=r,
        )
        self.reports = Counter("kappa_coordinator_reports_total", "Progress reports accepted", ["group"], registry=r)
        self.rejected = Counter(
            "kappa_coordinator_rejected_reports_total",
            "Requests rejected (regression, unknown member or group, bad or oversized body, bad token, forbidden)",
            ["reason"],
            registry=r,
        )
        self.report_latency = Histogram(
            "kappa_coordinator_report_duration_seconds",
            "Time to handle one progress report",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
            registry=r,
        )

    def observe(self, group: str, member: str, throttled: bool, now: float) -> None:
        key = (group, member)
        since = self._throttled_since.pop(key, None)
        if since is not None:
            self.throttled_seconds.labels(group, member).inc(max(0.0, now - since))
        if throttled:
            self._throttled_since[key] = now
        self.reports.labels(group).inc()

    def forget(self, group: str, members: list[str]) -> None:
        """A deleted group's counters disappear instead of freezing at their last values."""
        for m in members:
            self._throttled_since.pop((group, m), None)
            with contextlib.suppress(KeyError):
                self.throttled_seconds.remove(group, m)
        with contextlib.suppress(KeyError):
            self.reports.remove(group)
