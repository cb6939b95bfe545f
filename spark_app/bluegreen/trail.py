"""What green may read of each source: blue's durable Kafka offsets, written where green's gated
Kafka source reads its cap (``dev.kappa.source.GatedKafkaSource``'s ``kappa.trail``), and blue's
durable ``icebergLive`` offsets, written where green's live readers read theirs
(``sources.iceberg.trailed``). Green never reads past blue, so once blue stops, green can reach
exactly where blue ended: the seam (``spark_app.contract.blue_green``)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spark_app.bluegreen.position import durable_position
from spark_app.contract.blue_green import (
    KafkaOffsets,
    Position,
    kafka_offsets,
    live_offsets,
    live_trail_rel,
    off_seam,
    trail_rel,
)
from spark_app.contract.config import JobConfig
from spark_app.contract.reports.blue_green import SEAM_REL, SeamReport, SinkSeam
from spark_app.contract.reports.bootstrap import read_record, record_location
from spark_app.contract.sinks import IcebergSink
from spark_app.contract.sources import KafkaSource
from spark_app.contract.storage import Location, open_location
from spark_app.sinks.iceberg.pending import pending_location

log = logging.getLogger("kappa.bluegreen")


def write_trail(location: Location, rel: str, cap: Mapping[str, Any]) -> None:
    """The cap, replaced whole (a reader never sees half of it)."""
    location.write_bytes(rel, json.dumps(cap, sort_keys=True).encode())


@dataclass(frozen=True)
class SinkQuery:
    """Where one version's sink query keeps its checkpoint, and its sink's pending-commit log
    (an Iceberg sink's)."""

    checkpoint: Location
    pending: Location | None = None


class Trailer:
    """Green's driver, while it runs: blue's durable position of each sink query, written as
    the trail of green's query for the same sink, every ``interval_s`` (a trigger's interval:
    green is never further behind blue than what one look adds). Blue only moves forward, so a
    trail is only ever raised."""

    def __init__(
        self,
        blue: Mapping[str, SinkQuery],
        green: Location,
        topics: Iterable[str] | None,
        interval_s: float = 10.0,
        green_queries: Mapping[str, SinkQuery] | None = None,
        green_record: tuple[Location, str] | None = None,
    ) -> None:
        """``green_queries``: green's own sink queries; each look then also writes the seam
        report (``SeamReport``): whether green stands where blue does, which the operator waits
        for once blue stopped. ``green_record``: green's bootstrap record; green is at the seam
        only once it records its archive leg ended (before, its live positions are still where
        the archives end, which a blue stopped on a quiet input may equal while green has
        history left to emit)."""
        self.blue, self.green = dict(blue), green
        self.green_record = green_record
        self._archives_read = green_record is None
        """Latched: a bootstrap record, once switched, stays switched; not read again each look."""
        self.green_queries = dict(green_queries or {})
        self.topics = None if topics is None else sorted(set(topics))
        self.interval_s = interval_s
        self._written: dict[str, KafkaOffsets] = {}
        self._written_live: dict[str, list[dict[str, Any]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def once(self) -> dict[str, KafkaOffsets]:
        """One look: the caps written, per sink (a sink blue has no durable batch of yet keeps
        no trail, so green reads nothing of its topics or tables past their archives)."""
        written = {}
        seams = {}
        if not self._archives_read and self.green_record is not None:
            self._archives_read = self._switched(*self.green_record)
        archives_read = self._archives_read
        for sink, query in sorted(self.blue.items()):
            found = durable_position(query.checkpoint, query.pending)
            if sink in self.green_queries:
                seams[sink] = self._seam(sink, found, archives_read)
            if found is None:
                continue
            cap = kafka_offsets(found, self.topics)
            if self._written.get(sink) != cap:  # one write per move of blue's, not per look
                write_trail(self.green, trail_rel(sink), cap)
                self._written[sink] = cap
            written[sink] = cap
            live = live_offsets(found)
            if live and self._written_live.get(sink) != live:
                write_trail(self.green, live_trail_rel(sink), {"offsets": live})
                self._written_live[sink] = live
        if self.green_queries:
            report = SeamReport(at=datetime.now(UTC), sinks=seams)
            self.green.write_bytes(SEAM_REL, report.model_dump_json().encode())
        return written

    def _seam(self, sink: str, blue: Position | None, archives_read: bool) -> SinkSeam:
        green_query = self.green_queries[sink]
        green = durable_position(green_query.checkpoint, green_query.pending)
        at_seam = archives_read and blue is not None and green is not None and not off_seam(blue, green)
        return SinkSeam(
            blue_batch=None if blue is None else blue.batch_id,
            green_batch=None if green is None else green.batch_id,
            at_seam=at_seam,
        )

    @staticmethod
    def _switched(location: Location, name: str) -> bool:
        record = read_record(location, name)
        return record is not None and record.switched

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kappa-bluegreen-trail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop looking, after one last look: the seam report then says where green ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30)
        try:
            self.once()
        except Exception:
            log.warning("the last look at blue's position failed", exc_info=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
            except Exception:  # a storage hiccup: green waits one more look, it never reads ahead
                log.warning("reading blue's position failed; the trail stays where it was", exc_info=True)
            self._stop.wait(self.interval_s)


def sink_queries(cfg: JobConfig, base: str) -> dict[str, SinkQuery]:
    """The sink queries of a version whose checkpoints are under ``base``: one per sink."""
    return {
        sink: SinkQuery(
            open_location(f"{base}/{sink}"),
            pending_location(f"{base}/{sink}", sink) if isinstance(config, IcebergSink) else None,
        )
        for sink, config in cfg.sinks.items()
    }


def trailer_of(cfg: JobConfig) -> Trailer | None:
    """The trailer of a green run (None for any other run): blue's query of each sink, green's
    checkpoint base, the topics green reads, one look per trigger interval."""
    if cfg.green is None:
        return None
    blue, green = cfg.green.blue_checkpoint.rstrip("/"), cfg.checkpoint.location.rstrip("/")
    kafka = [src for src in cfg.sources.values() if isinstance(src, KafkaSource)]
    patterned = any(src.topic is None for src in kafka)
    topics = None if patterned else [t.strip() for src in kafka for t in (src.topic or "").split(",") if t.strip()]
    trigger = cfg.effective_trigger
    interval = trigger.interval.total_seconds() if trigger.kind == "processingTime" else 5.0
    return Trailer(
        sink_queries(cfg, blue),
        open_location(green),
        topics,
        interval,
        green_queries=sink_queries(cfg, green),
        green_record=record_location(cfg),
    )
