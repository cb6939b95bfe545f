"""Required lateness of an aligned backfill: file-level vs row-level (time-sliced) splits.

A table written the way ingestion writes it: a commit every minute (profile ``1m``) or every
5 minutes (``5m``), hour partitions on ``event_ts``, 1% of the events 30-90 minutes late (the
rest 0-60 s). A late event lands in the file of its commit and event hour, so almost every
file spans tens of minutes. The backfill plan of the whole range is made, as the source makes
it (``stream.backfill_plan``), in three modes:

* ``file``      ``sliceSpan: 0s``: a split's range is its file's column statistics (before issue 13);
* ``sliced``    ``sliceSpan: 5m`` (the default): wide files cut into time slices by their rows;
* ``sliced_nobundle``  the same with ``maxBundleSpan: 0s``: bundling adds up to maxBundleSpan.

Per mode: files, splits, largest split span, required lateness (maxDrift 5m + largest span,
what the guard demands), planning seconds (median of ``--repeat``), the files opened to plan
(the ordering-column reads), and what reading the plan costs: opens and bytes of the row groups
read when every split is its own task (the worst case: slices of one file in one task share an
open), and the seconds to read all splits in one micro-batch through the source's JVM reader
(``harness.jvm_reads``, local[2]). Run from the repository root::

    .venv/bin/python -m bench.alignment_lateness --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/alignment_lateness.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import machine, measured_parser, run_measured

log = logging.getLogger("bench.alignment_lateness")

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
M = 60_000_000  # microseconds per minute
MAX_DRIFT = timedelta(minutes=5)
LATE_FRACTION = 0.01
LATE_MINUTES = (30, 90)
PROFILES = {"1m": timedelta(minutes=1), "5m": timedelta(minutes=5)}
MODES = {
    "file": {"sliceSpan": "0s"},
    "sliced": {"sliceSpan": "5m"},
    "sliced_nobundle": {"sliceSpan": "5m", "maxBundleSpan": "0s"},
}


# --- dataset -----------------------------------------------------------------------------------


def generate(root: Path, hours: float, rows_per_hour: int, commit: timedelta, seed: int = 7) -> dict[str, Any]:
    """Events with ingestion delays (1% 30-90 min late), one append per commit interval."""
    import numpy as np
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import HourTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestampType

    root.mkdir(parents=True, exist_ok=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("bench")
    schema = Schema(
        NestedField(1, "event_id", StringType(), required=True),
        NestedField(2, "event_ts", TimestampType(), required=True),
        NestedField(3, "ingestion_ts", TimestampType(), required=True),
        NestedField(4, "value", LongType(), required=True),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=HourTransform(), name="event_ts_hour"))
    table = catalog.create_table("bench.events", schema, partition_spec=spec)

    rng = np.random.default_rng(seed)
    n = int(hours * rows_per_hour)
    start = int(T0.timestamp() * 1_000_000)
    event = rng.integers(0, int(hours * 60 * M), n, dtype=np.int64)
    late = rng.random(n) < LATE_FRACTION
    on_time = np.minimum(rng.exponential(5_000_000, n), M - 1).astype(np.int64)
    delay = np.where(late, rng.integers(LATE_MINUTES[0] * M, LATE_MINUTES[1] * M + 1, n, dtype=np.int64), on_time)
    ingest = event + delay
    commit_us = int(commit.total_seconds() * 1_000_000)
    index = ingest // commit_us
    order = np.lexsort((ingest, index))
    event, ingest, index = event[order] + start, ingest[order] + start, index[order]
    arrow = pa.schema(
        [
            pa.field("event_id", pa.string(), False),
            pa.field("event_ts", pa.timestamp("us"), False),
            pa.field("ingestion_ts", pa.timestamp("us"), False),
            pa.field("value", pa.int64(), False),
        ]
    )
    data = pa.table(
        {
            "event_id": pa.array([f"e{i}" for i in range(n)]),
            "event_ts": pa.array(event.view("datetime64[us]")),
            "ingestion_ts": pa.array(ingest.view("datetime64[us]")),
            "value": pa.array(rng.integers(0, 1000, n, dtype=np.int64)),
        },
        schema=arrow,
    )
    bounds = np.flatnonzero(np.r_[True, index[1:] != index[:-1], True])
    started = time.monotonic()
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        table.append(data.slice(a, b - a))
    return {
        "props": props,
        "rows": n,
        "late_rows": int(late.sum()),
        "commits": len(bounds) - 1,
        "generate_seconds": round(time.monotonic() - started, 1),
    }


# --- one mode ----------------------------------------------------------------------------------


def job_config(props: dict[str, str], root: Path, hours: float, split: dict[str, str]) -> Any:
    from spark_app.contract.config import parse_config

    return parse_config(
        {
            "name": "lateness",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "backfill",
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {"events": {"kind": "icebergBackfill", "table": "bench.events", "split": split}},
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=hours)).isoformat()},
            "alignment": {"maxDrift": f"{int(MAX_DRIFT.total_seconds())}s"},
            "sinks": {"copy": {"kind": "parquet", "path": str(root / "out")}},
            "checkpoint": {"location": str(root / "ckpt")},
        }
    )


def footer_bytes(path: str, cache: dict[str, list[int]]) -> list[int]:
    """Compressed bytes of each row group of a local data file (what a read of it costs)."""
    import pyarrow.parquet as pq

    if path not in cache:
        meta = pq.ParquetFile(path.removeprefix("file://")).metadata
        cache[path] = [
            sum(meta.row_group(i).column(c).total_compressed_size for c in range(meta.num_columns))
            for i in range(meta.num_row_groups)
        ]
    return cache[path]


def measure_mode(
    spark: Any, props: dict[str, str], root: Path, hours: float, split: dict[str, str], repeat: int
) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    from harness.jvm_reads import read_splits
    from spark_app.planning.splits import max_span
    from spark_app.sources.frames import source_spec
    from spark_app.sources.iceberg.stream import backfill_plan_and_layouts

    cfg = job_config(props, root, hours, split)
    spec = source_spec(cfg, "copy", "events", 1)
    seconds = []
    for _ in range(repeat):
        table = SqlCatalog("default", **props).load_table("bench.events")
        sid = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
        started = time.perf_counter()
        splits, layouts = backfill_plan_and_layouts(table, spec, sid)
        seconds.append(time.perf_counter() - started)
    pieces = [p for s in splits for p in s.pieces]
    files = {p.path for p in pieces}
    sliced_files = {p.path for p in pieces if p.time_range is not None}
    # reading: every split its own task (slices of one file in one split share an open)
    cache: dict[str, list[int]] = {}
    opens = 0
    read_bytes = 0
    for s in splits:
        per_file: dict[str, set[int] | None] = {}
        for p in s.pieces:
            groups = per_file.get(p.path, set())
            per_file[p.path] = None if groups is None or p.row_groups is None else groups | set(p.row_groups)
        for path, groups in per_file.items():
            sizes = footer_bytes(path, cache)
            opens += 1
            read_bytes += sum(sizes) if groups is None else sum(sizes[g] for g in groups)
    started = time.perf_counter()
    rows_read = len(read_splits(spark, spec, splits, layouts, str(root / "read-checkpoint")))
    read_seconds = time.perf_counter() - started
    span = timedelta(microseconds=max_span(splits))
    spans = sorted(s.span for s in splits)
    return {
        "files": len(files),
        "files_sliced": len(sliced_files),
        "splits": len(splits),
        "pieces": len(pieces),
        "max_split_span_s": round(span.total_seconds(), 1),
        "median_split_span_s": round(spans[len(spans) // 2] / 1e6, 1) if spans else 0.0,
        "required_lateness_s": round((MAX_DRIFT + span).total_seconds(), 1),
        "plan_seconds": round(statistics.median(seconds), 3),
        "plan_opens": len(sliced_files),
        "read_opens": opens,
        "read_bytes": read_bytes,
        "read_seconds": round(read_seconds, 2),
        "rows_read": rows_read,
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from spark_app.apps.session import session_jars

    out = Path(args.out)
    profiles = {}
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.jars", ",".join(str(j) for j in session_jars()))
        .getOrCreate()
    )
    for name in args.profiles:
        root = out / name
        data = generate(root / "table", args.hours, args.rows_per_hour, PROFILES[name])
        log.info("profile %s: %s", name, data)
        modes = {
            mode: measure_mode(spark, data["props"], root / mode, args.hours, split, args.repeat)
            for mode, split in MODES.items()
        }
        base = modes["file"]
        for mode, r in modes.items():
            assert r["rows_read"] == data["rows"], (mode, r["rows_read"], data["rows"])
            r["extra_opens"] = r["plan_opens"] + r["read_opens"] - base["read_opens"]
            r["read_bytes_ratio"] = round(r["read_bytes"] / base["read_bytes"], 2)
            r["read_seconds_ratio"] = round(r["read_seconds"] / base["read_seconds"], 2)
        profiles[name] = {"commit_interval": str(PROFILES[name]), **{k: v for k, v in data.items() if k != "props"}}
        profiles[name]["modes"] = modes
    return {
        "profiles": profiles,
        "config": {
            "hours": args.hours,
            "rows_per_hour": args.rows_per_hour,
            "late_fraction": LATE_FRACTION,
            "late_minutes": list(LATE_MINUTES),
            "max_drift_s": MAX_DRIFT.total_seconds(),
            "partitioning": "hour(event_ts)",
            "repeat": args.repeat,
        },
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--hours", type=float, default=4.0, help="hours of event time")
    p.add_argument("--rows-per-hour", type=int, default=200_000)
    p.add_argument("--profiles", nargs="+", choices=sorted(PROFILES), default=["1m", "5m"])
    p.add_argument("--repeat", type=int, default=3, help="plans per mode; the median time is kept")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return run_measured(args, bench, "kappa-bench-lateness-")


if __name__ == "__main__":
    sys.exit(main())
