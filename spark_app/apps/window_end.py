"""Where a backfill stops reading, shared by the aligned and the bounded run: reading on past
``end + drain`` while results that started in the window are still open (``next_read``), the
extensions kept in the checkpoint so a restarted driver resumes with the same plan
(``DrainExtensions``), and what is not final put on each Iceberg sink (``record_finality``)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime

from spark_app.catalogs import load_table
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError
from spark_app.contract.sinks import IcebergSink
from spark_app.sources.iceberg.spec import micros
from spark_app.window.edges import Edges
from spark_app.window.horizon import next_drain_step

log = logging.getLogger(__name__)


def next_read(
    cfg: JobConfig, edges: Edges, extended: tuple[int, ...], still: int, first: datetime | None
) -> tuple[Edges, int | None]:
    """With ``still`` results open when reading stopped (``first``: the earliest start, if
    known): the edges with the count (and the notice when reading stops with results open),
    and where to read on to (µs), if at all. The aligned and the bounded run's one rule."""
    assert cfg.window is not None
    window = cfg.window
    read_until = datetime.fromtimestamp((extended[-1] if extended else micros(window.read_end)) / 1e6, tz=UTC)
    step = next_drain_step(still, window.end, read_until, edges.history_end, edges.drain, window.max_drain)
    notices = edges.notices
    if step.notice is not None:
        notices = (*notices, step.notice)
        log.warning("backfill %s: %s (the first starts at %s)", cfg.name, step.notice, first)
    elif step.read_until is not None:
        log.info(
            "backfill %s: %d windows or sessions that start in the window are still open at %s and the history goes "
            "on: reading on to %s",
            cfg.name,
            still,
            read_until.isoformat(),
            step.read_until.isoformat(),
        )
    until = None if step.read_until is None else micros(step.read_until)
    return replace(edges, notices=notices, open_results=still), until


class DrainExtensions:
    """Where a backfill read on past ``end + drain`` (``drain-extensions.json`` in its checkpoint
    location), written before the queries restart: a backfill killed while reading on resumes
    with the same plan (its offsets index the window's plan followed by each extension's)."""

    NAME = "drain-extensions.json"

    def __init__(self, cfg: JobConfig) -> None:
        from spark_app.contract.storage import open_location

        self.location = open_location(cfg.checkpoint.location)

    def load(self) -> tuple[int, ...]:
        if self.location.stat(self.NAME) is None:
            return ()
        return tuple(int(v) for v in json.loads(self.location.read_bytes(self.NAME))["extended_to"])

    def save(self, extended: tuple[int, ...]) -> None:
        self.location.write_bytes(self.NAME, json.dumps({"extended_to": list(extended)}).encode())


def record_finality(cfg: JobConfig, edges: Edges) -> None:
    """Put what is not final on each Iceberg sink's table, so publish (wherever it runs) says it."""
    from functools import partial

    from spark_app.sinks.iceberg import finality

    not_final = [n for n in edges.notices if n.startswith("not yet final")]
    for name, sink in cfg.sinks.items():
        if isinstance(sink, IcebergSink):
            load = partial(load_table, sink.catalog, cfg.catalogs[sink.catalog].properties(), sink.table)
            try:
                finality.mark(load, cfg.sink_branch(name), not_final)
            except ConfigError:
                if not_final:  # the sink wrote nothing (no table): the report still says it
                    log.warning("backfill %s: cannot record on %s: %s", cfg.name, sink.table, not_final)
