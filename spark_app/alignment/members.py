"""Who is in a job's alignment group: one member per (sink, source) query input.

Kept free of Spark so the operator can declare the group a driver will report into."""

from __future__ import annotations

from spark_app.config import JobConfig


def member_id(cfg: JobConfig, sink: str, source: str) -> str:
    return f"{cfg.name}/{sink}/{source}"


def aligned_members(cfg: JobConfig) -> tuple[str, ...]:
    if cfg.mode != "backfill" or not cfg.alignment.coordinated:
        return ()
    return tuple(member_id(cfg, sink, src) for sink in cfg.sinks for src in cfg.sources)
