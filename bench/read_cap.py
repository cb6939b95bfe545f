"""The read-rate cap (issue 17): a backfill capped at X bytes/s reads at <= 1.1 X averaged over a
minute, measured; and the same backfill uncapped, for its natural rate (so the cap binds).

One generated dataset (impressions + playbacks, a commit every 5 minutes, late events) in a
SQLite SqlCatalog, one local SparkSession, the ``rmi`` pipeline backfilled over the whole
event-time range, aligned (maxDrift 10m), into parquet:

* ``uncapped``  no ``readRate``: its admitted bytes over its reading time are the natural rate;
* ``capped``    ``readRate.maxBytesPerSecond = X``, X chosen from the bytes the uncapped run read
                so that the capped one reads for ``--read-seconds`` (default 90 s; or ``--cap``).

Measured from the sources' own trace (``tracePath``): every admission decision with its time
and the bytes its splits' reads open (Iceberg's sizes of the files or row groups; a time slice
of a wide file costs the row groups it opens, so a file read as two slices counts twice).
``measured_bytes_per_s`` is the bytes admitted over the reading span (first to last
admission), ``wall_bytes_per_s`` over the query's wall time, and ``max_60s_bytes_per_s`` the
most admitted in any 60 s window, divided by 60. The executors' file opens are measured the
same way from their own trace events (``opened``: what the store served, when; projection not
counted, so an upper bound).

    .venv/bin/python -m bench.read_cap --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/read_cap.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import (
    MASTER,
    MAX_DRIFT,
    SPARK_CONF,
    TABLES,
    generate_dataset,
    hour_floor,
    machine,
    measured_parser,
    run_measured,
)
from spark_app.planning.read_rate import BURST_S, FileLayout, row_group_bytes, window_peak

log = logging.getLogger("bench.read_cap")

WINDOW_S = 60.0
TARGET_RATIO = 1.1


def reads(decisions: Sequence[dict[str, Any]], window_s: float = WINDOW_S) -> dict[str, Any]:
    """Admitted bytes and files over time, from a run's ``admission`` trace events."""
    admitted = [(float(d["t"]), float(d["bytes"])) for d in decisions if d.get("bytes")]
    files = [(float(d["t"]), float(d["files"])) for d in decisions if d.get("files")]
    if not admitted:
        return {"bytes": 0, "files": 0, "span_s": 0.0}
    first, last = admitted[0][0], admitted[-1][0]
    span = last - first
    total = sum(b for _, b in admitted)
    return {
        "bytes": int(total),
        "files": int(sum(f for _, f in files)),
        "decisions": len(decisions),
        "admissions": len(admitted),
        "rate_limited": sum(bool(d.get("rate_limited")) for d in decisions),
        "read_wait_s": round(sum(float(d.get("read_wait_s") or 0) for d in decisions), 2),
        "span_s": round(span, 2),
        "bytes_per_s": round(total / span, 1) if span > 0 else None,
        "max_60s_bytes_per_s": round(window_peak(admitted, window_s) / window_s, 1),
        "largest_admission_bytes": int(max(b for _, b in admitted)),
    }


def opened(
    opens: Sequence[dict[str, Any]], layouts: dict[str, FileLayout], window_s: float = WINDOW_S
) -> dict[str, Any]:
    """Executor file opens over time, each charged the bytes of the row groups it read (the
    whole file when it read all of them), projection not counted."""
    events = [(float(o["t"]), float(row_group_bytes(layouts[o["path"]], o["row_groups"]))) for o in opens]
    if not events:
        return {"opens": 0}
    events.sort()
    span = events[-1][0] - events[0][0]
    total = sum(b for _, b in events)
    return {
        "opens": len(events),
        "bytes": int(total),
        "span_s": round(span, 2),
        "bytes_per_s": round(total / span, 1) if span > 0 else None,
        "max_60s_bytes_per_s": round(window_peak(events, window_s) / window_s, 1),
    }


def file_layouts(props: dict[str, str]) -> dict[str, FileLayout]:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("default", **props)
    return {
        task.file.file_path: (task.file.file_size_in_bytes, tuple(task.file.split_offsets or ()))
        for t in TABLES
        for task in catalog.load_table(f"demo.{t}").scan().plan_files()
    }


def job(props: dict[str, str], run_dir: Path, name: str, window: dict[str, str], cap: int | None) -> Any:
    from spark_app.contract.config import parse_config

    return parse_config(
        {
            "name": name,
            "pipeline": "spark_app.examples.rmi:pipeline",
            "mode": "backfill",
            "master": MASTER,
            "sparkConf": {k: v for k, v in SPARK_CONF.items() if k != "spark.sql.shuffle.partitions"},
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {t: {"kind": "icebergBackfill", "table": f"demo.{t}"} for t in TABLES},
            "sinks": {
                "attributed_plays": {"kind": "parquet", "path": str(run_dir / "out"), "timeColumn": "playback_ts"}
            },
            "checkpoint": {"location": str(run_dir / "ckpt")},
            "window": window,
            "alignment": {"mode": "aligned", "maxDrift": MAX_DRIFT, "stateDir": str(run_dir / "state")},
            "trigger": {"kind": "availableNow"},
            "tracePath": str(run_dir / "trace.jsonl"),
            **({"readRate": {"maxBytesPerSecond": cap}} if cap else {}),
        }
    )


