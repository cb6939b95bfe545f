"""The limit on a pipeline's external calls (issue 31 item 3): a backfill whose pipeline calls an
HTTP service once per row holds the job's limit L within 10% over any 1 s and 5 s, measured by
the service; and the same backfill without a limit, for the rate it would call at (so the limit
binds).

One generated dataset (impressions + playbacks, a commit every 5 minutes, late events) in a
SQLite SqlCatalog, one local SparkSession. The pipeline is ``spark_app.examples.external_labels``:
a pandas UDF over the playbacks making one ``GET`` per row to a real HTTP service on loopback
(aiohttp, in this process, recording when each request arrived), through
``external_calls.limiter()``. Backfilled over the whole event-time range, unordered, into
parquet, by the project's runtime (``spark_app.apps.run.run``, what ``kappa run`` and the driver
run):

* ``unlimited``  no ``externalCalls``: the rate the job calls at by itself (the baseline);
* ``limited``    ``externalCalls.ratePerSecond = L`` (``--limit``, default 100/s).

``achieved_over_limit`` is the calls over the calling phase (first to last arrival) / L;
``max_1s_over_limit`` and ``max_5s_over_limit`` the busiest 1 s and 5 s window as the service saw
it / L; ``bound_1s_over_limit`` what the lease schedule allows over 1 s
(``spark_app.external_calls.pacing.window_bound``). Run from the repository root::

    .venv/bin/python -m bench.external_calls --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/external_calls.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import (
    MASTER,
    SPARK_CONF,
    generate_dataset,
    hour_floor,
    machine,
    measured_parser,
    run_measured,
)
from harness.external_service import RecordingService, rates
from spark_app.external_calls.pacing import window_bound

log = logging.getLogger("bench.external_calls")
TARGET_RATIO = 1.1


def job(props: dict[str, str], run_dir: Path, name: str, window: dict[str, str], url: str, limit: float | None) -> Any:
    from spark_app.contract.config import parse_config

    return parse_config(
        {
            "name": name,
            "pipeline": "spark_app.examples.external_labels:enrich",
            "pipelineArgs": {"url": url},
            "mode": "backfill",
            "master": MASTER,
            "sparkConf": {k: v for k, v in SPARK_CONF.items() if k != "spark.sql.shuffle.partitions"},
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {"playbacks": {"kind": "icebergBackfill", "table": "demo.playbacks"}},
            "sinks": {"enriched": {"kind": "parquet", "path": str(run_dir / "out"), "timeColumn": "event_ts"}},
            "checkpoint": {"location": str(run_dir / "ckpt")},
            "window": window,
            "alignment": {"mode": "unordered"},
            "trigger": {"kind": "availableNow"},
            **({"externalCalls": {"ratePerSecond": limit}} if limit else {}),
        }
    )


def measure_run(spark: Any, cfg: Any, service: RecordingService, limit: float | None) -> dict[str, Any]:
    from spark_app.apps.run import run

    before = len(service.times())
    started = time.monotonic()
    report = run(cfg, spark)
    wall = time.monotonic() - started
    arrivals = service.times()[before:]
    out: dict[str, Any] = {
        "wall_s": round(wall, 2),
        "input_rows": report.input_rows,
        **rates(arrivals, limit),
    }
    if report.external_calls is not None:
        c = report.external_calls
        out["driver_counted"] = {
            "calls": c.calls,
            "granted": c.granted,
            "expired": c.expired,
            "waited_s": c.waited_seconds,
        }
    return out


def bench(args: argparse.Namespace) -> dict[str, Any]:
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
    runs = out / "runs"
    service = RecordingService(delay_s=args.service_delay_ms / 1000)
    try:
        spark = build_session(job(props, runs / "session", "bench-session", window, service.url, None))
        spark.sparkContext.setLogLevel("WARN")
        unlimited = measure_run(
            spark, job(props, runs / "unlimited", "calls-unlimited", window, service.url, None), service, None
        )
        log.info(
            "unlimited: %s calls at %s/s; limiting to %s/s", unlimited["calls"], unlimited["achieved_per_s"], args.limit
        )
        limited = measure_run(
            spark, job(props, runs / "limited", "calls-limited", window, service.url, args.limit), service, args.limit
        )
    finally:
        service.stop()
    limit = args.limit
    peak1, peak5 = limited["max_1s_over_limit"], limited["max_5s_over_limit"]
    natural = unlimited["achieved_per_s"]
    return {
        "benchmark": "external_calls",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine(), "loadavg_1m_start": load_start},
        "dataset": {
            "hours": args.hours,
            "impressions_per_hour": args.impressions_per_hour,
            "playbacks": stats.playbacks,
            "generate_s": round(gen_s, 1),
        },
        "service_delay_ms": args.service_delay_ms,
        "limit_per_s": limit,
        "achieved_over_limit": limited["achieved_over_limit"],
        "max_1s_over_limit": peak1,
        "max_5s_over_limit": peak5,
        "bound_1s_over_limit": round(window_bound(limit, 1.0) / limit, 3),
        "target_ratio": TARGET_RATIO,
        "met": bool(peak1 is not None and peak1 <= TARGET_RATIO and peak5 <= TARGET_RATIO),
        "unlimited_per_s": natural,
        "unlimited_over_limit": round(natural / limit, 2) if natural else None,
        "runs": {"unlimited": unlimited, "limited": limited},
    }


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--hours", type=float, default=2.0, help="hours of generated data (default 2)")
    p.add_argument("--impressions-per-hour", type=int, default=6000, help="default 6,000 (a quarter are playbacks)")
    p.add_argument("--limit", type=float, default=100.0, help="the job's limit, calls per second (default 100)")
    p.add_argument(
        "--service-delay-ms", type=float, default=0.0, help="what each call takes at the service (default 0)"
    )
    return run_measured(p.parse_args(argv), bench, "kappa-external-calls-")


if __name__ == "__main__":
    sys.exit(main())
