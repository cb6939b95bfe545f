"""The dashboard as one definition (kappa.yaml beside this module), from which each dashboard
server's format is generated (``grafana``, ``perses``). Why one: two hand-kept copies drift, and
the panel a person looks at in Perses would then not be the one the chart tests check.

Its vocabulary is the operator's domain, not a server's: units are what the series measure
(``Unit``), a row is a group of panels, a query is PromQL with a legend. What a server cannot
show the same way (Perses has no date unit, no second axis) each renderer decides and documents."""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field


class Unit(StrEnum):
    """What a panel's series measure."""

    TIMESTAMP = "timestamp"  # Unix seconds: an event time
    SECONDS = "seconds"
    RATIO = "ratio"  # 0..1
    COUNT = "count"
    MULTIPLIER = "multiplier"  # event-time seconds per wall-clock second
    BYTES = "bytes"
    BYTES_PER_SECOND = "bytes_per_second"
    ROWS_PER_SECOND = "rows_per_second"
    REQUESTS_PER_SECOND = "requests_per_second"
    OPERATIONS_PER_SECOND = "operations_per_second"


LegendValue = Literal["last", "mean", "max"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Query(_Frozen):
    expr: str = Field(description="PromQL; may name the dashboard's variables and $__rate_interval")
    legend: str = Field(description="each series' name, with {{label}} placeholders")
    right_axis: str | None = Field(
        default=None, description="a label for a second axis this query is drawn on (a different unit)"
    )


class Panel(_Frozen):
    title: str
    description: str
    unit: Unit
    queries: tuple[Query, ...] = Field(min_length=1)
    min: float | None = None
    max: float | None = None
    stacked: bool = False
    legend_values: tuple[LegendValue, ...] = ("last",)


class Row(_Frozen):
    title: str
    panels: tuple[Panel, ...] = Field(min_length=1)


class Variable(_Frozen):
    """A multi-valued choice of one label's values, ``All`` included (then any value)."""

    name: str
    label: str
    metric: str = Field(description="the series whose label values are offered")
    label_name: str


class Dashboard(_Frozen):
    name: str
    title: str
    description: str
    tags: tuple[str, ...]
    refresh: str
    duration: str = Field(description="the time range shown when opened, back from now (6h)")
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...] = Field(min_length=1)

    def panels(self) -> list[Panel]:
        return [panel for row in self.rows for panel in row.panels]


@cache
def kappa_dashboard() -> Dashboard:
    """The chart's dashboard, from kappa.yaml."""
    text = resources.files(__package__).joinpath("kappa.yaml").read_text()
    return Dashboard.model_validate(yaml.safe_load(text))
