"""Aligned backfills over files whose event-time ranges span many slices (issue 42 item 3).

The workload of the issue: a clicks x impressions range join (``rmi``) with a 6 h bound, 3 h of
history at 2,000 clicks/min (four impressions per click), one commit per ingestion minute, 1% of
events 30-90 minutes late. Each file's rows are its minute plus a late tail, so its range meets
every admission step of the next hour and a half: an aligned run reads it once per step.

Runs (same SparkSession, local[2], each to a Parquet sink):

* ``spark_batch``  the batch job a user would write: the same ``rmi.pipeline`` over the
  tables' data files read by ``spark.read.parquet``, cut to the window;
* ``unordered``    one batch, no ordering;
* ``aligned_30m``  ``maxDrift: 30m``;
* ``aligned_10m``  ``maxDrift: 10m``;
* ``auto``         the default: the planner's choice (bounded here: every late row arrived
  within the 6 h delay), for what a user gets without setting a mode.

Per run: wall seconds, the rows the sources delivered (the run report's ``input_rows``), the
rows the readers decoded from Parquet (``scanned_rows``), their ratio, the rows served from a
file's earlier read (``reused_rows``), output rows and whether the output equals the batch
job's (``fingerprint``). A warm-up run of the first 10 minutes goes first::

    .venv/bin/python -m bench.wide_files --driver-memory 6g --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import SPARK_CONF, batch_frame, machine

log = logging.getLogger("bench.wide_files")

T0 = datetime(2026, 11, 2, 9, tzinfo=UTC)
BOUND = "6 hours"
OUTPUT = "attributed_plays"
TABLES = ("impressions", "playbacks")
ALIGNED = {"aligned_30m": "30m", "aligned_10m": "10m"}


def config(
    props: dict[str, str], out: Path, alignment: dict[str, str], hours: float, split: dict[str, str] | None = None
) -> Any:
    """The rmi backfill of the first ``hours`` into a Parquet sink under ``out``; ``split``:
    the sources' split settings (None: none, the spans fitted to the lateness)."""
    from spark_app.contract.config import parse_config

    source = {"kind": "icebergBackfill", **({"split": split} if split is not None else {})}
    return parse_config(
        {
            "name": f"wide-{out.name.replace('_', '-')}",
            "pipeline": "spark_app.examples.rmi:pipeline",
            "pipelineArgs": {"lateness": BOUND, "attribution_window": BOUND},
            "mode": "backfill",
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {t: {**source, "table": f"demo.{t}"} for t in TABLES},
            "alignment": alignment,
            "window": {
                "start": T0.isoformat(),
                "end": (T0 + timedelta(hours=hours)).isoformat(),
                "warmup": "0s",
                "allowShortWarmup": True,
                "drain": "0s",
            },
            "sinks": {OUTPUT: {"kind": "parquet", "path": str(out / "out")}},
            "checkpoint": {"location": str(out / "ckpt")},
            "sparkConf": SPARK_CONF,
            "master": "local[2]",
        }
    )


