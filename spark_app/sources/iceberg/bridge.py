"""The py4j callback through which the JVM stream asks the Python planner.

``PlannerBridge`` implements ``dev.kappa.source.AdmissionPlanner``: Spark's stream execution
thread calls it (as it calls a ``foreachBatch`` function) and it answers from the planner
object in this, the driver's, Python process: JSON in, JSON out. A planner error reaches the
query as the Python exception's text, which ``errors.user_message`` turns back into our
message.
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxFiles, ReadMaxRows

from spark_app.contract.errors import ConfigError
from spark_app.jvm import PLANNER_INTERFACE, PLANNERS

if TYPE_CHECKING:
    from spark_app.sources.iceberg.backfill_reader import BackfillReader
    from spark_app.sources.iceberg.live_reader import LiveReader

_LIVE: dict[str, PlannerBridge] = {}
"""Bridges registered with the JVM, kept alive here as long as the JVM may call them."""


def limit_json(limit: ReadLimit) -> str:
    if isinstance(limit, ReadMaxFiles):
        return json.dumps({"kind": "maxFiles", "value": limit.max_files})
    if isinstance(limit, ReadMaxRows):
        return json.dumps({"kind": "maxRows", "value": limit.max_rows})
    if isinstance(limit, ReadMaxBytes):
        return json.dumps({"kind": "maxBytes", "value": limit.max_bytes})
    return json.dumps({"kind": "all"})


def limit_of(text: str) -> ReadLimit:
    d = json.loads(text)
    kind = d.get("kind")
    if kind == "maxFiles":
        return ReadMaxFiles(int(d["value"]))
    if kind == "maxRows":
        return ReadMaxRows(int(d["value"]))
    if kind == "maxBytes":
        return ReadMaxBytes(int(d["value"]))
    return ReadAllAvailable()


def offset_json(offset: dict[str, Any]) -> str:
    """One text per offset: Spark decides "no new data" by comparing offsets' JSON."""
    return json.dumps(offset, sort_keys=True, separators=(",", ":"))


class PlannerBridge:
    def __init__(self, key: str, planner: BackfillReader | LiveReader) -> None:
        self.key = key
        self.planner = planner
        self._planned: tuple[tuple[str, str], str] | None = None

    def initialOffset(self) -> str:
        return offset_json(self.planner.initialOffset())

    def defaultReadLimit(self) -> str:
        return limit_json(self.planner.getDefaultReadLimit())

    def latestOffset(self, start: str, limit: str) -> str:
        return offset_json(self.planner.latestOffset(json.loads(start), limit_of(limit)))

    def plan(self, start: str, end: str) -> str:
        """Spark plans a batch's partitions more than once (the physical plan is built again for
        the batch's execution): the answer for the same batch is the one given, neither planned
        nor traced twice."""
        if self._planned is None or self._planned[0] != (start, end):
            self._planned = ((start, end), json.dumps(self.planner.tasks(json.loads(start), json.loads(end))))
        return self._planned[1]

    def commit(self, end: str) -> None:
        self.planner.commit(json.loads(end))

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepareForTriggerAvailableNow()

    def stop(self) -> None:
        try:
            self.planner.stop()
        finally:
            _LIVE.pop(self.key, None)

    class Java:
        implements = [PLANNER_INTERFACE]


def register(spark: SparkSession, planner: BackfillReader | LiveReader) -> str:
    """Make ``planner`` reachable by the JVM stream of a query about to be built; the key goes
    into the source's options."""
    from pyspark.java_gateway import ensure_callback_server_started

    py4j_log = logging.getLogger("py4j")
    if py4j_log.level == logging.NOTSET:  # py4j logs every callback at INFO: a line per call, per batch
        py4j_log.setLevel(logging.WARNING)
    gateway = spark.sparkContext._gateway
    assert gateway is not None, "the kappa-iceberg source needs a classic (py4j) SparkSession"
    ensure_callback_server_started(gateway)
    key = f"{planner.spec.member}#{uuid.uuid4().hex[:12]}"
    bridge = PlannerBridge(key, planner)
    _LIVE[key] = bridge
    planners = functools.reduce(getattr, PLANNERS.split("."), gateway.jvm)
    if not isinstance(planners, JavaClass):
        raise ConfigError(
            f"this SparkSession has no kappa-iceberg source ({PLANNERS} is not on its classpath): build it with "
            "spark_app.apps.session.build_session, or add the jar of `python -m spark_app.jvm` to spark.jars"
        )
    planners.register(key, bridge)
    return key
