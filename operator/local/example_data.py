"""`kappa example-data DIR`: the example StreamingJob's input tables, generated into the local
catalogs `--local DIR` maps its catalogs to, so `kappa plan` and `kappa run` of the examples
work on a fresh machine.

The examples read `ingest.impressions` and `ingest.playbacks` from a REST catalog on a cluster;
`--local DIR` maps that catalog to a SQLite catalog under DIR (``overrides.local_catalog``).
This writes the same generator's data the demo uses (ingestion-like commits, a few late
events) into exactly that catalog, covering the Backfill example's window with its warm-up and
drain. It refuses to touch tables that already exist: generating twice would double every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from kappa_operator.local.manifests import load
from kappa_operator.local.overrides import local_catalog
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.contract.errors import ConfigError
from spark_app.examples.generator import GeneratedStats, GeneratorConfig, generate

START = datetime(2026, 11, 1, 12, tzinfo=UTC)
"""Two hours before the Backfill example's window (14:00-18:00 on 2026-11-01)."""
HOURS = 8.0
PER_HOUR = 20_000


@dataclass(frozen=True)
class ExampleData:
    catalog: str
    uri: str
    namespace: str
    stats: GeneratedStats


def source_tables(job: StreamingJob) -> tuple[str, str]:
    """The catalog and namespace of the job's history tables (the generator's two tables, or
    one of them: a team's own pipeline may read only the playbacks)."""
    tables = {src.history.table for src in job.spec.sources.values()}
    namespaces = {t.rsplit(".", 1)[0] for t in tables}
    if len(namespaces) != 1 or not {t.rsplit(".", 1)[1] for t in tables} <= {"impressions", "playbacks"}:
        raise ConfigError(
            f"{job.metadata.name}: example data is the impressions and playbacks of the rmi example; this job reads "
            f"{sorted(tables)}. Use --job examples/rmi-streamingjob.yaml"
        )
    catalogs = {src.history.catalog for src in job.spec.sources.values()}
    return catalogs.pop(), namespaces.pop()


def write_example_data(root: Path, manifest: Path, hours: float = HOURS, per_hour: int = PER_HOUR) -> ExampleData:
    """``manifest``: the StreamingJob, or a Backfill or Rewind found next to it (as `kappa run`
    finds it)."""
    job = load(manifest, None).job
    catalog_name, namespace = source_tables(job)
    props = local_catalog(catalog_name, job.spec.catalogs[catalog_name], root.resolve())
    (root / "catalogs").mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(catalog_name, **props)
    existing = [t for t in ("impressions", "playbacks") if catalog.table_exists(f"{namespace}.{t}")]
    if existing:
        raise ConfigError(
            f"{root}: {namespace}.{existing[0]} already exists in {props['uri']}; example data is written once "
            f"(a second run would double every row). Use another DIR, or delete {root}/catalogs and {root}/warehouse"
        )
    gen = GeneratorConfig(
        start=START,
        hours=hours,
        impressions_per_hour=per_hour,
        commit_interval=timedelta(minutes=5),
        namespace=namespace,
    )
    return ExampleData(catalog_name, props["uri"], namespace, generate(catalog, gen))
