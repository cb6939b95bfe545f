"""Spark's analyzed plan of a DataFrame, read through py4j in one place: the plan as text (what
the edges, the lateness guard and ``auto``'s proof match operators in), its root node (for a
walk over the tree), and the attribute ids of its leaf relations (which sources a pipeline's
output reads, and in what order Spark asks them for offsets)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame


def analyzed(df: DataFrame) -> Any:
    """The analyzed plan's root (a JVM ``LogicalPlan``): no data is read, no job runs."""
    return df._jdf.queryExecution().analyzed()


def analyzed_plan(df: DataFrame) -> str:
    """The analyzed plan as Spark prints it (``treeString``)."""
    return str(analyzed(df).toString())


def leaf_ids(df: DataFrame) -> list[set[int]]:
    """Expression ids of each leaf relation of the analyzed plan, in the plan's order (each
    ``load()`` makes a relation with fresh ids, so a frame is found in a plan by its ids)."""
    leaves = analyzed(df).collectLeaves()
    out = []
    for i in range(leaves.size()):
        output = leaves.apply(i).output()
        out.append({int(output.apply(j).exprId().id()) for j in range(output.size())})
    return out
