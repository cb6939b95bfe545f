"""What green may read of each topic: blue's durable Kafka offsets, written where green's gated
Kafka source reads its cap (``dev.kappa.source.GatedKafkaSource``'s ``kappa.trail``). Green
never reads past blue, so once blue stops, green can reach exactly where blue ended: the seam
(``spark_app.contract.blue_green``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from spark_app.contract.blue_green import Position
from spark_app.contract.storage import Location

KafkaOffsets = dict[str, dict[str, int]]
"""Spark's Kafka offset JSON: topic -> partition (as a string) -> the next offset to read."""


def kafka_cap(position: Position, topics: Iterable[str]) -> KafkaOffsets:
    """Blue's durable offsets of ``topics`` (the green source's), from each of blue's sources
    that reads them; a topic two of blue's sources read is capped at the lower of the two."""
    wanted = set(topics)
    out: KafkaOffsets = {}
    for offsets in position.offsets.values():
        if not isinstance(offsets, Mapping):
            continue
        for topic, partitions in offsets.items():
            if topic not in wanted or not isinstance(partitions, Mapping):
                continue
            for partition, offset in partitions.items():
                have = out.setdefault(topic, {}).get(str(partition))
                out[topic][str(partition)] = int(offset) if have is None else min(have, int(offset))
    return out


def write_trail(location: Location, rel: str, cap: Mapping[str, Any]) -> None:
    """The cap, replaced whole (a reader never sees half of it)."""
    location.write_bytes(rel, json.dumps(cap, sort_keys=True).encode())