def late_tables(root: Path, hours: float, clicks_per_minute: int, impressions_per_click: float) -> tuple[dict, Any]:
    """The issue's tables under ``root``: a commit per ingestion minute, 1% of events 30-90
    minutes late. Returns the catalog's properties and the generator's stats."""
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.examples.generator import GeneratorConfig, generate

    root.mkdir(parents=True, exist_ok=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    gen = GeneratorConfig(
        start=T0,
        hours=hours,
        impressions_per_hour=round(clicks_per_minute * 60 * impressions_per_click),
        skew=impressions_per_click,
        commit_interval=timedelta(minutes=1),
        late_fraction=0.01,
        min_lateness=timedelta(minutes=30),
        max_lateness=timedelta(minutes=90),
    )
    stats = generate(SqlCatalog("default", **props), gen)
    log.info("generated %s", stats)
    return props, stats


def fingerprint(spark: Any, path: str) -> tuple[int, int, int]:
    """An output as a multiset: its row count and two sums of 64-bit row hashes (different
    seeds). Equal fingerprints mean equal outputs but for a hash collision; unlike
    ``exceptAll`` it needs no shuffle of millions of rows through the driver's heap."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(path)
    cols = [F.col(c) for c in sorted(df.columns)]
    row = df.select(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("a"),
        F.sum(F.xxhash64(F.lit("kappa"), *cols).cast("decimal(38,0)")).alias("b"),
    ).first()
    return int(row["n"]), int(row["a"] or 0), int(row["b"] or 0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true")
    p.add_argument("--hours", type=float, default=3.0)
    p.add_argument("--clicks-per-minute", type=int, default=2000)
    p.add_argument("--impressions-per-click", type=float, default=4.0)
    p.add_argument("--out", type=Path, help="keep the tables and outputs here")
    p.add_argument(
        "--driver-memory", help="the local JVM's memory, e.g. 6g (Spark's default 1g ran out in aligned_30m)"
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    from spark_app.apps.run import run
    from spark_app.apps.session import build_session
    from spark_app.examples import rmi

    root = args.out or Path(tempfile.mkdtemp(prefix="kb-wide-"))
    props, stats = late_tables(root, args.hours, args.clicks_per_minute, args.impressions_per_click)
    session = config(props, root / "session", {"mode": "unordered"}, args.hours)
    if args.driver_memory:  # the session (hence the JVM) is built from this config
        session = session.model_copy(
            update={"spark_conf": {**session.spark_conf, "spark.driver.memory": args.driver_memory}}
        )
    spark = build_session(session)
    spark.sparkContext.setLogLevel("WARN")
    run(config(props, root / "warmup", {"mode": "aligned", "maxDrift": "10m"}, 1 / 6), spark)

    results: dict[str, dict[str, Any]] = {}
    window = (T0, T0 + timedelta(hours=args.hours))
    t = time.monotonic()
    frames = {n: batch_frame(spark, props, n, window) for n in TABLES}
    rmi.pipeline(frames, lateness=BOUND, attribution_window=BOUND)[OUTPUT].write.parquet(
        str(root / "spark_batch" / "out")
    )
    results["spark_batch"] = {"seconds": round(time.monotonic() - t, 1)}
    log.info("spark_batch: %s", results["spark_batch"])
    runs = {
        "unordered": {"mode": "unordered"},
        **{k: {"mode": "aligned", "maxDrift": v} for k, v in ALIGNED.items()},
        "auto": {"mode": "auto"},
    }
    for name, alignment in runs.items():
        cfg = config(props, root / name, alignment, args.hours)
        t = time.monotonic()
        report = run(cfg, spark)
        seconds = time.monotonic() - t
        results[name] = {
            "seconds": round(seconds, 1),
            "batches": report.batches,
            "delivered_rows": report.input_rows,
            "scanned_rows": report.scanned_rows,
            "scanned_per_delivered": round(report.scanned_rows / report.input_rows, 3) if report.input_rows else None,
            "reused_rows": report.reused_rows,
            "dropped_by_watermark": report.dropped_by_watermark,
            "mode": None if report.mode_choice is None else report.mode_choice.mode,
        }
        log.info("%s: %s", name, results[name])
    base = fingerprint(spark, str(root / "spark_batch" / "out"))
    results["spark_batch"]["output_rows"] = base[0]
    for name in runs:
        got = fingerprint(spark, str(root / name / "out"))
        results[name]["output_rows"] = got[0]
        results[name]["match"] = 1.0 if got == base else 0.0
    spark.stop()
    batch_s = results["spark_batch"]["seconds"]
    out = {
        "bench": "wide_files",
        "date": datetime.now(UTC).date().isoformat(),
        "machine": machine(),
        "workload": {
            "hours": args.hours,
            "clicks_per_minute": args.clicks_per_minute,
            "impressions_per_click": args.impressions_per_click,
            "bound": BOUND,
            "late_events": stats.late_events,
            "commits": stats.commits,
            "max_file_span_s": stats.max_file_span_s,
        },
        "runs": results,
        "ratios": {f"{name}_vs_spark_batch": round(batch_s / results[name]["seconds"], 3) for name in runs},
    }
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
