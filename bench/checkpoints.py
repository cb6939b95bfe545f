"""The checkpoint benchmark: externalized snapshots and restore of a stateful query's checkpoint.

A streaming aggregation (count and sum per key over ``--keys`` keys, update mode, noop sink) runs
over Spark's ``rate-micro-batch`` source (``--rows-per-batch`` rows a batch) on local[2] with
the HDFS state store and Spark's defaults for retention (minBatchesToRetain 100) and
maintenance, until ``--batches`` batches are committed. Then, against a real S3 API (moto's
server in a child process, so it does not share this interpreter's GIL) and a local directory:

* ``first``:       externalize the newest committed batch into an empty external location;
* ``incremental``: run ``--more`` batches more, externalize again (only new files are copied);
* ``restore``:     materialize that snapshot into a fresh local checkpoint directory.

seconds are wall time of the call; bytes are what the call copied. The restored checkpoint is
checked (its state at the batch has as many rows as the live one, through the state data
source) but that check is not timed. Run from the repository root::

    .venv/bin/python -m bench.checkpoints --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/checkpoints.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import MASTER, SPARK_CONF, machine, measured_parser, run_measured

log = logging.getLogger("bench.checkpoints")


def run_batches(spark: Any, checkpoint: Path, batches: int, keys: int, rows_per_batch: int) -> int:
    """Run (or resume) the stateful query until ``batches`` more batches are committed; the
    last committed batch id."""
    from pyspark.sql import functions as F

    commits = checkpoint / "commits"

    def last_committed() -> int:
        # Spark purges entries beyond minBatchesToRetain: the newest id counts, not how many there are
        ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
        return max(ids, default=-1)

    target = last_committed() + batches
    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    agg = df.groupBy((F.col("value") % keys).alias("k")).agg(F.count("*").alias("n"), F.sum("value").alias("s"))
    q = (
        agg.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while last_committed() < target:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            time.sleep(0.1)
    finally:
        q.stop()  # may interrupt a batch: offsets/N+1 without its commit, as in production
    return last_committed()


def measure(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from harness.s3 import MotoS3
    from spark_app.contract.checkpoints import externalize, list_snapshots, open_location, restore

    out = Path(args.out)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(MASTER).appName("kappa-bench-checkpoints")
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    checkpoint = out / "live"
    s3 = MotoS3.subprocess()
    bench_started = time.monotonic()
    try:
        bucket = s3.create_bucket("bench")
        targets = {
            "s3": open_location(f"s3://{bucket}/snapshots", s3.options()),
            "local": open_location(str(out / "external")),
        }
        live = open_location(str(checkpoint))

        started = time.monotonic()
        first_batch = run_batches(spark, checkpoint, args.batches, args.keys, args.rows_per_batch)
        generate_s = time.monotonic() - started
        listing = live.list_files()
        checkpoint_info = {
            "batches_run": first_batch + 1,
            "files": len(listing),
            "bytes": sum(st.size for st in listing.values()),
            "state_files": sum(1 for r in listing if r.startswith("state/")),
            "snapshot_files": sum(1 for r in listing if r.endswith(".snapshot")),
        }
        results: dict[str, dict[str, Any]] = {name: {} for name in targets}
        for name, ext in targets.items():
            seconds, m = measure(lambda ext=ext: externalize(live, ext, parallelism=args.parallelism))
            assert m is not None and m.batch_id == first_batch
            results[name]["first"] = {
                "seconds": round(seconds, 3),
                "bytes": m.copied_bytes,
                "files": m.copied_files,
                "batch_id": m.batch_id,
            }
        second_batch = run_batches(spark, checkpoint, args.more, args.keys, args.rows_per_batch)
        for name, ext in targets.items():
            seconds, m = measure(lambda ext=ext: externalize(live, ext, parallelism=args.parallelism))
            assert m is not None and m.batch_id == second_batch
            results[name]["incremental"] = {
                "seconds": round(seconds, 3),
                "bytes": m.copied_bytes,
                "files": m.copied_files,
                "batch_id": m.batch_id,
                "snapshot_bytes": m.total_bytes,
                "snapshot_files": len(m.files),
            }
        for name, ext in targets.items():
            (snap,) = [s for s in list_snapshots(ext) if s.batch_id == second_batch]
            target_dir = out / f"restored-{name}"
            seconds, _ = measure(
                lambda ext=ext, snap=snap, target_dir=target_dir: restore(
                    ext, snap, open_location(str(target_dir)), parallelism=args.parallelism
                )
            )
            results[name]["restore"] = {"seconds": round(seconds, 3), "bytes": snap.total_bytes}

            def state_rows(path: Path) -> int:
                reader = spark.read.format("statestore").option("path", str(path)).option("batchId", second_batch)
                return int(reader.load().count())

            live_rows, restored_rows = state_rows(checkpoint), state_rows(target_dir)
            assert live_rows == restored_rows > 0, (live_rows, restored_rows)
            results[name]["restore"]["state_rows_checked"] = restored_rows
    finally:
        s3.stop()
        spark.stop()
    return {
        **results["s3"],
        "local": results["local"],
        "checkpoint": checkpoint_info,
        "config": {
            "master": MASTER,
            "shuffle_partitions": int(SPARK_CONF["spark.sql.shuffle.partitions"]),
            "state_store": "HDFSBackedStateStoreProvider (Spark defaults: minBatchesToRetain 100)",
            "batches": args.batches,
            "more": args.more,
            "keys": args.keys,
            "rows_per_batch": args.rows_per_batch,
            "parallelism": args.parallelism,
            "s3": "moto server (child process) on 127.0.0.1",
            "generate_seconds": round(generate_s, 1),
            "total_seconds": round(time.monotonic() - bench_started, 1),
        },
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--batches", type=int, default=100, help="batches before the first snapshot")
    p.add_argument("--more", type=int, default=10, help="batches between the first and the incremental snapshot")
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys of the aggregation (state rows)")
    p.add_argument("--rows-per-batch", type=int, default=20_000)
    p.add_argument("--parallelism", type=int, default=8, help="concurrent copies")
    args = p.parse_args(argv)
    return run_measured(args, bench, "kappa-bench-ckpt-")


if __name__ == "__main__":
    sys.exit(main())
