"""What ``alignment.mode: bounded`` accepts (pure): the operators whose batch result is the
streaming one, and those it refuses by name; and what a bounded JobConfig may not ask for."""

from __future__ import annotations

from typing import Any

import pytest

from spark_app.bounded import BoundedState, refusal
from spark_app.config import parse_config
from spark_app.errors import ConfigError

RANGE_JOIN = """Project [playback_id#1, impression_id#2]
+- Join Inner, ((profile_id#3 = profile_id#4) AND (impression_ts#5 <= playback_ts#6))
   :- EventTimeWatermark impression_ts#5: 30 minutes
   :  +- StreamingRelationV2 dev.kappa.source.KappaSource
   +- EventTimeWatermark playback_ts#6: 30 minutes
      +- StreamingRelationV2 dev.kappa.source.KappaSource"""


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        ("Aggregate [window#7], [window#7.start AS window_start#8, count(1) AS plays#9]", "aggregation"),
        ("Aggregate [session_window#7], [count(1)]\n+- SessionWindow", "aggregation"),
        ("DeduplicateWithinWatermark [playback_id#1]", "dropDuplicatesWithinWatermark"),
        ("Deduplicate [playback_id#1]", "dropDuplicates"),
        ("FlatMapGroupsInPandasWithState changes(key#1)", "arbitrary state"),
        ("Project [current_timestamp() AS now#1]", "processing-time"),
        (RANGE_JOIN.replace("Join Inner", "Join LeftOuter"), "LeftOuter join"),
    ],
)
def test_operators_whose_results_wait_for_the_watermark_are_refused_by_name(plan: str, named: str) -> None:
    said = refusal({"out": RANGE_JOIN, "other": plan})
    assert said is not None and said.startswith("sink other's pipeline has") and named in said, said


def test_stateless_steps_and_inner_joins_are_accepted() -> None:
    assert refusal({"out": RANGE_JOIN, "copy": "Project [a#1]\n+- Filter (b#2 > 0)"}) is None


def test_the_fixed_snapshots_and_query_ids_read_back_as_written() -> None:
    state = BoundedState({"impressions": 7, "playbacks": 8}, {"out": "a-uuid"})
    assert BoundedState.from_json(state.to_json()) == state


def config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "bf",
        "pipeline": "spark_app.examples.rmi:pipeline",
        "mode": "backfill",
        "window": {"start": "2026-11-01T12:00:00Z", "end": "2026-11-01T13:00:00Z"},
        "catalogs": {"default": {"type": "sql", "uri": "sqlite:///x.db", "warehouse": "file:///w"}},
        "sources": {"plays": {"kind": "icebergBackfill", "table": "ingest.plays"}},
        "sinks": {"out": {"kind": "iceberg", "table": "marts.out"}},
        "checkpoint": {"location": "/tmp/ckpt"},
        "alignment": {"mode": "bounded"},
    }
    base.update(changes)
    return base


def test_a_bounded_config_names_what_it_cannot_do() -> None:
    assert parse_config(config()).alignment.mode == "bounded" and not parse_config(config()).alignment.coordinated
    with pytest.raises(ConfigError, match="readRate cannot cap a bounded run"):
        parse_config(config(readRate={"maxBytesPerSecond": 1000}))
    with pytest.raises(ConfigError, match=r"sinks\.out is console: a bounded run writes Iceberg sinks"):
        parse_config(config(sinks={"out": {"kind": "console"}}))
    assert parse_config(config()).round_budget == 0
