"""Backfills applied at once against the queue's limit on the real one-node cluster: how many
ran at once, in which order they started, how long the lot took, and the operator pod's
memory (resident size before, sampled every second, and its kernel high-water mark). Baseline,
measured in the same run: one Backfill of the same size alone under the same limit (the wall
time of ``count`` Backfills is given as a multiple of it).

The scenario is ``kappa_operator/local_cluster/backfill_burst.py`` (the node test of the queue
runs it smaller). The cluster is `kappa cluster up`'s, started in a temporary directory (its
ports must be free: `kappa cluster down` first), with two hours of the example's history.
Needs root (the node). From the repository root::

    .venv/bin/python -m bench.node_queue --json                # 20 Backfills, 4 at a time
    .venv/bin/python -m bench.node_queue --count 6 --limit 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kappa_operator.local.example_data import START
from kappa_operator.local_cluster import backfill_burst
from kappa_operator.local_cluster.cluster import LocalCluster
from spark_app.examples.generator import GeneratorConfig, generate


def run(workdir: Path, count: int, limit: int) -> dict[str, Any]:
    started = time.monotonic()
    cluster = LocalCluster.up(workdir / "cluster")
    up_s = time.monotonic() - started
    try:
        gen = GeneratorConfig(START, 2, 2000, commit_interval=timedelta(minutes=10), namespace="ingest")
        generate(cluster.host_catalog(), gen)
        alone = backfill_burst.run(cluster, 1, limit)
        burst = backfill_burst.run(cluster, count, limit)
        return {
            "bench": "node_queue",
            "machine": f"{platform.node()} {os.cpu_count()} cores",
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "cluster_up_s": round(up_s, 1),
            "one_alone_s": round(alone.wall_s, 1),
            **burst.summary(),
            "ratio_wall_over_one_alone": round(burst.wall_s / alone.wall_s, 2),
            "starts_s": {
                r.name: round(r.started_s, 1) for r in sorted(burst.runs, key=lambda r: (r.started_s, -r.priority))
            },
            "out_of_order_pairs": burst.out_of_order(),
        }
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--count", type=int, default=20, help="Backfills applied at once")
    p.add_argument("--limit", type=int, default=4, help="backfills.maxConcurrent")
    p.add_argument("--workdir", type=Path, default=None, help="keep the cluster's files there")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-node-queue-") as tmp:
        result = run(args.workdir or Path(tmp), args.count, args.limit)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
