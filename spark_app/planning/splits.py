"""Splits: the unit a source admits, built from Iceberg file metadata (and, for wide files,
the file's ordering column).

A split is a data file, a slice of a big file (a run of row groups), a time slice of a wide
file, or a bundle of small files or time slices. Its time range ``[lower, upper]`` comes
from the ordering column's statistics, clamped to the window being read (rows outside it are
filtered anyway). A file whose range is wider than ``SplitConfig.slice_span`` (late events
make almost every ingestion file wide) arrives here already cut into time slices (read at
the I/O edge, ``sources/iceberg/slices.py``): each slice is a pseudo-file whose range is the
true min/max of its rows, so the largest split span, and with it the lateness the guard
requires, follows the rows' disorder instead of the files'. Splits are ordered by
``(lower, upper, path)``: deterministic, so a restart from the checkpoint plans the same list
and the offsets (positions in it) mean the same.

Times are integer microseconds since the epoch, as in Iceberg's timestamp statistics.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from spark_app.contract.sources import SplitConfig


@dataclass(frozen=True, slots=True)
class TimeSlice:
    """The rows of a wide file whose ordering value is in ``[lower, upper]`` (their true min
    and max), found by reading the file's ordering column at planning time."""

    lower: int
    upper: int
    rows: int
    row_groups: tuple[int, ...] | None = None
    """Row groups that hold these rows (None: all): the reader skips the others."""


class TimeRange(NamedTuple):
    """Rows whose ``column`` value is in ``[lo, hi)``: how a reader cuts a time slice out of
    the row groups it reads. The column travels with the piece so an executor needs nothing
    else to apply it."""

    column: str
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class DataFileInfo:
    """What the planner knows of a data file: the manifest, plus time slices for wide files."""

    path: str
    record_count: int
    size_bytes: int
    lower: int | None
    upper: int | None
    row_group_offsets: tuple[int, ...] = ()
    spec_partition: str = ""
    slices: tuple[TimeSlice, ...] | None = None
    """None: not sliced (the statistics are its range). Otherwise the file's non-empty time
    slices within the window, disjoint and ordered (empty: no row in the window)."""
    slice_column: str = ""
    """The ordering column the slices were cut on (dotted for struct fields)."""


@dataclass(frozen=True, slots=True)
class FilePiece:
    """A whole file (``row_groups`` None) or some of its row groups, optionally only the rows
    in a time range (a time slice of a wide file)."""

    path: str
    row_groups: tuple[int, ...] | None
    rows: int
    size_bytes: int
    time_range: TimeRange | None = None


@dataclass(frozen=True, slots=True)
class Split:
    lower: int
    upper: int
    pieces: tuple[FilePiece, ...]
    rows: int = field(compare=False)
    size_bytes: int = field(compare=False)

    @property
    def span(self) -> int:
        return self.upper - self.lower

    @property
    def files(self) -> int:
        return len(self.pieces)

    def sort_key(self) -> tuple[int, int, str, tuple[int, ...], tuple[str | int, ...]]:
        first = self.pieces[0]
        return (self.lower, self.upper, first.path, first.row_groups or (), first.time_range or ())


def _clamp_range(lower: int, upper: int, lo: int | None, hi: int | None) -> tuple[int, int]:
    if lo is not None:
        lower, upper = max(lower, lo), max(upper, lo)
    if hi is not None:
        lower, upper = min(lower, hi - 1), min(upper, hi - 1)
    return lower, upper


