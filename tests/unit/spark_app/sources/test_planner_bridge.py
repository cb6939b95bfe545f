"""The py4j bridge: JSON in and out, limits both ways, one plan per batch however often Spark asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles, ReadMaxRows

from spark_app.sources.iceberg.bridge import PlannerBridge, limit_json, limit_of, offset_json

ROOT = Path(__file__).resolve().parents[4]


class Planner:
    def __init__(self) -> None:
        self.planned = 0
        self.limits: list[Any] = []

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        self.limits.append(limit)
        return {"position": start["position"] + 1, "v": 1}

    def tasks(self, start: dict[str, Any], end: dict[str, Any]) -> list[list[dict[str, Any]]]:
        self.planned += 1
        return [[{"path": "f", "start": start["position"], "length": end["position"], "fileSize": 9, "ranges": []}]]


def test_limits_round_trip() -> None:
    for limit in (ReadMaxFiles(3), ReadMaxRows(10), ReadMaxBytes(99)):
        back = limit_of(limit_json(limit))
        assert type(back) is type(limit) and vars(back) == vars(limit)
    assert isinstance(limit_of('{"kind": "all"}'), ReadAllAvailable)


def test_offsets_are_one_text_each() -> None:
    assert offset_json({"b": 1, "a": [2]}) == offset_json({"a": [2], "b": 1}) == '{"a":[2],"b":1}'


def test_a_batch_is_planned_once_however_often_spark_asks() -> None:
    planner = Planner()
    bridge = PlannerBridge("k", planner)  # type: ignore[arg-type]
    end = bridge.latestOffset('{"position": 0}', '{"kind": "maxFiles", "value": 2}')
    assert json.loads(end) == {"position": 1, "v": 1} and isinstance(planner.limits[0], ReadMaxFiles)
    first = bridge.plan('{"position": 0}', end)
    assert bridge.plan('{"position": 0}', end) == first and planner.planned == 1
    bridge.plan(end, '{"position": 2}')
    assert planner.planned == 2


JAVA_TEST = ROOT / "spark_app" / "jvm" / "src" / "test" / "java" / "dev" / "kappa" / "source" / "BridgeJsonTest.java"
"""The JVM side's JUnit test of the same JSON (run by Surefire: tests/spark/test_jvm_maven.py)."""


def java_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_the_jvm_is_tested_on_the_limits_this_side_writes_and_this_side_reads_what_the_jvm_writes() -> None:
    """One format across the bridge: each limit ``limit_json`` writes is a fixture the JVM's
    test parses, and each string the JVM's test says ``limitJson`` writes is read back here as
    the limit it names. A change on one side without the other fails here or in Surefire."""
    java = JAVA_TEST.read_text()
    for limit in (ReadMaxFiles(5), ReadMaxRows(1000), ReadMaxBytes(1 << 30), ReadAllAvailable()):
        assert java_string(limit_json(limit)) in java, limit_json(limit)
    written = {
        '{"kind":"maxFiles","value":5}': ReadMaxFiles(5),
        '{"kind":"maxRows","value":1000}': ReadMaxRows(1000),
        '{"kind":"maxBytes","value":1073741824}': ReadMaxBytes(1 << 30),
        '{"kind":"all"}': ReadAllAvailable(),
    }
    for text, limit in written.items():
        assert f"assertEquals({java_string(text)}" in java.replace("\n        ", ""), text
        back = limit_of(text)
        assert type(back) is type(limit) and vars(back) == vars(limit)
