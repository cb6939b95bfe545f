"""Validate a backfill branch against main over its window, then publish it: main's rows in
the window are replaced by the branch's, in one Iceberg snapshot. Both run in Spark, in the
application that publishes (``spark_app.apps.publish``): the comparison is a Spark job
(``validation``), and the files that straddle the window's edges are read and rewritten by the
executors. The driver handles metadata only: planning, and the one commit.

Files wholly inside the window are moved by reference (no data rewritten); only the files
that straddle the window's edges are rewritten without (main) or with only (branch) the
window's rows. A concurrent commit to main makes the snapshot conflict: the whole publish is
planned again on the new state, so nothing a live writer added is lost. A publish killed at any
point is resumed by running it again: before its commit nothing in main changed (rewritten
files are orphans), after it main equals the branch and a second run commits nothing.

Every entry point (``validate``, ``publish``) refuses a branch that matches main below
``DEFAULT_MIN_MATCH_RATIO`` unless the caller lowers it explicitly: a partial branch must never
replace good rows by default. A branch that does not exist is an error that says why.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyspark.sql import SparkSession

from spark_app.contract.errors import KappaError
from spark_app.contract.publish_defaults import DEFAULT_MIN_MATCH_RATIO
from spark_app.sinks.iceberg.arrow_files import pack, unpack
from spark_app.sinks.iceberg.commit import try_commit
from spark_app.sinks.iceberg.validation import Comparison, compare_snapshots
from spark_app.sinks.iceberg.window import TimeWindow

log = logging.getLogger("kappa.publish")

PUBLISHED_FROM = "kappa.published-from"
FAULT_ENV = "KAPPA_PUBLISH_FAULT"
"""Fault injection for tests: ``kill-before-commit`` / ``kill-after-commit`` kill the driver."""

_BRANCHES_SHOWN = 10


class ValidationFailedError(KappaError):
    """The branch does not match main well enough to publish."""


class BranchMissingError(ValidationFailedError):
    """The backfill branch was never created: its run committed no row in the window."""


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


def compare(
    spark: SparkSession,
    table: Table,
    catalog_properties: dict[str, str],
    branch: str,
    window: TimeWindow,
    key: list[str],
    leave_out: Collection[str] = (),
) -> Comparison:
    """Branch vs main over the window, by Spark. A missing branch raises rather than comparing
    as empty: an empty side would read as "1.0" against an empty main, or as a plain low ratio.
    ``leave_out``: columns not compared (a new version's added columns, null in main's rows)."""
    side = branch_head(table, branch, window)
    return compare_snapshots(spark, table, catalog_properties, window, _head(table, "main"), side, key, leave_out)


def _check_ratio(min_match_ratio: float | None) -> None:
    if min_match_ratio is None:
        raise TypeError("min_match_ratio=None does not mean 'no check': pass 0.0 to accept any match, explicitly")
    if not 0.0 <= min_match_ratio <= 1.0:
        raise ValueError(f"min_match_ratio must be in [0, 1], got {min_match_ratio}")


def validate(
    spark: SparkSession,
    table: Table,
    catalog_properties: dict[str, str],
    branch: str,
    window: TimeWindow,
    key: list[str] | None = None,
    min_match_ratio: float = DEFAULT_MIN_MATCH_RATIO,
) -> Comparison:
    """Compare ``branch`` with main over ``window``; ValidationFailedError below ``min_match_ratio``.

    ``min_match_ratio=0.0`` accepts any match (an explicit opt-out, logged as a warning)."""
    _check_ratio(min_match_ratio)
    comparison = compare(spark, table, catalog_properties, branch, window, key or [])
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


@dataclass(frozen=True)
class EdgeRewrite:
    """What an executor needs to rewrite the files on the window's edges (pickled to it)."""

    catalog_properties: dict[str, str]
    metadata_json: str
    window: TimeWindow
    files: tuple[tuple[DataFile, bool], ...]
    """Each file, and whether to keep its rows inside the window (branch) or outside it (main)."""


def _rewrite_edges(spec: EdgeRewrite) -> Callable[[Iterator[int]], Iterator[tuple[int, int, bytes | None]]]:
    def rewrite(indexes: Iterator[int]) -> Iterator[tuple[int, int, bytes | None]]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
        from pyiceberg.table import FileScanTask
        from pyiceberg.table.metadata import TableMetadataUtil

        metadata = TableMetadataUtil.parse_raw(spec.metadata_json)
        io = load_file_io(spec.catalog_properties, metadata.location)
        for i in indexes:
            file, inside = spec.files[i]
            rows = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue()).to_table([FileScanTask(file)])
            mask = spec.window.mask(rows)
            kept = rows.filter(mask if inside else pc.invert(mask))
            if kept.num_rows == (0 if inside else rows.num_rows):
                yield i, kept.num_rows, None  # nothing of it changes main: no file written
                continue
            written = list(_dataframe_to_data_files(metadata, kept, io, write_uuid=uuid.uuid4())) if kept else []
            if not written:
                yield i, 0, b""
            for f in written:
                yield i, kept.num_rows, pack(f)

    return rewrite


