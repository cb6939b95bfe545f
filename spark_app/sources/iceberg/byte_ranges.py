"""What the JVM reader opens for a planned piece: byte ranges of whole row groups.

Spark's Parquet reader (parquet-mr underneath) reads, of a ``PartitionedFile(start, length)``,
exactly the row groups whose midpoint lies in ``[start, start + length)``. A run of
consecutive row groups ``a..b`` is therefore the range from ``a``'s starting offset to
``b + 1``'s (the file's end for the last group): it holds the midpoints of ``a..b`` and of no
other group. The offsets are Iceberg's split offsets, which are the row groups' starting
positions as parquet-mr computes them (dictionary page, else first data page, of the first
column). Pure: the planner's pieces in, the reader's ranges out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spark_app.planning.read_rate import FileLayout
from spark_app.planning.splits import FilePiece, Split, TimeRange


def runs(groups: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive row groups, as (first, last)."""
    out: list[tuple[int, int]] = []
    for g in sorted(set(groups)):
        if out and g == out[-1][1] + 1:
            out[-1] = (out[-1][0], g)
        else:
            out.append((g, g))
    return out


def piece_ranges(piece: FilePiece, layout: FileLayout) -> list[tuple[int, int]]:
    """The (start, length) byte ranges that read the piece's row groups (the whole file when
    it has no row groups to pick, or the manifest has no split offsets: a time slice then
    still reads only its rows, through its time range)."""
    size, offsets = layout
    if piece.row_groups is None or not offsets:
        if piece.row_groups is not None and piece.time_range is None:
            raise ValueError(f"{piece.path}: row groups {piece.row_groups} without split offsets to find them")
        return [(0, size)]
    ranges = []
    for first, last in runs(piece.row_groups):
        if last >= len(offsets):
            raise ValueError(f"{piece.path}: row group {last} past the {len(offsets)} of its manifest entry")
        end = offsets[last + 1] if last + 1 < len(offsets) else size
        ranges.append((offsets[first], end - offsets[first]))
    return ranges


SLICE_RANGES = 4
"""Time ranges one read of a file can keep (the source's ``_kappa_lo_i``/``_kappa_hi_i`` columns):
slices of one file in one task share a read up to this many; more take another read."""


def bounds_of(piece: FilePiece, clip: tuple[int, int] | None) -> tuple[int | None, int | None]:
    """The rows a piece keeps: its time slice, within its plan segment's bounds (None: all)."""
    lo, hi = (piece.time_range.lo, piece.time_range.hi) if piece.time_range is not None else (None, None)
    if clip is None:
        return lo, hi
    return (clip[0] if lo is None else max(lo, clip[0])), (clip[1] if hi is None else min(hi, clip[1]))


def merged(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """[lo, hi) ranges as the fewest disjoint ones covering the same times."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def task_pieces(
    task: Sequence[Split],
    layouts: Mapping[str, FileLayout],
    clip: Callable[[Split], tuple[int, int] | None] = lambda _: None,
    later: Callable[[str], list[tuple[int, int]]] = lambda _: [],
) -> list[dict[str, Any]]:
    """One task's reads for the JVM: per file, the byte ranges of the row groups its pieces
    need, the time ranges whose rows it delivers (none: all rows), and the time ranges of the
    file's other slices from this batch on (``later``: other reads of this task or batch, and
    later batches), whose rows the read keeps for them (``keep``, merged; the JVM's
    ``DecodedRows``).

    The pieces of one file in one task are time slices or row-group runs of it, disjoint in
    rows, and each slice's rows lie in its row groups: one read of the union of their row
    groups, keeping the rows in any of their time ranges, returns each row exactly once (a
    row of one slice's group that falls in another slice's range is a row of that slice, so
    its group is in the union). Up to ``SLICE_RANGES`` ranges share a read."""
    groups: dict[str, set[int] | None] = {}
    ranges: dict[str, list[tuple[int, int]]] = {}
    unsliced: set[str] = set()
    for split in task:
        for p in split.pieces:
            held = groups.setdefault(p.path, set())
            groups[p.path] = None if held is None or p.row_groups is None else held | set(p.row_groups)
            lo, hi = bounds_of(p, clip(split))
            if lo is None or hi is None:
                unsliced.add(p.path)
            elif (lo, hi) not in ranges.setdefault(p.path, []):
                ranges[p.path].append((lo, hi))
    out = []
    for path, held in groups.items():
        if path in unsliced and ranges.get(path):
            raise ValueError(f"{path}: a task has both whole and sliced pieces of it; the plan cuts a file one way")
        size, _ = layouts[path]
        piece = FilePiece(path, None if held is None else tuple(sorted(held)), 0, 0, None if path in unsliced else _ANY)
        kept = [] if path in unsliced else sorted(ranges[path])
        chunks = [kept[i : i + SLICE_RANGES] for i in range(0, len(kept), SLICE_RANGES)] or [[]]
        kept_later = later(path)
        for chunk in chunks:
            for start, length in piece_ranges(piece, layouts[path]):
                out.append(
                    {
                        "path": path,
                        "start": start,
                        "length": length,
                        "fileSize": size,
                        "ranges": [list(r) for r in chunk],
                        "keep": [list(r) for r in merged(list(set(kept_later) - set(chunk)))] if chunk else [],
                    }
                )
    return out


_ANY = TimeRange("", 0, 0)
"""Marks a merged piece as sliced for ``piece_ranges`` (which reads a whole file for a slice
when the manifest has no split offsets); its bounds travel in ``ranges``."""


def file_reads(task: Sequence[Split]) -> list[tuple[str, list[int] | None, list[list[int]]]]:
    """What a task reads of each file (first-seen order), for the trace: the row groups (None:
    all) and the time slices ([lo, hi) in µs; none: all rows)."""
    groups: dict[str, set[int] | None] = {}
    ranges: dict[str, list[list[int]]] = {}
    for split in task:
        for p in split.pieces:
            held = groups.setdefault(p.path, set())
            groups[p.path] = None if held is None or p.row_groups is None else held | set(p.row_groups)
            if p.time_range is not None and [p.time_range.lo, p.time_range.hi] not in ranges.setdefault(p.path, []):
                ranges[p.path].append([p.time_range.lo, p.time_range.hi])
    return [(path, None if g is None else sorted(g), ranges.get(path, [])) for path, g in groups.items()]
