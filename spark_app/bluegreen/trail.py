"""What green may read of each topic: blue's durable Kafka offsets, written where green's gated
Kafka source reads its cap (``dev.kappa.source.GatedKafkaSource``'s ``kappa.trail``). Green
never reads past blue, so once blue stops, green can reach exactly where blue ended: the seam
(``spark_app.contract.blue_green``)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_app.bluegreen.position import durable_position
from spark_app.contract.blue_green import Position, trail_rel
from spark_app.contract.config import JobConfig
from spark_app.contract.sinks import IcebergSink
from spark_app.contract.sources import KafkaSource
from spark_app.contract.storage import Location, open_location
from spark_app.sinks.iceberg.pending import pending_location

log = logging.getLogger("kappa.bluegreen")

KafkaOffsets = dict[str, dict[str, int]]
"""Spark's Kafka offset JSON: topic -> partition (as a string) -> the next offset to read."""


def kafka_cap(position: Position, topics: Iterable[str] | None) -> KafkaOffsets:
    """Blue's durable offsets of ``topics`` (green's sources'; None: every topic, for a source
    that subscribes by pattern), from each of blue's sources that reads them; a topic two of
    blue's sources read is capped at the lower of the two."""
    wanted = None if topics is None else set(topics)
    out: KafkaOffsets = {}
    for offsets in position.offsets.values():
        if not isinstance(offsets, Mapping):
            continue
        for topic, partitions in offsets.items():
            if (wanted is not None and topic not in wanted) or not isinstance(partitions, Mapping):
                continue
            for partition, offset in partitions.items():
                have = out.setdefault(topic, {}).get(str(partition))
                out[topic][str(partition)] = int(offset) if have is None else min(have, int(offset))
    return out


def write_trail(location: Location, rel: str, cap: Mapping[str, Any]) -> None:
    """The cap, replaced whole (a reader never sees half of it)."""
    location.write_bytes(rel, json.dumps(cap, sort_keys=True).encode())


@dataclass(frozen=True)
class BlueQuery:
    """Where one of blue's sink queries keeps its checkpoint, and its sink's pending-commit log
    (an Iceberg sink's)."""

    checkpoint: Location
    pending: Location | None = None


class Trailer:
    """Green's driver, while it runs: blue's durable position of each sink query, written as
    the trail of green's query for the same sink, every ``interval_s`` (a trigger's interval:
    green is never further behind blue than what one look adds). Blue only moves forward, so a
    trail is only ever raised."""

    def __init__(
        self, blue: Mapping[str, BlueQuery], green: Location, topics: Iterable[str] | None, interval_s: float = 10.0
    ) -> None:
        self.blue, self.green = dict(blue), green
        self.topics = None if topics is None else sorted(set(topics))
        self.interval_s = interval_s
        self._written: dict[str, KafkaOffsets] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def once(self) -> dict[str, KafkaOffsets]:
        """One look: the caps written, per sink (a sink blue has no durable batch of yet keeps
        no trail, so green reads nothing of its topics)."""
        written = {}
        for sink, query in sorted(self.blue.items()):
            found = durable_position(query.checkpoint, query.pending)
            if found is None:
                continue
            cap = kafka_cap(found, self.topics)
            if self._written.get(sink) != cap:  # one write per move of blue's, not per look
                write_trail(self.green, trail_rel(sink), cap)
                self._written[sink] = cap
            written[sink] = cap
        return written

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kappa-bluegreen-trail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
            except Exception:  # a storage hiccup: green waits one more look, it never reads ahead
                log.warning("reading blue's position failed; the trail stays where it was", exc_info=True)
            self._stop.wait(self.interval_s)


def trailer_of(cfg: JobConfig) -> Trailer | None:
    """The trailer of a green run (None for any other run): blue's query of each sink, green's
    checkpoint base, the topics green reads, one look per trigger interval."""
    if cfg.green is None:
        return None
    blue = cfg.green.blue_checkpoint.rstrip("/")
    queries = {
        sink: BlueQuery(
            open_location(f"{blue}/{sink}"),
            pending_location(f"{blue}/{sink}", sink) if isinstance(config, IcebergSink) else None,
        )
        for sink, config in cfg.sinks.items()
    }
    kafka = [src for src in cfg.sources.values() if isinstance(src, KafkaSource)]
    patterned = any(src.topic is None for src in kafka)
    topics = None if patterned else [t.strip() for src in kafka for t in (src.topic or "").split(",") if t.strip()]
    trigger = cfg.effective_trigger
    interval = trigger.interval.total_seconds() if trigger.kind == "processingTime" else 5.0
    return Trailer(queries, open_location(cfg.checkpoint.location), topics, interval)
