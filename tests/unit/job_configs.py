"""JobConfig documents the unit tests start from: a backfill and a live job over one Iceberg
source, and a variant of either with top-level fields changed (``...``: removed)."""

from __future__ import annotations

import copy
from typing import Any

BACKFILL: dict[str, Any] = {
    "name": "rides-backfill",
    "pipeline": "pkg.pipelines:build",
    "mode": "backfill",
    "catalogs": {"default": {"type": "sql", "uri": "sqlite:///cat.db", "warehouse": "file:///wh"}},
    "sources": {"rides": {"kind": "icebergBackfill", "table": "db.rides"}},
    "sinks": {"out": {"kind": "console"}},
    "checkpoint": {"location": "/tmp/ck"},
    "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"},
}


LIVE: dict[str, Any] = {
    "name": "rides-live",
    "pipeline": "pkg.pipelines:build",
    "mode": "live",
    "catalogs": {"default": {"type": "sql", "uri": "sqlite:///cat.db"}},
    "sources": {"rides": {"kind": "icebergLive", "table": "db.rides"}},
    "sinks": {"out": {"kind": "console"}},
    "checkpoint": {"location": "/tmp/ck"},
}


def variant(base: dict[str, Any], **top: Any) -> dict[str, Any]:
    d = copy.deepcopy(base)
    for k, v in top.items():
        if v is ...:
            d.pop(k, None)
        else:
            d[k] = v
    return d