def measure_run(spark: Any, cfg: Any, run_dir: Path, layouts: dict[str, FileLayout]) -> dict[str, Any]:
    from spark_app.apps.run import run
    from spark_app.contract.trace import read_trace

    started = time.monotonic()
    report = run(cfg, spark)
    wall = time.monotonic() - started
    trace = Path(cfg.trace_path)
    summary = report.summary()
    return {
        "wall_s": round(wall, 2),
        "query_s": round(report.seconds, 2),
        "batches": report.batches,
        "input_rows": report.input_rows,
        "wall_bytes_per_s": summary["read_bytes_per_s"],
        "read_bytes": summary["read_bytes"],
        "read_files": summary["read_files"],
        "admitted": reads(read_trace(trace, "admission")),
        "opened": opened(read_trace(trace, "open"), layouts),
        "output_rows": spark.read.parquet(str(run_dir / "out")).count(),
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from spark_app.apps.run import run
    from spark_app.apps.session import build_session

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("data", "runs"):
        shutil.rmtree(out / sub, ignore_errors=True)
    load_start = round(os.getloadavg()[0], 2)
    log.info("generating %s h at %d impressions/h", args.hours, args.impressions_per_hour)
    props, _gen, stats, gen_s = generate_dataset(out / "data", args.hours, args.impressions_per_hour)
    start = hour_floor(stats.first_event)
    end = hour_floor(stats.last_event) + timedelta(hours=1)
    window = {"start": start.isoformat(), "end": end.isoformat(), "warmup": "0s"}
    layouts = file_layouts(props)
    runs = out / "runs"

    spark = build_session(job(props, runs / "session", "bench-session", window, None))
    spark.sparkContext.setLogLevel("WARN")
    # Untimed warm-up (the first hour): JVM, Python workers, the join, the source processes.
    first_hour = {**window, "end": (start + timedelta(hours=1)).isoformat()}
    run(job(props, runs / "warmup", "bench-warmup", first_hour, None), spark)

    uncapped = measure_run(
        spark, job(props, runs / "uncapped", "bench-uncapped", window, None), runs / "uncapped", layouts
    )
    natural = uncapped["admitted"]["bytes_per_s"]
    cap = args.cap or max(1, int(uncapped["admitted"]["bytes"] / args.read_seconds))
    log.info("uncapped: %s bytes at %s bytes/s; capping at %d bytes/s", uncapped["read_bytes"], natural, cap)
    capped = measure_run(spark, job(props, runs / "capped", "bench-capped", window, cap), runs / "capped", layouts)

    measured = capped["admitted"]["bytes_per_s"]
    peak = capped["admitted"]["max_60s_bytes_per_s"]
    opens = capped["opened"]
    return {
        "benchmark": "read_cap",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine(), "loadavg_1m_start": load_start},
        "dataset": {
            "hours": args.hours,
            "impressions_per_hour": args.impressions_per_hour,
            "impressions": stats.impressions,
            "playbacks": stats.playbacks,
            "data_files": len(layouts),
            "data_bytes": sum(size for size, _ in layouts.values()),
            "generate_s": round(gen_s, 1),
        },
        "burst_s": BURST_S,
        "cap_bytes_per_s": cap,
        "measured_bytes_per_s": measured,
        "max_60s_bytes_per_s": peak,
        "ratio": round(measured / cap, 3) if measured else None,
        "max_60s_ratio": round(peak / cap, 3),
        "wall_ratio": round(capped["wall_bytes_per_s"] / cap, 3) if capped["wall_bytes_per_s"] else None,
        "target_ratio": TARGET_RATIO,
        "met": bool(measured and measured / cap <= TARGET_RATIO and peak / cap <= TARGET_RATIO),
        "opened_ratio": round(opens["bytes_per_s"] / cap, 3) if opens.get("bytes_per_s") else None,
        "opened_max_60s_ratio": round(opens["max_60s_bytes_per_s"] / cap, 3) if opens.get("opens") else None,
        "reading_span_s": capped["admitted"]["span_s"],
        "natural_bytes_per_s": natural,
        "natural_over_cap": round(natural / cap, 2) if natural else None,
        "same_output_rows": capped["output_rows"] == uncapped["output_rows"],
        "runs": {"uncapped": uncapped, "capped": capped},
    }


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--hours", type=float, default=4.0, help="hours of generated data (default 4)")
    p.add_argument("--impressions-per-hour", type=int, default=50_000, help="default 50,000")
    p.add_argument("--read-seconds", type=float, default=90.0, help="how long the capped run should read (>= 60)")
    p.add_argument("--cap", type=int, help="the cap in bytes/s (default: from the data, see --read-seconds)")
    args = p.parse_args(argv)
    if args.read_seconds < WINDOW_S and not args.cap:
        p.error(f"--read-seconds must be >= {WINDOW_S:.0f}: the cap is measured over a minute")
    return run_measured(args, bench, "kappa-read-cap-")


if __name__ == "__main__":
    sys.exit(main())
