"""Green's cap per topic from blue's durable position (pure)."""

from __future__ import annotations

from spark_app.bluegreen.trail import kafka_cap
from spark_app.contract.blue_green import Position


def test_the_cap_takes_blues_offsets_of_the_green_sources_topics_the_lower_of_two() -> None:
    blue = Position(
        3,
        None,
        {"0": {"plays": {"0": 10, "1": 7}}, "1": {"plays": {"0": 8}, "clicks": {"0": 4}}, "2": None, "3": "x"},
    )
    assert kafka_cap(blue, ["plays"]) == {"plays": {"0": 8, "1": 7}}
    assert kafka_cap(blue, ["views"]) == {}
