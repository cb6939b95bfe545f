"""Strict backfills of a range join with a wide bound, by how files become splits (issue 29 item 6).

The workload of the issue, as near as our generator writes it: a clicks x impressions range
join (``rmi``: playbacks attributed to impressions) with a 6 h bound (attribution window and
watermark delay), 3 h of history at 2,000 clicks/min (one impression per click), one commit per
ingestion minute, 1% of events 30-90 minutes late. Each file's rows span its minute plus its
late tail, so 5-minute time slices double the splits.

Runs, each a strict backfill of the 3 h to a Parquet sink (same SparkSession, local[2]):

* ``files``    ``sliceSpan: 0s, maxBundleSpan: 5m``: whole files (before row-level slicing);
* ``slices5m`` ``sliceSpan: 5m, maxBundleSpan: 5m``: the fixed defaults of issue 13;
* ``fitted``   no split settings: spans fitted to the 6 h delay (``planning/split_spans.py``);
* ``unordered`` the baseline: one batch, no ordering.

Per run: splits (both sources), micro-batches, wall seconds, CPU seconds (the driver's Python and
the Spark JVM, which in local mode runs the executors), output rows; and whether each strict
output equals unordered's. The unordered run goes first, after a warm-up run of the first
10 minutes (JIT, class loading), so no run pays the JVM's start::

    .venv/bin/python -m bench.strict_batches --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import compare_outputs, machine
from bench.wide_files import BOUND, late_tables
from bench.wide_files import config as wide_config

log = logging.getLogger("bench.strict_batches")

SPLITS = {
    "files": {"sliceSpan": "0s", "maxBundleSpan": "5m"},
    "slices5m": {"sliceSpan": "5m", "maxBundleSpan": "5m"},
    "fitted": None,
}


def config(props: dict[str, str], out: Path, mode: str, split: dict[str, str] | None, hours: float) -> Any:
    return wide_config(props, out, {"mode": mode}, hours, split)


def splits_of(cfg: Any, delay: timedelta) -> int:
    from spark_app.catalogs import load_table
    from spark_app.planning.split_spans import fit_sources
    from spark_app.sources.frames import source_spec
    from spark_app.sources.iceberg.stream import backfill_plan

    cfg = fit_sources(cfg, delay)
    total = 0
    for name in cfg.sources:
        spec = source_spec(cfg, "attributed_plays", name, 1)
        table = load_table(spec.catalog_name, spec.catalog, spec.source.table)
        total += len(backfill_plan(table, spec, table.current_snapshot().snapshot_id))
    return total


def cpu_s(jvm_pid: int) -> float:
    """CPU seconds of this process (the driver's Python) and the Spark JVM (driver and, in
    local mode, executors)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    fields = Path(f"/proc/{jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return own.ru_utime + own.ru_stime + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true")
    p.add_argument("--hours", type=float, default=3.0)
    p.add_argument("--clicks-per-minute", type=int, default=2000)
    p.add_argument("--out", type=Path, help="keep the tables and outputs here")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    from spark_app.apps.run import run
    from spark_app.apps.session import build_session

    root = args.out or Path(tempfile.mkdtemp(prefix="kb-strict-"))
    props, stats = late_tables(root, args.hours, args.clicks_per_minute, 1.0)
    spark = build_session(config(props, root / "session", "strict", None, args.hours))
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[attr-defined]
    results: dict[str, dict[str, Any]] = {}
    run(config(props, root / "warmup", "unordered", None, 1 / 6), spark)
    runs = [("unordered", "unordered", None), *[(name, "strict", split) for name, split in SPLITS.items()]]
    for name, mode, split in runs:
        cfg = config(props, root / name, mode, split, args.hours)
        cpu, t = cpu_s(jvm_pid), time.monotonic()
        report = run(cfg, spark)
        results[name] = {
            "splits": splits_of(cfg, timedelta(hours=6)),
            "batches": report.batches,
            "seconds": round(time.monotonic() - t, 1),
            "cpu_s": round(cpu_s(jvm_pid) - cpu, 1),
            "input_rows": report.input_rows,
            "output_rows": spark.read.parquet(str(root / name / "out")).count(),
        }
        log.info("%s: %s", name, results[name])
    base = str(root / "unordered" / "out")
    for name in SPLITS:
        results[name]["differs_from_unordered"] = compare_outputs(spark, str(root / name / "out"), base)
    spark.stop()
    unordered_s = results["unordered"]["seconds"]
    out = {
        "bench": "strict_batches",
        "date": datetime.now(UTC).date().isoformat(),
        "machine": machine(),
        "workload": {
            "hours": args.hours,
            "clicks_per_minute": args.clicks_per_minute,
            "bound": BOUND,
            "late_events": stats.late_events,
            "commits": stats.commits,
            "max_file_span_s": stats.max_file_span_s,
        },
        "runs": results,
        "ratios": {
            f"{name}_vs_unordered_wall": round(results[name]["seconds"] / unordered_s, 2) if unordered_s else None
            for name in SPLITS
        },
    }
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
