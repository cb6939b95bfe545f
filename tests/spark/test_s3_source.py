"""A backfill from an Iceberg table on a real S3 API (moto's server): the JVM reader opens the
data files through Hadoop's S3A with the settings mapped from the catalog's ``s3.*``
properties, in a driver started as a job is (``python -m spark_app``), whose session fetches
S3A and the AWS SDK's S3 modules itself (``spark_app.jars``, bundle ``hadoop-aws``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from harness.s3 import ACCESS_KEY, REGION, SECRET_KEY, MotoS3

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)


def test_a_backfill_reads_an_iceberg_table_on_s3(s3_server: MotoS3, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket()
    props = {
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"s3://{bucket}/wh",
        "s3.endpoint": s3_server.endpoint,
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": SECRET_KEY,
        "s3.region": REGION,
    }
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("demo")
    schema = pa.schema([("event_id", pa.string()), ("event_ts", pa.timestamp("us"))])
    table = catalog.create_table("demo.events", schema)
    for commit in range(3):  # three files, one per 20 minutes of event time
        times = [(T0 + timedelta(minutes=20 * commit, seconds=7 * i)).replace(tzinfo=None) for i in range(150)]
        table.append(pa.table({"event_id": [f"e{commit}-{i}" for i in range(150)], "event_ts": times}, schema=schema))
    start, end = T0 + timedelta(minutes=10), T0 + timedelta(minutes=50)
    config = {
        "name": "s3-backfill",
        "pipeline": "spark_app.examples.copy:pipeline",
        "pipelineArgs": {"source": "events"},
        "mode": "backfill",
        "master": "local[2]",
        "catalogs": {"default": {"type": "sql", **props}},
        "sources": {"events": {"kind": "icebergBackfill", "table": "demo.events"}},
        "sinks": {"copy": {"kind": "parquet", "path": str(tmp_path / "out"), "timeColumn": "event_ts"}},
        "checkpoint": {"location": str(tmp_path / "ckpt")},
        "window": {"start": start.isoformat(), "end": end.isoformat()},
    }
    (tmp_path / "job.json").write_text(json.dumps(config))
    run = subprocess.run(
        [sys.executable, "-m", "spark_app", "--config", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    written = pq.read_table(str(tmp_path / "out")).column("event_id").to_pylist()
    rows = catalog.load_table("demo.events").scan().to_arrow().to_pylist()
    naive = (start.replace(tzinfo=None), end.replace(tzinfo=None))
    expected = sorted(r["event_id"] for r in rows if naive[0] <= r["event_ts"] < naive[1])
    assert len(expected) > 200 and sorted(written) == expected
