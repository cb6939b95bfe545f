"""What a pipeline's query plans allow a bounded run (pure, on the plans' text): the operators
whose results depend on when the watermark passed, refused by name; the joins and their kinds;
and how each sink's results close (``Closing``: the open/written rule of a windowed or session
aggregation, which a bounded run applies as the streaming run does)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


_REFUSED: tuple[tuple[str, str], ...] = (
    (r"\bDeduplicateWithinWatermark\b", "dropDuplicatesWithinWatermark (its state ends with the watermark)"),
    (r"\bDeduplicate\b", "dropDuplicates on a stream (its state ends with the watermark)"),
    (r"FlatMapGroups(InPandas)?WithState\b", "arbitrary state (applyInPandasWithState / flatMapGroupsWithState)"),
    (r"TransformWithState", "transformWithState (state with timers)"),
    (r"\b(current_timestamp|current_date|now|localtimestamp)\(", "a processing-time function"),
)


_JOIN = re.compile(r"\bJoin (\w+)")


_STREAMING_LEAF = re.compile(r"\bStreaming\w*Relation")


_TREE = " :+-"
"""The characters of Spark's tree drawing (``:- `` a first child, ``+- `` the last)."""


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(_TREE))


def joins(plan: str) -> list[tuple[str, bool]]:
    """Each join of an analyzed plan (its ``treeString``), and whether both its sides read a
    stream. A stream joined with a static frame (a lookup, ``spark_app.lookups``) emits each
    row when it arrives, matched or not, as a batch join does; only a join of two streams
    holds unmatched rows until the watermark passes."""
    lines = plan.splitlines()
    out = []
    for at, line in enumerate(lines):
        found = _JOIN.search(line)
        if found is None or found.start() != _depth(line):
            continue
        depth, sub = _depth(line), []
        for below in lines[at + 1 :]:
            if _depth(below) <= depth:
                break
            sub.append(below)
        starts = [i for i, below in enumerate(sub) if _depth(below) == depth + 3]
        sides = [sub[a:b] for a, b in zip(starts, [*starts[1:], len(sub)], strict=True)]
        streaming = [any(_STREAMING_LEAF.search(x) for x in side) for side in sides]
        out.append((found.group(1), len(streaming) == 2 and all(streaming)))
    return out


_AGGREGATE = re.compile(r"(?<![\w.])Aggregate \[")


_END = re.compile(r"\b\w+#\d+(?:-T\d+ms)?\.end AS (\w+)#\d+")  # -T<delay>ms: a watermarked column


def end_column(plan: str) -> str | None:
    """The output column holding a window's or session's end (``w.end AS window_end``): what
    the watermark is compared with to tell a written result from one still open."""
    found = _END.findall(plan)
    return found[-1] if len(set(found)) == 1 else None


def refusal(plans: dict[str, str]) -> str | None:
    """Why a bounded run would not write what the aligned run writes, naming the sink and
    the operator in its analyzed plan; None: it would write the same rows. One windowed or
    session aggregation per sink, with its end in the output, is the same: the aligned run
    writes the results whose end the final watermark has passed, and so does a bounded run
    (``Closing``); a group-by without a window end, or aggregations chained, is not."""
    for sink, plan in sorted(plans.items()):
        for pattern, what in _REFUSED:
            if re.search(pattern, plan):
                return f"sink {sink}'s pipeline has {what}"
        outer = next((kind for kind, both in joins(plan) if kind not in ("Inner", "Cross") and both), None)
        if outer is not None:
            return (
                f"sink {sink}'s pipeline has a {outer} join of two streams (its unmatched rows wait for the watermark)"
            )
        aggregates = len(_AGGREGATE.findall(plan))
        if aggregates > 1:
            return f"sink {sink}'s pipeline has {aggregates} aggregations chained (each emits on the watermark)"
        if aggregates == 1 and end_column(plan) is None:
            return (
                f"sink {sink}'s pipeline has an aggregation whose window or session end is not in its output "
                "(the watermark decides which of its results are written)"
            )
    return None


@dataclass(frozen=True)
class WatermarkInput:
    """A ``withWatermark`` on a source's own column: the final watermark is that column's
    newest value over the rows read, minus the delay."""

    source: str
    column: str
    delay_ms: int


@dataclass(frozen=True)
class Closing:
    """How a sink's results close (an aggregation that emits on the watermark): its end
    column, and the watermarks whose least is the final one."""

    end_column: str
    watermarks: tuple[WatermarkInput, ...]

    def final_watermark_us(self, newest_us: dict[tuple[str, str], int | None]) -> int | None:
        """Spark's global watermark after the last batch (policy min, over the operators that
        saw rows; event times in ms): results whose end is at or before it were written."""
        marks = [
            (newest // 1000 - w.delay_ms) * 1000
            for w in self.watermarks
            if (newest := newest_us.get((w.source, w.column))) is not None
        ]
        return max(min(marks), 0) if marks else None


def closings(outputs: dict[str, Any], frames: dict[str, dict[str, Any]]) -> dict[str, Closing | str]:
    """Per sink whose plan emits on the watermark: its ``Closing``, or why it has none (a
    watermark not on a source's own column: its newest value is not the history's)."""
    from spark_app.jvm.calls import analyzed_plan, watermarks
    from spark_app.window.horizon import emits_on_watermark

    out: dict[str, Closing | str] = {}
    for sink, df in outputs.items():
        plan = analyzed_plan(df)
        end = end_column(plan)
        if not emits_on_watermark(plan) or end is None:
            continue
        own = {analyzed_plan(frame): name for name, frame in frames[sink].items()}
        found: list[WatermarkInput] = []
        for mark in watermarks(df):
            source = own.get(mark.child)
            if source is None:
                out[sink] = f"sink {sink}'s watermark is not on a source's own column (set alignment.mode aligned)"
                break
            found.append(WatermarkInput(source, mark.column, mark.delay_ms))
        else:
            out[sink] = Closing(end, tuple(found)) if found else f"sink {sink}'s aggregation has no watermark"
    return out
