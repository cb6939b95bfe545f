"""A source's ``filter`` (Iceberg's expression syntax) as a Spark column, for the JVM read path.

The same text prunes files in the planner (pyiceberg's ``plan_files``) and drops rows in the
query: the expression is bound to the table's schema by pyiceberg, so literals are converted
to the column's type exactly as Iceberg converts them, then rebuilt as a Spark predicate. A
row whose column is null passes no comparison, as in Iceberg's own row filters.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyiceberg import types as it
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.literals import Literal
from pyiceberg.expressions.visitors import BoundBooleanExpressionVisitor, bind, visit
from pyiceberg.schema import Schema
from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_app.sources.iceberg.scan import row_filter


def _value(field_type: Any, value: Any) -> Column:
    """An Iceberg literal (its value in Iceberg's representation) as a Spark literal of the
    column's type: timestamps are microseconds and dates days since the epoch, never a
    datetime that Python would read in its own time zone."""
    if isinstance(field_type, it.TimestampType | it.TimestamptzType):
        return F.timestamp_micros(F.lit(value))
    if isinstance(field_type, it.DateType):
        return F.date_from_unix_date(F.lit(value))
    if isinstance(field_type, it.UUIDType):
        return F.lit(str(uuid.UUID(bytes=value) if isinstance(value, bytes) else value))
    return F.lit(value)


class _ToSpark(BoundBooleanExpressionVisitor[Column]):
    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def _col(self, term: Any) -> Column:
        return F.col(self.schema.find_column_name(term.ref().field.field_id) or term.ref().field.name)

    def _lit(self, term: Any, literal: Literal[Any]) -> Column:
        return _value(term.ref().field.field_type, literal.value)

    def visit_in(self, term: Any, literals: set[Any]) -> Column:
        t = term.ref().field.field_type
        return self._col(term).isin([_value(t, v) for v in sorted(literals, key=repr)])

    def visit_not_in(self, term: Any, literals: set[Any]) -> Column:
        return ~self.visit_in(term, literals)

    def visit_is_nan(self, term: Any) -> Column:
        return F.isnan(self._col(term))

    def visit_not_nan(self, term: Any) -> Column:
        return ~F.isnan(self._col(term))

    def visit_is_null(self, term: Any) -> Column:
        return self._col(term).isNull()

    def visit_not_null(self, term: Any) -> Column:
        return self._col(term).isNotNull()

    def visit_equal(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term) == self._lit(term, literal)

    def visit_not_equal(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term) != self._lit(term, literal)

    def visit_greater_than_or_equal(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term) >= self._lit(term, literal)

    def visit_greater_than(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term) > self._lit(term, literal)

    def visit_less_than(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term) < self._lit(term, literal)

    def visit_less_than_or_equal(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term) <= self._lit(term, literal)

    def visit_starts_with(self, term: Any, literal: Literal[Any]) -> Column:
        return self._col(term).startswith(str(literal.value))

    def visit_not_starts_with(self, term: Any, literal: Literal[Any]) -> Column:
        return ~self._col(term).startswith(str(literal.value))

    def visit_true(self) -> Column:
        return F.lit(True)

    def visit_false(self) -> Column:
        return F.lit(False)

    def visit_not(self, child_result: Column) -> Column:
        return ~child_result

    def visit_and(self, left_result: Column, right_result: Column) -> Column:
        return left_result & right_result

    def visit_or(self, left_result: Column, right_result: Column) -> Column:
        return left_result | right_result


def bound_filter(schema: Schema, text: str | None) -> BooleanExpression:
    return bind(schema, row_filter(text), case_sensitive=True)


def spark_filter(schema: Schema, text: str | None) -> Column | None:
    """The row filter ``text`` as a Spark predicate over the table's columns (None: no filter)."""
    if not text:
        return None
    return visit(bound_filter(schema, text), _ToSpark(schema))


def filter_columns(schema: Schema, text: str | None) -> set[str]:
    """Top-level columns the filter reads (the JVM reads them even when the output drops them)."""
    if not text:
        return set()
    from pyiceberg.expressions.visitors import extract_field_ids

    names = (schema.find_column_name(i) for i in extract_field_ids(bound_filter(schema, text)))
    return {n.split(".")[0] for n in names if n}
