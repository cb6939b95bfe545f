"""How many progress updates a query keeps in the driver: all of a run that ends (its report
reads them), a bounded number for a live query that runs for weeks. How many task slots a run
is planned for when its executors have not registered yet."""

from __future__ import annotations

from spark_app.apps.session import PROGRESS_RETENTION, SESSION_DEFAULTS, progress_retention
from spark_app.sources.parallelism import planned_parallelism


def test_a_backfill_and_a_bootstraps_archive_leg_keep_every_batch() -> None:
    assert progress_retention("backfill", archive_leg=False) == 100_000
    assert progress_retention("live", archive_leg=True) == 100_000


def test_a_live_query_keeps_a_bounded_number_and_the_session_starts_with_it() -> None:
    assert progress_retention("live", archive_leg=False) == 10_000
    assert SESSION_DEFAULTS[PROGRESS_RETENTION] == "10000"


K8S = "k8s://https://10.0.0.1:443"


def test_a_driver_that_plans_before_its_executors_registered_plans_for_the_slots_it_asked_for() -> None:
    """A Backfill's driver does not wait for its executors: Spark then counts 2 slots (none
    registered), but its state partitions and tasks are sized for 4 executors x 2 cores."""
    asked = {"spark.executor.instances": "4", "spark.executor.cores": "2"}
    assert planned_parallelism(2, K8S, asked) == 8
    assert planned_parallelism(12, K8S, asked) == 12, "registered more (Spark's own count): Spark's"
    assert planned_parallelism(2, K8S, {"spark.executor.instances": "3"}) == 3, "one core each by default"
    assert planned_parallelism(2, K8S, {}) == 2


def test_spark_default_parallelism_a_local_master_and_dynamic_allocation_keep_sparks_count() -> None:
    asked = {"spark.executor.instances": "4", "spark.executor.cores": "2"}
    assert planned_parallelism(3, K8S, {**asked, "spark.default.parallelism": "3"}) == 3
    assert planned_parallelism(2, "local[2]", asked) == 2
    assert planned_parallelism(2, K8S, {**asked, "spark.dynamicAllocation.enabled": "true"}) == 2
    assert planned_parallelism(2, K8S, {**asked, "spark.executor.cores": "two"}) == 2
