"""Validate a backfill branch against main over its window, then publish it: main's rows in
the window are replaced by the branch's, in one Iceberg snapshot.

Files wholly inside the window are moved by reference (no data rewritten); only the files
that straddle the window's edges are read and rewritten without (main) or with only (branch)
the window's rows. A concurrent commit to main makes the snapshot conflict: the whole
publish is planned again on the new state, so nothing a live writer added is lost.

Every entry point (``validate``, ``publish``) refuses a branch that matches main below
``DEFAULT_MIN_MATCH_RATIO`` unless the caller lowers it explicitly: a partial branch must never
replace good rows by default. A branch that does not exist is an error that says why.
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
from pyiceberg.table.refs import SnapshotRefType

from spark_app.errors import KappaError
from spark_app.sinks.iceberg.commit import try_commit
from spark_app.sinks.iceberg.publish_defaults import DEFAULT_MIN_MATCH_RATIO
from spark_app.sinks.iceberg.window import TimeWindow

log = logging.getLogger("kappa.publish")

PUBLISHED_FROM = "kappa.published-from"

_BRANCHES_SHOWN = 10


class ValidationFailedError(KappaError):
    """The branch does not match main well enough to publish."""


class BranchMissingError(ValidationFailedError):
    """The backfill branch was never created: its run committed no row in the window."""


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


def missing_branch_message(table: Table, branch: str, window: TimeWindow | None = None) -> str:
    """Why ``branch`` is missing. The sink creates a branch with its first commit, and it
    commits only micro-batches that have output rows in the window (``writer``: no file, no
    commit), so a missing branch means the run emitted no row there, not that it was skipped."""
    where = f" ({window.column} in [{window.start.isoformat()}, {window.end.isoformat()}))" if window else ""
    refs = sorted(name for name, ref in table.metadata.refs.items() if ref.snapshot_ref_type == SnapshotRefType.BRANCH)
    shown = ", ".join(refs[:_BRANCHES_SHOWN]) + (
        f" (+{len(refs) - _BRANCHES_SHOWN} more)" if len(refs) > _BRANCHES_SHOWN else ""
    )
    return (
        f"{_name(table)}: branch {branch!r} does not exist, so there is nothing to validate or publish "
        "(main is unchanged). The sink creates the branch with its first commit and commits only "
        f"micro-batches that have output rows in the window{where}: the backfill run emitted no row "
        "in the window. Likely causes: the window has no input data for this pipeline (check the "
        "sources' tables, filters and the window's start/end); the warm-up or drain was too short for "
        "a stateful pipeline (windows and sessions are emitted only once the watermark passes their "
        "end); or the run ended early (failed or stopped before its first commit: check its status). "
        f"Branches of this table: {shown or 'none'}"
    )


def branch_head(table: Table, branch: str, window: TimeWindow | None = None) -> int:
    """The head snapshot of ``branch``; BranchMissingError (saying why) when there is none."""
    head = _head(table, branch)
    if head is None:
        raise BranchMissingError(missing_branch_message(table, branch, window))
    return head


def compare(table: Table, branch: str, window: TimeWindow, key: list[str]) -> Comparison:
    """Branch vs main over the window. A missing branch raises rather than comparing as empty:
    an empty side would read as "1.0" against an empty main, or as a plain low ratio."""
    side = window.rows(table, branch_head(table, branch, window))
    main = window.rows(table, _head(table, "main"))
    return Comparison(main.num_rows, side.num_rows, matched_rows(main, side, key), tuple(key))


def _check_ratio(min_match_ratio: float | None) -> None:
    if min_match_ratio is None:
        raise TypeError("min_match_ratio=None does not mean 'no check': pass 0.0 to accept any match, explicitly")
    if not 0.0 <= min_match_ratio <= 1.0:
        raise ValueError(f"min_match_ratio must be in [0, 1], got {min_match_ratio}")


def validate(
    table: Table,
    branch: str,
    window: TimeWindow,
    key: list[str] | None = None,
    min_match_ratio: float = DEFAULT_MIN_MATCH_RATIO,
) -> Comparison:
    """Compare ``branch`` with main over ``window``; ValidationFailedError below ``min_match_ratio``.

    ``min_match_ratio=0.0`` accepts any match (an explicit opt-out, logged as a warning)."""
    _check_ratio(min_match_ratio)
    comparison = compare(table, branch, window, key or [])
    detail = (
        f"{comparison.match_ratio:.4f} ({comparison.only_main} rows only in main, "
        f"{comparison.only_branch} only in the branch, {comparison.matched} matched)"
    )
    if comparison.match_ratio < min_match_ratio:
        raise ValidationFailedError(
            f"{_name(table)}: branch {branch!r} matches main over the window at {detail} < required "
            f"{min_match_ratio}; nothing was published. Lower the required ratio only when main is known "
            "to be wrong over the window (0 publishes whatever the match)"
        )
    if min_match_ratio == 0.0 or comparison.match_ratio < DEFAULT_MIN_MATCH_RATIO:
        log.warning(
            "%s: branch %r matches main at %s; accepted because min_match_ratio=%s%s",
            _name(table),
            branch,
            detail,
            min_match_ratio,
            " (no check)" if min_match_ratio == 0.0 else f" (the default {DEFAULT_MIN_MATCH_RATIO} would refuse it)",
        )
    return comparison


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


def _name(table: Table) -> str:
    return ".".join(table.name())


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
    min_match_ratio: float = DEFAULT_MIN_MATCH_RATIO,
    retries: int = 20,
    properties: dict[str, str] | None = None,
) -> PublishResult:
    """Replace main's rows in ``window`` with ``branch``'s, atomically, after ``validate``.

    ``min_match_ratio``: refuse (changing nothing) when the branch matches main less than this;
    the default is the Backfill's, ``0.0`` publishes whatever the match (explicitly)."""
    _check_ratio(min_match_ratio)
    for attempt in range(1, retries + 2):
        table = load()
        comparison = validate(table, branch, window, key, min_match_ratio)
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
        snapshot_id = try_commit(tx, "main", attempt, retries, f"publish of {branch} into {_name(table)}")
        if snapshot_id is None:
            continue
        log.info("published %s into main: -%d +%d rows (snapshot %d)", branch, removed, added, snapshot_id)
        return PublishResult(comparison, removed, added, len(deletes), len(appends), rewritten, snapshot_id, attempt)
    raise AssertionError("unreachable")