def _clamp(f: DataFileInfo, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Time range of a file within ``[lo, hi)``; missing statistics mean "anywhere in it"."""
    lower = f.lower if f.lower is not None else (lo if lo is not None else 0)
    upper = f.upper if f.upper is not None else (hi - 1 if hi is not None else lower)
    return _clamp_range(lower, upper, lo, hi)


def slice_span_us(cfg: SplitConfig) -> int:
    """The configured slice span in microseconds; 0 when time slicing is off."""
    return int(cfg.slice_span.total_seconds() * 1_000_000) if cfg.slice_span else 0


def is_wide(f: DataFileInfo, cfg: SplitConfig, window: tuple[int | None, int | None] = (None, None)) -> bool:
    """Whether a file is worth cutting into time slices: its range within the window is wider
    than the slice span (a file without statistics counts as spanning the whole window)."""
    span = slice_span_us(cfg)
    if not span:
        return False
    lower, upper = _clamp(f, *window)
    return upper - lower > span


def _group_sizes(f: DataFileInfo) -> list[int]:
    """Bytes of each row group, from the manifest's split offsets."""
    offsets = list(f.row_group_offsets)
    if not offsets:
        return []
    ends = [*offsets[1:], f.size_bytes]
    return [max(e - o, 1) for o, e in zip(offsets, ends, strict=True)]


def _runs(groups: Iterable[int], sizes: Sequence[int], target: int) -> list[tuple[tuple[int, ...], int]]:
    """Consecutive runs of ``groups`` of about ``target`` bytes: (row groups, bytes)."""
    runs: list[tuple[tuple[int, ...], int]] = []
    current: list[int] = []
    current_bytes = 0
    for g in groups:
        size = sizes[g]
        if current and current_bytes + size > target:
            runs.append((tuple(current), current_bytes))
            current, current_bytes = [], 0
        current.append(g)
        current_bytes += size
    runs.append((tuple(current), current_bytes))
    return runs


def _slice(f: DataFileInfo, target: int) -> list[tuple[tuple[int, ...], int, int]]:
    """Runs of consecutive row groups of about ``target`` bytes: (row groups, rows, bytes)."""
    sizes = _group_sizes(f)
    total = max(sum(sizes), 1)
    return [
        (groups, round(f.record_count * nbytes / total), nbytes)
        for groups, nbytes in _runs(range(len(sizes)), sizes, target)
    ]


@dataclass(frozen=True, slots=True)
class _Unit:
    """What ordering, bundling and byte slicing see: a whole file or one time slice of one."""

    f: DataFileInfo
    lower: int
    upper: int
    rows: int
    size_bytes: int
    row_groups: tuple[int, ...] | None
    time_range: TimeRange | None

    def key(self) -> tuple[int, int, str, tuple[str | int, ...]]:
        return (self.lower, self.upper, self.f.path, self.time_range or ())

    def piece(self) -> FilePiece:
        return FilePiece(self.f.path, self.row_groups, self.rows, self.size_bytes, self.time_range)


def _units(f: DataFileInfo, lo: int | None, hi: int | None) -> list[_Unit]:
    if f.slices is None:
        return [_Unit(f, *_clamp(f, lo, hi), f.record_count, f.size_bytes, None, None)]
    units = []
    for s in f.slices:
        # bytes in proportion to rows: what the slice weighs for bundling, limits and packing
        size = max(1, f.size_bytes * s.rows // max(f.record_count, s.rows, 1))
        time_range = TimeRange(f.slice_column, s.lower, s.upper + 1)
        units.append(_Unit(f, *_clamp_range(s.lower, s.upper, lo, hi), s.rows, size, s.row_groups, time_range))
    return units


def _byte_slices(u: _Unit, target: int) -> list[FilePiece] | None:
    """A unit too big for one split, cut into runs of its row groups (None: it fits)."""
    f = u.f
    sizes = _group_sizes(f)
    if u.time_range is None:
        if f.size_bytes > target and len(sizes) > 1:
            return [FilePiece(f.path, groups, rows, nbytes) for groups, rows, nbytes in _slice(f, target)]
        return None
    groups = tuple(range(len(sizes))) if u.row_groups is None else u.row_groups
    if u.size_bytes <= target or len(groups) < 2 or max(groups) >= len(sizes):
        return None
    runs = _runs(groups, sizes, target)
    total = sum(nbytes for _, nbytes in runs)
    pieces, done, rows_done, size_done = [], 0, 0, 0
    for run, nbytes in runs:  # cumulative rounding: the pieces add up to the slice exactly
        done += nbytes
        rows, size = round(u.rows * done / total), round(u.size_bytes * done / total)
        pieces.append(FilePiece(f.path, run, rows - rows_done, max(size - size_done, 1), u.time_range))
        rows_done, size_done = rows, size
    return pieces


def plan_splits(
    files: Iterable[DataFileInfo],
    cfg: SplitConfig,
    window: tuple[int | None, int | None] = (None, None),
) -> list[Split]:
    """Turn files into ordered splits: time slices of wide files are pseudo-files; slice big
    ones by row groups, bundle small neighbours."""
    lo, hi = window
    units = sorted((u for f in files for u in _units(f, lo, hi)), key=_Unit.key)
    max_bundle_span = int(cfg.max_bundle_span.total_seconds() * 1_000_000)
    splits: list[Split] = []
    bundle: list[_Unit] = []
    bundle_cost = 0

    def flush() -> None:
        nonlocal bundle, bundle_cost
        if bundle:
            pieces = tuple(u.piece() for u in bundle)
            splits.append(
                Split(
                    lower=min(u.lower for u in bundle),
                    upper=max(u.upper for u in bundle),
                    pieces=pieces,
                    rows=sum(p.rows for p in pieces),
                    size_bytes=sum(p.size_bytes for p in pieces),
                )
            )
        bundle, bundle_cost = [], 0

    for u in units:
        sliced = _byte_slices(u, cfg.target_bytes)
        if sliced is not None:
            flush()
            splits += [Split(u.lower, u.upper, (p,), p.rows, p.size_bytes) for p in sliced]
            continue
        cost = max(u.size_bytes, cfg.open_file_cost)
        if bundle and (bundle_cost + cost > cfg.target_bytes or u.lower - bundle[0].lower > max_bundle_span):
            flush()
        bundle.append(u)
        bundle_cost += cost
    flush()
    splits.sort(key=Split.sort_key)
    return splits


def plan_fingerprint(splits: Sequence[Split]) -> str:
    """Short hash of a plan, stored in offsets so a restart can tell the plan is the same."""
    h = hashlib.sha256()
    for s in splits:
        pieces = [[p.path, p.row_groups, *([list(p.time_range)] if p.time_range else [])] for p in s.pieces]
        h.update(json.dumps([s.lower, s.upper, pieces]).encode())
    return h.hexdigest()[:16]


def max_span(splits: Sequence[Split]) -> int:
    return max((s.span for s in splits), default=0)


def read_together(splits: Sequence[Split], cap: int) -> list[list[Split]]:
    """The splits as units of packing: splits that hold time slices of one file go together (a
    task reads a file's slices in one read, or serves the later ones from its first; tasks
    running at once would each decode it), unless together they pass ``cap`` bytes. Then they
    go apart, but slices that share a row group of the file still go together: any two reads of
    one row group would decode it twice, or, in tasks running at once, serve one from the
    other's rows by timing alone (``DecodedRows``), which would make the rows decoded and reused
    differ from run to run of one plan. Deterministic: units in the order of their first split."""
    ordered = sorted(splits, key=Split.sort_key)
    units: list[list[Split]] = []
    for group in _linked(ordered, by_row_group=False):
        if len(group) > 1 and sum(s.size_bytes for s in group) > cap:
            units += _linked(group, by_row_group=True)
        else:
            units.append(group)
    return units


def _share_row_groups(a: FilePiece, b: FilePiece) -> bool:
    return a.row_groups is None or b.row_groups is None or not set(a.row_groups).isdisjoint(b.row_groups)


def _linked(ordered: Sequence[Split], by_row_group: bool) -> list[list[Split]]:
    """The splits grouped by their time-sliced pieces, transitively: two splits are in one
    group when they hold slices of one file (``by_row_group``: that share a row group of it).
    Groups in the order of their first split, each in the given order."""
    parent = list(range(len(ordered)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    seen: dict[str, list[tuple[int, FilePiece]]] = {}
    for i, split in enumerate(ordered):
        for p in split.pieces:
            if p.time_range is None:
                continue
            earlier = seen.setdefault(p.path, [])
            for j, q in earlier if by_row_group else earlier[:1]:
                a, b = root(i), root(j)
                if a != b and (not by_row_group or _share_row_groups(p, q)):
                    parent[max(a, b)] = min(a, b)
            earlier.append((i, p))
    groups: dict[int, list[Split]] = {}
    for i, split in enumerate(ordered):
        groups.setdefault(root(i), []).append(split)
    return list(groups.values())


def pack_tasks(splits: Sequence[Split], parallelism: int, task_target_bytes: int) -> list[list[Split]]:
    """Spread admitted splits over Spark tasks: at least one per core when there is enough,
    several splits per task, balanced by bytes (greedy, deterministic), a file's time slices in
    one task while that costs no more than a task's fair share, and those that share a row group
    of it in one task always (``read_together``)."""
    if not splits:
        return []
    total = sum(s.size_bytes for s in splits)
    n_tasks = min(len(splits), max(parallelism, -(-total // task_target_bytes)))
    units = read_together(splits, total // n_tasks)
    n_tasks = min(n_tasks, len(units))
    tasks: list[list[Split]] = [[] for _ in range(n_tasks)]
    loads = [0] * n_tasks

    def size(unit: list[Split]) -> int:
        return sum(s.size_bytes for s in unit)

    for unit in sorted(units, key=lambda u: (-size(u), u[0].sort_key())):
        i = min(range(n_tasks), key=lambda k: (loads[k], k))
        tasks[i] += unit
        loads[i] += size(unit)
    for t in tasks:
        t.sort(key=Split.sort_key)
    return [t for t in tasks if t]
