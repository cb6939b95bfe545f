"""Admission: which of a source's next splits go into the coming micro-batch.

Pure. A source's watermark is the lower bound of its earliest split not yet admitted (None
when it has none left: finished, it holds nobody back). In ``aligned`` mode a split may be
admitted only if ``lower <= global + maxDrift``; ``strict`` is the same with no drift;
``unordered`` ignores the group. Spark's ReadLimit (files, rows, bytes) caps a batch too,
but never below one admissible split, so the slowest source always progresses: its next
split's lower bound *is* the global watermark, which is within any bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spark_app.planning.splits import Split


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on one micro-batch; None means unlimited."""

    max_files: int | None = None
    max_rows: int | None = None
    max_bytes: int | None = None

    @classmethod
    def unlimited(cls) -> Limits:
        return cls()


@dataclass(frozen=True, slots=True)
class Admission:
    start: int
    end: int
    bound: int | None
    throttled: bool
    """True when the drift bound (not a limit, not the end) stopped admission."""


def source_watermark(splits: Sequence[Split], position: int) -> int | None:
    return splits[position].lower if position < len(splits) else None


def admit(
    splits: Sequence[Split], position: int, bound: int | None, limits: Limits, at_least_one: bool = True
) -> Admission:
    """Admit splits from ``position`` in order while within ``bound`` and ``limits``.

    ``at_least_one``: the first admissible split goes in even if it alone exceeds a limit
    (otherwise a split bigger than the limit would stall the source forever)."""
    end = position
    files = rows = nbytes = 0
    throttled = False
    while end < len(splits):
        s = splits[end]
        if bound is not None and s.lower > bound:
            throttled = True
            break
        if (end > position or not at_least_one) and (
            (limits.max_files is not None and files + s.files > limits.max_files)
            or (limits.max_rows is not None and rows + s.rows > limits.max_rows)
            or (limits.max_bytes is not None and nbytes + s.size_bytes > limits.max_bytes)
        ):
            break
        files += s.files
        rows += s.rows
        nbytes += s.size_bytes
        end += 1
    return Admission(start=position, end=end, bound=bound, throttled=throttled)
