"""The Backfill queue on the real node (issue 41): Backfills applied at once against
``backfills.maxConcurrent`` (set with `helm upgrade`, as a user sets it) run at most that many
at a time, start highest priority first (they are applied lowest first), all end Succeeded,
and the operator's memory does not grow with them. 4 at 2 here, to keep the test command's
time, each with its tasks in its driver (``executor.instances: 0``: two JVMs, spark-submit's
and the driver's, on a 2-core node, where executors would add a third); the same scenario at
20 and 4, with executors, is `bench/node_queue.py` (bench/RESULTS.md)."""

from __future__ import annotations

import json
from collections.abc import Callable

from kappa_operator.local_cluster import backfill_burst
from kappa_operator.local_cluster.cluster import LocalCluster
from spark_app.examples.generator import GeneratedStats

FLAT = 48 << 20
"""How much the operator's resident memory may grow over its idle size while the Backfills
run (kopf's caches of a few more objects; a leak per Backfill or per reconcile is more)."""


def test_backfills_applied_at_once_run_at_most_the_limit_at_a_time_in_priority_order_and_all_succeed(
    cluster: LocalCluster, history: GeneratedStats, record_property: Callable[[str, object], None]
) -> None:
    burst = backfill_burst.run(cluster, count=4, limit=2, timeout=900, in_driver=True)
    record_property("measured", json.dumps(burst.summary()))
    assert [r.phase for r in burst.runs] == ["Succeeded"] * 4, burst.runs
    # alignment.mode auto (the default) on the node: each driver proved the range join's
    # output equal and ran it as one batch query, left its group, and said so in status
    assert [r.mode for r in burst.runs] == ["bounded"] * 4, burst.runs
    assert burst.max_running == 2 and burst.max_drivers <= 2, burst.summary()
    assert burst.max_executors == 0, "the tasks ran in the drivers: no executor pod was asked for"
    assert sum(r.queued for r in burst.runs) >= 2, "all but the first two waited"
    assert not burst.out_of_order(backfill_burst.WAVE_S), burst.runs
    assert burst.growth < FLAT, burst.summary()
