"""What a backfill source's history holds, read from its Iceberg table's metadata (manifests,
column statistics; no row read): the snapshot it reads, the data files of a time range, each
source's first and last event time, and so whether the window is covered (decided by the pure
``planning.coverage``). Both the planner (``kappa plan`` without Spark) and the run's
``window.edges`` read it here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from spark_app.catalogs import load_table
from spark_app.contract.config import JobConfig
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.planning.coverage import Coverage, Extent, assess
from spark_app.sources.iceberg import scan
from spark_app.sources.iceberg.spec import micros


def snapshot_of(table: Any, src: IcebergBackfillSource) -> int | None:
    """The snapshot a backfill source reads: its own, else the table's current one."""
    if src.snapshot_id is not None:
        return src.snapshot_id
    current = table.current_snapshot()
    return current.snapshot_id if current else None


def history_files(cfg: JobConfig, name: str, lo: datetime | None, hi: datetime | None) -> list[Any]:
    """The data files of a backfill source's snapshot whose ordering range may meet [lo, hi)
    (None: open), from the manifests."""
    src = cfg.sources[name]
    assert isinstance(src, IcebergBackfillSource)
    table = load_table(src.catalog, cfg.catalogs[src.catalog].properties(), src.table)
    sid = snapshot_of(table, src)
    if sid is None:
        return []
    us = (None if lo is None else micros(lo), None if hi is None else micros(hi))
    return scan.files_in_window(table, sid, cfg.ordering_column(name), us, src.filter)


def extents(cfg: JobConfig, names: Sequence[str]) -> list[Extent]:
    """The history of each backfill source in ``names`` (an edge: reads the manifests)."""
    out = []
    for name in names:
        src = cfg.sources[name]
        if not isinstance(src, IcebergBackfillSource):
            continue
        files = history_files(cfg, name, None, None)
        lowers = [f.lower for f in files if f.lower is not None]
        uppers = [f.upper for f in files if f.upper is not None]
        first = datetime.fromtimestamp(min(lowers) / 1e6, tz=UTC) if lowers else None
        last = datetime.fromtimestamp(max(uppers) / 1e6, tz=UTC) if uppers else None
        out.append(Extent(name, src.table, first, last, len(files)))
    return out


def covered(cfg: JobConfig, names: Sequence[str]) -> Coverage:
    """Whether the histories of ``names`` cover the window (``planning.coverage``: refused, or
    the notices of what is missing), from their manifests."""
    assert cfg.window is not None
    return assess(cfg.window, extents(cfg, names))
