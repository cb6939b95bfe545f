"""Byte ranges of the pieces the JVM reads: whole row groups by parquet-mr's midpoint rule."""

from __future__ import annotations

import pytest

from spark_app.planning.splits import FilePiece, Split, TimeRange
from spark_app.sources.iceberg.byte_ranges import file_reads, piece_ranges, runs, task_pieces

LAYOUT = (1000, (4, 250, 500, 750))  # four row groups, the last ends at the file's end


def test_runs_of_consecutive_groups() -> None:
    assert runs([3, 0, 1]) == [(0, 1), (3, 3)]
    assert runs([]) == []


def test_a_run_spans_from_its_first_group_to_the_next_groups_start() -> None:
    assert piece_ranges(FilePiece("f", (1, 2), 10, 10), LAYOUT) == [(250, 500)]
    assert piece_ranges(FilePiece("f", (0, 3), 10, 10), LAYOUT) == [(4, 246), (750, 250)]
    assert piece_ranges(FilePiece("f", None, 10, 10), LAYOUT) == [(0, 1000)]


def test_every_group_midpoint_lies_in_exactly_its_range() -> None:
    """The property the reader relies on, for a group of any size inside its bounds."""
    size, offsets = LAYOUT
    ends = [*offsets[1:], size]
    for g, (start, end) in enumerate(zip(offsets, ends, strict=True)):
        midpoint = start + (end - start) // 2
        [(lo, length)] = piece_ranges(FilePiece("f", (g,), 1, 1), LAYOUT)
        assert lo <= midpoint < lo + length
        others = [h for h in range(4) if h != g]
        for lo2, length2 in piece_ranges(FilePiece("f", tuple(others), 1, 1), LAYOUT):
            assert not lo2 <= midpoint < lo2 + length2


def test_without_split_offsets_a_slice_reads_the_file_and_a_group_run_is_refused() -> None:
    sliced = FilePiece("f", (1,), 1, 1, TimeRange("ts", 5, 9))
    assert piece_ranges(sliced, (1000, ())) == [(0, 1000)]
    with pytest.raises(ValueError, match="without split offsets"):
        piece_ranges(FilePiece("f", (1,), 1, 1), (1000, ()))
    with pytest.raises(ValueError, match="past the 4"):
        piece_ranges(FilePiece("f", (4,), 1, 1), LAYOUT)


def test_task_pieces_carry_the_slice_bounds() -> None:
    a = FilePiece("f", (0,), 5, 5, TimeRange("ts", 10, 20))
    b = FilePiece("g", None, 5, 5)
    task = [Split(10, 20, (a,), 5, 5), Split(0, 30, (b,), 5, 5)]
    got = task_pieces(task, {"f": LAYOUT, "g": (77, ())})
    assert got == [
        {"path": "f", "start": 4, "length": 246, "fileSize": 1000, "ranges": [[10, 20]], "keep": []},
        {"path": "g", "start": 0, "length": 77, "fileSize": 77, "ranges": [], "keep": []},
    ]
    c = FilePiece("f", (1,), 5, 5, TimeRange("ts", 20, 30))
    assert file_reads([Split(10, 20, (a,), 5, 5), Split(20, 30, (c,), 5, 5)]) == [("f", [0, 1], [[10, 20], [20, 30]])]


def test_slices_of_a_file_in_one_task_share_one_read_of_their_row_groups() -> None:
    slices = [FilePiece("f", (g % 2,), 1, 1, TimeRange("ts", 10 * i, 10 * i + 5)) for i, g in enumerate(range(6))]
    got = task_pieces([Split(10 * i, 10 * i + 4, (p,), 1, 1) for i, p in enumerate(slices)], {"f": LAYOUT})
    assert [(r["start"], r["length"]) for r in got] == [(4, 496), (4, 496)]  # groups 0-1, 4 ranges, then 2
    assert [len(r["ranges"]) for r in got] == [4, 2]
    assert sorted(tuple(x) for r in got for x in r["ranges"]) == [(10 * i, 10 * i + 5) for i in range(6)]


def test_a_plan_segment_bounds_every_piece() -> None:
    whole = FilePiece("g", None, 5, 5)
    sliced = FilePiece("f", (0,), 5, 5, TimeRange("ts", 10, 50))
    task = [Split(0, 60, (whole,), 5, 5), Split(10, 50, (sliced,), 5, 5)]
    got = task_pieces(task, {"f": LAYOUT, "g": (77, ())}, clip=lambda _: (40, 100))
    assert [r["ranges"] for r in got] == [[[40, 100]], [[40, 50]]]


def test_a_read_keeps_the_rows_of_the_files_other_slices_from_this_batch_on() -> None:
    """``keep``: the file's slices this read does not deliver (the task's next read of it, other
    tasks, later batches), merged where they touch; a whole-file read keeps nothing."""
    slices = [FilePiece("f", (g % 2,), 1, 1, TimeRange("ts", 10 * i, 10 * i + 5)) for i, g in enumerate(range(6))]
    ahead = [(10 * i, 10 * i + 5) for i in range(6)] + [(60, 70), (70, 80)]
    got = task_pieces(
        [Split(10 * i, 10 * i + 4, (p,), 1, 1) for i, p in enumerate(slices)],
        {"f": LAYOUT, "g": (77, ())},
        later=lambda path: ahead if path == "f" else [(0, 5)],
    )
    assert [r["keep"] for r in got] == [
        [[40, 45], [50, 55], [60, 80]],
        [[0, 5], [10, 15], [20, 25], [30, 35], [60, 80]],
    ]
    whole = task_pieces([Split(0, 30, (FilePiece("g", None, 5, 5),), 5, 5)], {"g": (77, ())}, later=lambda _: [(0, 5)])
    assert whole[0]["keep"] == []
