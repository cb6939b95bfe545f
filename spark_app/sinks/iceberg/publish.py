"""Validate a backfill branch against main over its window, then publish it: main's rows in
the window are replaced by the branch's, in one Iceberg snapshot.

Files wholly inside the window are moved by reference (no data rewritten); only the files
that straddle the window's edges are read and rewritten without (main) or with only (branch)
the window's rows. A concurrent commit to main makes the snapshot conflict: the whole
publish is planned again on the new state, so nothing a live writer added is lost.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from spark_app.errors import KappaError
from spark_app.sinks.iceberg.commit import try_commit
from spark_app.sinks.iceberg.window import TimeWindow

log = logging.getLogger("kappa.publish")

PUBLISHED_FROM = "kappa.published-from"


class ValidationFailedError(KappaError):
    """The branch does not match main well enough to publish."""


@dataclass(frozen=True)
class Comparison:
    """Branch vs main over a window. ``matched`` rows are equal in both (on ``key`` when given,
    else as whole rows); ``match_ratio`` = matched / the larger side (1.0 when both are empty)."""

    main_rows: int
    branch_rows: int
    matched: int
    key: tuple[str, ...]

    @property
    def match_ratio(self) -> float:
        larger = max(self.main_rows, self.branch_rows)
        return 1.0 if larger == 0 else self.matched / larger

    @property
    def only_main(self) -> int:
        return self.main_rows - self.matched

    @property
    def only_branch(self) -> int:
        return self.branch_rows - self.matched


def matched_rows(a: pa.Table, b: pa.Table, key: list[str]) -> int:
    """Rows equal in ``a`` and ``b``: with a key, rows whose key is unique on both sides and
    whose other columns are equal; without, the multiset intersection of whole rows."""
    columns = [c for c in a.column_names if c in b.column_names]
    if not key:
        ca = a.select(columns).group_by(columns).aggregate([([], "count_all")])
        cb = b.select(columns).group_by(columns).aggregate([([], "count_all")])
        j = ca.join(cb, columns, right_suffix="_b", join_type="inner")
        return int(pc.sum(pc.min_element_wise(j["count_all"], j["count_all_b"])).as_py() or 0)
    unique_a = _unique_on(a.select(columns), key)
    unique_b = _unique_on(b.select(columns), key)
    j = unique_a.join(unique_b, key, join_type="inner", right_suffix="__b")
    if j.num_rows == 0:
        return 0
    equal = None
    for c in (c for c in columns if c not in key):
        left, right = j[c], j[f"{c}__b"]
        same = pc.fill_null(pc.or_kleene(pc.equal(left, right), pc.and_(pc.is_null(left), pc.is_null(right))), False)
        equal = same if equal is None else pc.and_(equal, same)
    return j.num_rows if equal is None else int(pc.sum(equal).as_py() or 0)


def _unique_on(t: pa.Table, key: list[str]) -> pa.Table:
    counts = t.group_by(key).aggregate([([], "count_all")])
    once = counts.filter(pc.equal(counts["count_all"], 1)).select(key)
    return t.join(once, key, join_type="inner")


def compare(table: Table, branch: str, window: TimeWindow, key: list[str]) -> Comparison:
    main = window.rows(table, _head(table, "main"))
    side = window.rows(table, _head(table, branch))
    return Comparison(main.num_rows, side.num_rows, matched_rows(main, side, key), tuple(key))


@dataclass(frozen=True)
class PublishResult:
    comparison: Comparison
    rows_removed: int
    rows_added: int
    files_removed: int
    files_added: int
    files_rewritten: int
    snapshot_id: int | None
    """The one snapshot that replaced the window in main (None: nothing to change)."""
    attempts: int


def _head(table: Table, ref: str) -> int | None:
    snap = table.snapshot_by_name(ref)
    return snap.snapshot_id if snap else None


def _rewrite(table: Table, rows: pa.Table) -> list[DataFile]:
    return list(_dataframe_to_data_files(table.metadata, rows, table.io, write_uuid=uuid.uuid4())) if rows else []


def publish(
    load: Callable[[], Table],
    branch: str,
    window: TimeWindow,
    key: list[str] | None = None,
    min_match_ratio: float | None = None,
    retries: int = 20,
    properties: dict[str, str] | None = None,
) -> PublishResult:
    """Replace main's rows in ``window`` with ``branch``'s, atomically.

    ``min_match_ratio``: refuse (changing nothing) when the branch matches main less than this."""
    for attempt in range(1, retries + 2):
        table = load()
        if _head(table, branch) is None:
            raise ValidationFailedError(f"{table.name()}: branch {branch!r} does not exist (nothing was backfilled)")
        comparison = compare(table, branch, window, key or [])
        if min_match_ratio is not None and comparison.match_ratio < min_match_ratio:
            raise ValidationFailedError(
                f"{table.name()}: branch {branch!r} matches main over the window at "
                f"{comparison.match_ratio:.4f} < required {min_match_ratio} "
                f"({comparison.only_main} rows only in main, {comparison.only_branch} only in the branch); "
                "nothing was published"
            )
        main_tasks = window.tasks(table, _head(table, "main"))
        branch_tasks = window.tasks(table, _head(table, branch))
        shared = {t.file.file_path for t in main_tasks} & {t.file.file_path for t in branch_tasks}
        removed = added = rewritten = 0
        deletes: list[DataFile] = []
        appends: list[DataFile] = []
        for task in (t for t in main_tasks if t.file.file_path not in shared):
            if window.inside(table, task):
                deletes.append(task.file)
                removed += task.file.record_count
                continue
            rows = window.read(table, [task])
            keep = rows.filter(pc.invert(window.mask(rows)))
            if keep.num_rows == rows.num_rows:
                continue  # its stats straddle the window, none of its rows is in it
            deletes.append(task.file)
            removed += rows.num_rows - keep.num_rows
            appends += _rewrite(table, keep)
            rewritten += 1
        for task in (t for t in branch_tasks if t.file.file_path not in shared):
            if window.inside(table, task):
                appends.append(task.file)
                added += task.file.record_count
                continue
            rows = window.read(table, [task])
            take = rows.filter(window.mask(rows))
            if take.num_rows == 0:
                continue
            added += take.num_rows
            appends += _rewrite(table, take)
            rewritten += 1
        if not deletes and not appends:
            return PublishResult(comparison, 0, 0, 0, 0, 0, None, attempt)
        props = {
            PUBLISHED_FROM: branch,
            "kappa.window": f"{window.column} [{window.start.isoformat()}, {window.end.isoformat()})",
            "kappa.rows-removed": str(removed),
            "kappa.rows-added": str(added),
            "kappa.match-ratio": f"{comparison.match_ratio:.6f}",
            **(properties or {}),
        }
        tx = table.transaction()
        with tx.update_snapshot(snapshot_properties=props, branch="main").overwrite() as overwrite:
            overwrite.delete_by_predicate(window.expression(table))
            for f in deletes:
                overwrite.delete_data_file(f)
            for f in appends:
                overwrite.append_data_file(f)
        snapshot_id = try_commit(tx, "main", attempt, retries, f"publish of {branch} into {table.name()}")
        if snapshot_id is None:
            continue
        log.info("published %s into main: -%d +%d rows (snapshot %d)", branch, removed, added, snapshot_id)
        return PublishResult(comparison, removed, added, len(deletes), len(appends), rewritten, snapshot_id, attempt)
    raise AssertionError("unreachable")