@dataclass(frozen=True)
class EdgeFile:
    """One straddling file after its rewrite: the rows it keeps and the files that hold them."""

    file: DataFile
    inside: bool
    kept_rows: int
    changed: bool
    """False: none of its rows was on the side to drop (its stats straddle, its rows do not)."""
    written: tuple[DataFile, ...]


def rewrite_edges(
    spark: SparkSession,
    table: Table,
    catalog_properties: dict[str, str],
    window: TimeWindow,
    files: list[tuple[DataFile, bool]],
) -> list[EdgeFile]:
    """Rewrite the straddling files on the executors (a file a task); only the new files'
    descriptions come back."""
    if not files:
        return []
    spec = EdgeRewrite(catalog_properties, table.metadata.model_dump_json(), window, tuple(files))
    rdd = spark.sparkContext.parallelize(range(len(files)), len(files)).mapPartitions(_rewrite_edges(spec))
    kept: dict[int, int] = {}
    written: dict[int, list[DataFile]] = {}
    changed: set[int] = set()
    for i, rows, packed in rdd.collect():
        kept[i] = rows
        written.setdefault(i, [])
        if packed is not None:
            changed.add(i)
            written[i] += [unpack(packed)] if packed else []
    return [EdgeFile(files[i][0], files[i][1], kept[i], i in changed, tuple(written[i])) for i in sorted(kept)]


def _fault(point: str) -> None:
    if os.environ.get(FAULT_ENV) == point:  # die like a killed driver (tests)
        log.warning("fault injected: %s", point)
        os.killpg(os.getpgrp(), signal.SIGKILL)


def publish(
    spark: SparkSession,
    load: Callable[[], Table],
    catalog_properties: dict[str, str],
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
        comparison = validate(spark, table, catalog_properties, branch, window, key, min_match_ratio)
        if comparison.matched == comparison.main_rows == comparison.branch_rows:
            # main already holds the branch's window (published before, or reproduced exactly):
            # no commit, whatever the files look like (a branch file straddling an edge is
            # never shared with main, so a file-level diff alone would publish it again)
            return PublishResult(comparison, 0, 0, 0, 0, 0, None, attempt)
        main_tasks = window.tasks(table, _head(table, "main"))
        branch_tasks = window.tasks(table, _head(table, branch))
        shared = {t.file.file_path for t in main_tasks} & {t.file.file_path for t in branch_tasks}
        removed = added = 0
        deletes: list[DataFile] = []
        appends: list[DataFile] = []
        edges: list[tuple[DataFile, bool]] = []
        for task in (t for t in main_tasks if t.file.file_path not in shared):
            if window.inside(table, task):
                deletes.append(task.file)
                removed += task.file.record_count
            else:
                edges.append((task.file, False))
        for task in (t for t in branch_tasks if t.file.file_path not in shared):
            if window.inside(table, task):
                appends.append(task.file)
                added += task.file.record_count
            else:
                edges.append((task.file, True))
        rewritten = 0
        for edge in rewrite_edges(spark, table, catalog_properties, window, edges):
            if not edge.changed:
                continue
            if edge.inside:
                added += edge.kept_rows
            else:
                deletes.append(edge.file)
                removed += edge.file.record_count - edge.kept_rows
            appends += edge.written
            rewritten += 1
        if not deletes and not appends:
            return PublishResult(comparison, 0, 0, 0, 0, 0, None, attempt)
        props = {
            PUBLISHED_FROM: branch,
            "kappa.window": f"{window.column} [{window.start.isoformat()}, {window.end.isoformat()})",
            "kappa.rows-removed": str(removed),
            "kappa.rows-added": str(added),
            "kappa.match-ratio": f"{comparison.match_ratio:.6f}",
            "kappa.main-rows": str(comparison.main_rows),
            "kappa.branch-rows": str(comparison.branch_rows),
            "kappa.matched": str(comparison.matched),
            "kappa.differing-keys": json.dumps(
                [json.dumps(k, default=str, sort_keys=True) for k in comparison.differing]
            ),
            **(properties or {}),
        }
        tx = table.transaction()
        with tx.update_snapshot(snapshot_properties=props, branch="main").overwrite() as overwrite:
            overwrite.delete_by_predicate(window.expression(table))
            for f in deletes:
                overwrite.delete_data_file(f)
            for f in appends:
                overwrite.append_data_file(f)
        _fault("kill-before-commit")
        snapshot_id = try_commit(tx, "main", attempt, retries, f"publish of {branch} into {_name(table)}")
        if snapshot_id is None:
            continue
        _fault("kill-after-commit")
        log.info("published %s into main: -%d +%d rows (snapshot %d)", branch, removed, added, snapshot_id)
        return PublishResult(comparison, removed, added, len(deletes), len(appends), rewritten, snapshot_id, attempt)
    raise AssertionError("unreachable")
