"""Splits: the unit a source admits, built from Iceberg file metadata alone.

A split is a data file, a slice of a big file (a run of row groups), or a bundle of small
files. Its time range ``[lower, upper]`` comes from the ordering column's statistics,
clamped to the window being read (rows outside it are filtered anyway), so no file is
opened to plan. Splits are ordered by ``(lower, upper, path)``: deterministic, so a restart
from the checkpoint plans the same list and the offsets (positions in it) mean the same.

Times are integer microseconds since the epoch, as in Iceberg's timestamp statistics.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from spark_app.config import SplitConfig


@dataclass(frozen=True, slots=True)
class DataFileInfo:
    """What the planner knows of a data file, straight from the manifest."""

    path: str
    record_count: int
    size_bytes: int
    lower: int | None
    upper: int | None
    row_group_offsets: tuple[int, ...] = ()
    spec_partition: str = ""


@dataclass(frozen=True, slots=True)
class FilePiece:
    """A whole file (``row_groups`` None) or some of its row groups."""

    path: str
    row_groups: tuple[int, ...] | None
    rows: int
    size_bytes: int


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

    def sort_key(self) -> tuple[int, int, str, tuple[int, ...]]:
        first = self.pieces[0]
        return (self.lower, self.upper, first.path, first.row_groups or ())


def _clamp(f: DataFileInfo, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Time range of a file within ``[lo, hi)``; missing statistics mean "anywhere in it"."""
    lower = f.lower if f.lower is not None else (lo if lo is not None else 0)
    upper = f.upper if f.upper is not None else (hi - 1 if hi is not None else lower)
    if lo is not None:
        lower, upper = max(lower, lo), max(upper, lo)
    if hi is not None:
        lower, upper = min(lower, hi - 1), min(upper, hi - 1)
    return lower, upper


def _slice(f: DataFileInfo, target: int) -> list[tuple[tuple[int, ...], int, int]]:
    """Runs of consecutive row groups of about ``target`` bytes: (row groups, rows, bytes)."""
    offsets = list(f.row_group_offsets)
    ends = [*offsets[1:], f.size_bytes]
    sizes = [max(e - o, 1) for o, e in zip(offsets, ends, strict=True)]
    runs: list[tuple[tuple[int, ...], int]] = []
    current: list[int] = []
    current_bytes = 0
    for i, size in enumerate(sizes):
        if current and current_bytes + size > target:
            runs.append((tuple(current), current_bytes))
            current, current_bytes = [], 0
        current.append(i)
        current_bytes += size
    runs.append((tuple(current), current_bytes))
    out = []
    for groups, nbytes in runs:
        rows = round(f.record_count * nbytes / max(sum(sizes), 1))
        out.append((groups, rows, nbytes))
    return out


def plan_splits(
    files: Iterable[DataFileInfo],
    cfg: SplitConfig,
    window: tuple[int | None, int | None] = (None, None),
) -> list[Split]:
    """Turn files into ordered splits: slice big files, bundle small neighbours."""
    lo, hi = window
    ordered = sorted(files, key=lambda f: (*_clamp(f, lo, hi), f.path))
    max_bundle_span = int(cfg.max_bundle_span.total_seconds() * 1_000_000)
    splits: list[Split] = []
    bundle: list[tuple[DataFileInfo, int, int]] = []
    bundle_cost = 0

    def flush() -> None:
        nonlocal bundle, bundle_cost
        if bundle:
            pieces = tuple(FilePiece(f.path, None, f.record_count, f.size_bytes) for f, _, _ in bundle)
            splits.append(
                Split(
                    lower=min(lw for _, lw, _ in bundle),
                    upper=max(up for _, _, up in bundle),
                    pieces=pieces,
                    rows=sum(p.rows for p in pieces),
                    size_bytes=sum(p.size_bytes for p in pieces),
                )
            )
        bundle, bundle_cost = [], 0

    for f in ordered:
        lower, upper = _clamp(f, lo, hi)
        if f.size_bytes > cfg.target_bytes and len(f.row_group_offsets) > 1:
            flush()
            for groups, rows, nbytes in _slice(f, cfg.target_bytes):
                piece = FilePiece(f.path, groups, rows, nbytes)
                splits.append(Split(lower, upper, (piece,), rows, nbytes))
            continue
        cost = max(f.size_bytes, cfg.open_file_cost)
        if bundle and (bundle_cost + cost > cfg.target_bytes or lower - bundle[0][1] > max_bundle_span):
            flush()
        bundle.append((f, lower, upper))
        bundle_cost += cost
    flush()
    splits.sort(key=Split.sort_key)
    return splits


def plan_fingerprint(splits: Sequence[Split]) -> str:
    """Short hash of a plan, stored in offsets so a restart can tell the plan is the same."""
    h = hashlib.sha256()
    for s in splits:
        h.update(json.dumps([s.lower, s.upper, [(p.path, p.row_groups) for p in s.pieces]]).encode())
    return h.hexdigest()[:16]


def max_span(splits: Sequence[Split]) -> int:
    return max((s.span for s in splits), default=0)


def pack_tasks(splits: Sequence[Split], parallelism: int, task_target_bytes: int) -> list[list[Split]]:
    """Spread admitted splits over Spark tasks: at least one per core when there is enough,
    several splits per task, balanced by bytes (greedy, deterministic)."""
    if not splits:
        return []
    total = sum(s.size_bytes for s in splits)
    n_tasks = min(len(splits), max(parallelism, -(-total // task_target_bytes)))
    tasks: list[list[Split]] = [[] for _ in range(n_tasks)]
    loads = [0] * n_tasks
    for s in sorted(splits, key=lambda s: (-s.size_bytes, s.sort_key())):
        i = min(range(n_tasks), key=lambda k: (loads[k], k))
        tasks[i].append(s)
        loads[i] += s.size_bytes
    for t in tasks:
        t.sort(key=Split.sort_key)
    return [t for t in tasks if t]
