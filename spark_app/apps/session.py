"""The driver's SparkSession (``build_session``): its defaults, the jars it adds and its state
partitions. Its own module, light (Spark, the contract, no pyiceberg), so that ``python -m
spark_app`` starts the session first and imports the job's sources and sinks while it starts:
on Kubernetes the session's start is where the executor pods are asked for, and everything
the driver loads or plans afterwards overlaps their start (issue 58)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from spark_app import jars
from spark_app.contract.config import JobConfig
from spark_app.contract.sinks import KafkaSink
from spark_app.contract.sources import IcebergSourceBase, KafkaSource
from spark_app.jvm import class_sharing
from spark_app.sinks.iceberg.write_conf import SESSION_CONF as SPARK_WRITE_CONF
from spark_app.sources.iceberg.object_store import on_s3
from spark_app.sources.parallelism import task_slots

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
PROGRESS_RETENTION = "spark.sql.streaming.numRecentProgressUpdates"
"""How many progress updates each query keeps in the driver's memory (``recentProgress``)."""


def progress_retention(mode: str, archive_leg: bool) -> int:
    """A run that ends by itself (a backfill, a bootstrap's archive leg) keeps every batch's
    progress: its report and its completeness check read them all when it ends. A live query
    runs for weeks: it keeps the last 10,000 (tens of MB), never its whole history (a job at
    1 s triggers would hold a day's in the driver's heap)."""
    return 100_000 if mode == "backfill" or archive_leg else 10_000


SESSION_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    PROGRESS_RETENTION: str(progress_retention("live", archive_leg=False)),
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # What the Iceberg sink's files need (``sinks/iceberg/spark_files.py``), from the first
    # batch on, so every Parquet output of the job writes timestamps one way.
    **SPARK_WRITE_CONF,
}


def build_session(cfg: JobConfig) -> SparkSession:
    # Local runs: Python workers must use this interpreter (the venv), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(f"kappa-{cfg.name}")
    if cfg.master:
        builder = builder.master(cfg.master)
    conf = {**SESSION_DEFAULTS, **cfg.spark_conf}
    added = [str(jar) for jar in [*session_jars(), *s3a_jars(cfg), *connector_jars(cfg)]]
    if added:  # before the JVM starts: the only time spark.jars is read
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars", ""), *added]))
    if sharing := class_sharing.java_options():  # a local JVM: the machine's archive, if made
        conf[DRIVER_JAVA_OPTIONS] = " ".join(filter(None, [conf.get(DRIVER_JAVA_OPTIONS, ""), sharing]))
    for k, v in conf.items():
        builder = builder.config(k, v)
    # On Kubernetes this is where the executor pods are asked for: everything the driver plans
    # afterwards (Iceberg metadata, the pipeline's plan, the coordinator) overlaps their start.
    spark = builder.getOrCreate()
    # Set by the job, by spark-submit --conf or spark-defaults.conf: theirs. Unset: one per core
    # the application asked for (registered or not yet: ``task_slots``).
    if SHUFFLE_PARTITIONS not in cfg.spark_conf and not spark.sparkContext.getConf().contains(SHUFFLE_PARTITIONS):
        spark.conf.set(SHUFFLE_PARTITIONS, str(shuffle_partitions(task_slots(spark))))
    return spark


def session_jars() -> list[Path]:
    """The kappa-iceberg source's jar, unless Spark ships it (see ``spark_app.jvm``)."""
    from spark_app.jvm import source_jar

    jar = source_jar()
    return [] if jar is None else [jar]


def reads_s3(cfg: JobConfig) -> bool:
    """Whether an Iceberg source's catalog keeps its tables on S3 (its warehouse, or S3 settings)."""
    for src in cfg.sources.values():
        if isinstance(src, IcebergSourceBase):
            props = cfg.catalogs[src.catalog].properties()
            if on_s3(props.get("warehouse", "")) or any(k.startswith("s3.") for k in props):
                return True
    return False


def s3a_jars(cfg: JobConfig, spark_jars_dir: Path | None = None) -> list[Path]:
    """Hadoop's S3A and the AWS SDK's S3 modules, for a session whose source reads S3 data files in
    the JVM; none when Spark ships them (a Spark image) or no source reads S3."""
    from spark_app import jars
    from spark_app.jvm import spark_home

    if not reads_s3(cfg) or any((spark_jars_dir or spark_home() / "jars").glob("hadoop-aws-*.jar")):
        return []
    return jars.resolve("hadoop-aws")


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def shuffle_partitions(cores: int) -> int:
    """One state partition per core of the application, unless sparkConf says otherwise.

    Every stateful operator loads and commits one state store per shuffle partition in every
    micro-batch: Spark's default of 200 makes a backfill's many small batches cost 25-30x the
    floor, and more partitions than cores only queue tasks. Spark fixes the number in a
    query's first checkpoint, so this only shapes new checkpoints; a resumed query keeps its
    own (bench/RESULTS.md, issue 15: 2 partitions instead of 4 on 2 cores cut the aligned
    backfill's per-batch fixed cost from 1.21 s to 0.93 s)."""
    return max(1, cores)


def connector_jars(cfg: JobConfig, spark_jars_dir: Path | None = None) -> list[Path]:
    """The Kafka connector's jars a session of ``cfg`` must add (``spark.jars``): none when no
    source reads Kafka and no sink writes it, when Spark ships the connector (a Spark image has it in
    ``$SPARK_HOME/jars``), or when the job asks for it itself (``spark.jars.packages``); else
    the pinned bundle of ``spark_app.jars``, fetched from Maven Central once per machine."""
    if not any(isinstance(src, KafkaSource) for src in cfg.sources.values()) and not any(
        isinstance(sink, KafkaSink) for sink in cfg.sinks.values()
    ):
        return []
    if "spark-sql-kafka" in cfg.spark_conf.get("spark.jars.packages", ""):
        return []
    if spark_jars_dir is None:
        spark_jars_dir = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "jars"
    if any(spark_jars_dir.glob("spark-sql-kafka-0-10_*.jar")):
        return []
    return jars.resolve("kafka-connector")
