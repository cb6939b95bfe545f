"""`kappa demo`: the product's story on an embedded catalog, in one command.

Generates impressions and playbacks into a local SQLite Iceberg catalog the way an
ingestion job does, runs the `rmi` pipeline live over the commits (one snapshot per
micro-batch, as it would have seen them), then backfills a window of history with
event-time alignment and checks the backfill against the live output of that window.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kappa_operator.coordinator.core import GroupSpec
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from spark_app.alignment.members import aligned_members
from spark_app.config import JobConfig, parse_config
from spark_app.examples import rmi
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.runtime import RunReport, build_session, run
from spark_app.telemetry import read_trace

START = datetime(2026, 11, 1, 10, tzinfo=UTC)


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    hours: float = 2.0
    seed: int = 7
    impressions_per_hour: int = 4000
    max_drift: str = "5m"


def _config(s: DemoSettings, name: str, mode: str, **fields: Any) -> JobConfig:
    props = {"type": "sql", "uri": f"sqlite:///{s.out}/catalog.db", "warehouse": f"file://{s.out}/warehouse"}
    return parse_config(
        {
            "name": name,
            "pipeline": "spark_app.examples.rmi:pipeline",
            "mode": mode,
            "master": "local[2]",
            "sparkConf": {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
            "catalogs": {"default": props},
            "sinks": {
                rmi.OUTPUT: {"kind": "parquet", "path": str(s.out / name / "out"), "timeColumn": rmi.TIME_COLUMN}
            },
            "checkpoint": {"location": str(s.out / name / "checkpoint")},
            "tracePath": str(s.out / name / "trace.jsonl"),
            **fields,
        }
    )


def _sources(kind: str, **extra: Any) -> dict[str, Any]:
    return {n: {"kind": kind, "table": f"demo.{n}", **extra} for n in ("impressions", "playbacks")}


def run_demo(s: DemoSettings, console: Console) -> dict[str, Any]:
    shutil.rmtree(s.out, ignore_errors=True)
    s.out.mkdir(parents=True)
    from pyiceberg.catalog.sql import SqlCatalog

    gen = GeneratorConfig(
        start=START,
        hours=s.hours,
        impressions_per_hour=s.impressions_per_hour,
        seed=s.seed,
        commit_interval=timedelta(minutes=5),
    )
    with console.status("generating impressions and playbacks into the local Iceberg catalog"):
        t = time.monotonic()
        stats = generate(
            SqlCatalog("default", uri=f"sqlite:///{s.out}/catalog.db", warehouse=f"file://{s.out}/warehouse"), gen
        )
        gen_s = time.monotonic() - t
    console.print(
        f"[bold]data[/]: {stats.impressions} impressions, {stats.playbacks} playbacks in {stats.commits} commits "
        f"({stats.late_events} late events, widest file spans {stats.max_file_span_s / 60:.1f} min of event time) "
        f"in {gen_s:.1f}s"
    )
    live_cfg = _config(
        s,
        "rmi-live",
        "live",
        trigger={"kind": "availableNow"},
        sources=_sources("icebergLive", startingPosition="earliest", readLimit={"maxSnapshots": 1}),
    )
    spark = build_session(live_cfg)
    spark.sparkContext.setLogLevel("ERROR")
    with console.status("running rmi live over the commits, one snapshot per micro-batch"):
        live = run(live_cfg, spark)
    hours = s.hours
    w_start = START + timedelta(hours=hours / 4)
    w_end = START + timedelta(hours=hours * 3 / 4)
    # Alignment through an embedded coordinator on 127.0.0.1, as the operator would run it.
    token = secrets.token_urlsafe(16)
    with EmbeddedCoordinator(Service(token)) as coordinator:
        bf_cfg = _config(
            s,
            "rmi-backfill",
            "backfill",
            sources=_sources("icebergBackfill"),
            window={"start": w_start.isoformat(), "end": w_end.isoformat(), "warmup": "30m"},
            alignment={"maxDrift": s.max_drift},
            coordinator={"url": coordinator.url, "token": token},
        )
        group = GroupSpec(
            name=bf_cfg.alignment_group,
            members=aligned_members(bf_cfg),
            max_drift_us=int(bf_cfg.alignment.effective_drift.total_seconds() * 1_000_000),
        )
        coordinator.service.core.declare(group, time.time_ns() // 1000)
        with console.status(f"backfilling {w_start:%H:%M}..{w_end:%H:%M} from Iceberg history, aligned"):
            backfill = run(bf_cfg, spark)
        coordinator_reports = len(coordinator.service.core.history(group.name))

    from pyspark.sql import functions as F

    live_rows = spark.read.parquet(str(s.out / "rmi-live" / "out")).where(
        (F.col(rmi.TIME_COLUMN) >= F.lit(w_start)) & (F.col(rmi.TIME_COLUMN) < F.lit(w_end))
    )
    bf_rows = spark.read.parquet(str(s.out / "rmi-backfill" / "out"))
    live_set = {tuple(r) for r in live_rows.collect()}
    bf_set = {tuple(r) for r in bf_rows.collect()}
    match = len(live_set & bf_set) / max(len(live_set | bf_set), 1)
    decisions = read_trace(s.out / "rmi-backfill" / "trace.jsonl", "admission")
    summary = {
        "data": {
            "impressions": stats.impressions,
            "playbacks": stats.playbacks,
            "commits": stats.commits,
            "late_events": stats.late_events,
        },
        "live": live.summary(),
        "backfill": backfill.summary(),
        "window": [w_start.isoformat(), w_end.isoformat()],
        "live_rows_in_window": len(live_set),
        "backfill_rows": len(bf_set),
        "match_ratio": round(match, 6),
        "admission_decisions": len(decisions),
        "throttled_decisions": sum(1 for d in decisions if d["throttled"]),
        "coordinator_reports": coordinator_reports,
        "event_hours_per_wall_hour": round((w_end - w_start).total_seconds() / max(backfill.seconds, 1e-9), 1),
    }
    (s.out / "summary.json").write_text(json.dumps(summary, indent=2))
    _print(console, summary, live, backfill, s)
    return summary


def _print(console: Console, summary: dict[str, Any], live: RunReport, backfill: RunReport, s: DemoSettings) -> None:
    table = Table(title="rmi: live vs backfill from Iceberg history")
    for col in ("run", "rows", "batches", "wall s", "rows/s", "late drops", "peak state", "end wm"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for label, rep in (("live", live), ("backfill", backfill)):
        d = rep.summary()
        table.add_row(
            label,
            str(d["input_rows"]),
            str(d["batches"]),
            f"{d['seconds']:.1f}",
            f"{d['rows_per_s']:.0f}",
            str(d["dropped_by_watermark"]),
            str(d["peak_state_rows"]),
            str(d["last_watermark"])[11:16],  # time of day; the date is the dataset's
        )
    console.print(table)
    w0, w1 = summary["window"]
    console.print(f"live: commit by commit; backfill: aligned, maxDrift {s.max_drift}, window {w0} .. {w1}")
    console.print(
        f"backfill wrote {summary['backfill_rows']} attributed plays, live had {summary['live_rows_in_window']} "
        f"in the window -> match ratio [bold]{summary['match_ratio']:.4f}[/]"
    )
    console.print(
        f"{summary['throttled_decisions']}/{summary['admission_decisions']} admission decisions throttled by "
        f"alignment; {summary['event_hours_per_wall_hour']} event-hours per wall-hour"
    )
    console.print(f"aligned through the embedded watermark coordinator: {summary['coordinator_reports']} reports")
    console.print(f"guard: {backfill.lateness.message if backfill.lateness else 'n/a'}")
    console.print(f"outputs, checkpoints, traces and summary.json under {s.out}")
