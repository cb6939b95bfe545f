"""How a pyiceberg commit's cost grows with the table's history, and what keeps it flat.

Appends one small data file per commit to a fresh table in a SQLite SqlCatalog, the way the
exactly-once sink commits one snapshot per micro-batch (table load, the file's footer, one
snapshot), and reports the median commit of the first and of the last 100 commits for each
way of keeping history:

* ``fast``    every snapshot kept, ``fast_append`` (what the sink does);
* ``merge``   every snapshot kept, ``merge_append`` (manifests merged as they accumulate);
* ``expire``  ``fast_append``, and every 20 commits the snapshots beyond the newest ``--keep``
  expired (pyiceberg's ``maintenance.expire_snapshots``).

Run from the repository root::

    .venv/bin/python -m bench.commit_growth --commits 600 --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/commit_growth.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("fast", "merge", "expire")
EXPIRE_EVERY = 20


def commits(kind: str, n: int, keep: int, root: Path) -> list[float]:
    """Seconds per commit, in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    root.mkdir(parents=True)
    catalog = SqlCatalog("default", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("db")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    table = catalog.create_table("db.t", schema=schema)
    mapping = table.schema().name_mapping.model_dump_json()  # plain Parquet files carry no field ids
    table.transaction().set_properties({"schema.name-mapping.default": mapping}).commit_transaction()
    seconds = []
    for i in range(n):
        path = root / f"f{i}.parquet"
        pq.write_table(pa.table({"id": [i], "v": ["x"]}, schema=schema), path)
        started = time.monotonic()
        table = catalog.load_table("db.t")
        data_file = parquet_file_to_data_file(table.io, table.metadata, path.as_uri())
        tx = table.transaction()
        update = tx.update_snapshot()
        with update.merge_append() if kind == "merge" else update.fast_append() as append:
            append.append_data_file(data_file)
        table = tx.commit_transaction()
        if kind == "expire" and i % EXPIRE_EVERY == EXPIRE_EVERY - 1:
            old = [s.snapshot_id for s in table.snapshots()[:-keep]]
            if old:
                table.maintenance.expire_snapshots().by_ids(old).commit()
        seconds.append(time.monotonic() - started)
    return seconds


def measure(n: int, keep: int, kinds: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": "commit_growth", "commits": n, "keep": keep}
    root = Path(tempfile.mkdtemp(prefix="kappa-bench-commits-"))
    try:
        for kind in kinds:
            s = commits(kind, n, keep, root / kind)
            first, last = statistics.median(s[:100]), statistics.median(s[-100:])
            out[kind] = {
                "commit_ms_first100": round(first * 1000, 1),
                "commit_ms_last100": round(last * 1000, 1),
                "ratio": round(last / first, 2),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--commits", type=int, default=600)
    p.add_argument("--keep", type=int, default=50, help="snapshots kept by the expire variant")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    args = p.parse_args(argv)
    if args.commits < 200:
        p.error("--commits must be at least 200 (first and last 100 are compared)")
    result = measure(args.commits, args.keep, tuple(args.kinds))
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
