"""How many task slots a run is planned for: light (Spark only), so that the driver's session
starts before the sources are imported (``apps.session``)."""

from __future__ import annotations

from pyspark.sql import SparkSession


def planned_parallelism(registered: int, master: str, conf: dict[str, str]) -> int:
    """The task slots a run is planned for: Spark's ``defaultParallelism`` (``registered``: the
    cores of the executors registered so far, at least 2), or, on a cluster with a fixed number
    of executors, the slots it asked for (``spark.executor.instances`` x ``spark.executor.cores``)
    when more. A Backfill's driver does not wait for its executors before it plans
    (``spark.scheduler.minRegisteredResourcesRatio`` 0, see ``render.spark_application``): right
    after the session starts few or none have registered, and the state partitions (fixed in a
    new checkpoint) and the splits' tasks must still be sized for all of them.
    ``spark.default.parallelism``, a local master and dynamic allocation keep Spark's answer."""
    if "spark.default.parallelism" in conf or master.startswith("local"):
        return registered
    if conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        return registered
    try:
        requested = int(conf.get("spark.executor.instances", "0")) * int(conf.get("spark.executor.cores", "1"))
    except ValueError:  # a value Spark itself would refuse: its own answer
        return registered
    return max(registered, requested)


def task_slots(spark: SparkSession) -> int:
    """``planned_parallelism`` of this session."""
    sc = spark.sparkContext
    return planned_parallelism(sc.defaultParallelism, sc.master, dict(sc.getConf().getAll()))
