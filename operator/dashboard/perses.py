"""The dashboard as a Perses resource (Dashboard, v1 API; Perses v0.52 with its Prometheus and
TimeSeriesChart plugins), which the local cluster's Perses is provisioned with.

Each row is a Grid layout (a collapsible group), two panels side by side. Perses formats no
dates, so a ``timestamp`` panel shows how far behind now each series is (``time() - x``, in
seconds) and says so in its description; it has one y axis, so a query with ``right_axis``
shares it (its legend names what it counts). Queries name no datasource: the project's default
(the cluster's Prometheus) answers them. Pure: the definition in, a dict out."""

from __future__ import annotations

import re
from typing import Any

from kappa_operator.dashboard.definition import Dashboard, Panel, Query, Unit

PROJECT = "kappa"
"""The Perses project the dashboard belongs to."""
UNITS: dict[Unit, str] = {
    Unit.TIMESTAMP: "seconds",
    Unit.SECONDS: "seconds",
    Unit.RATIO: "percent-decimal",
    Unit.COUNT: "decimal",
    Unit.MULTIPLIER: "decimal",
    Unit.BYTES: "bytes",
    Unit.BYTES_PER_SECOND: "bytes/sec",
    Unit.ROWS_PER_SECOND: "rows/sec",
    Unit.REQUESTS_PER_SECOND: "requests/sec",
    Unit.OPERATIONS_PER_SECOND: "ops/sec",
}
VALUES = {"last": "last-number", "mean": "mean", "max": "max"}
BEHIND_NOW = " Shown as how far behind now it is (Perses formats no dates)."
WIDTH, HEIGHT, COLUMNS = 12, 8, 2


def panel_key(title: str) -> str:
    """A panel's key in ``spec.panels`` (and its ``$ref``): its title, slugged (a row's
    screenshot is named so too, ``harness/browser.py``)."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def expression(panel: Panel, query: Query) -> str:
    """The PromQL Perses runs for ``query`` (the definition's, or its age for a timestamp)."""
    return f"time() - ({query.expr})" if panel.unit is Unit.TIMESTAMP else query.expr


def _legend(query: Query) -> str:
    return f"{query.legend} ({query.right_axis})" if query.right_axis else query.legend


def _panel(panel: Panel) -> dict[str, Any]:
    y_axis: dict[str, Any] = {"format": {"unit": UNITS[panel.unit]}}
    if panel.min is not None:
        y_axis["min"] = panel.min
    if panel.max is not None:
        y_axis["max"] = panel.max
    chart: dict[str, Any] = {
        "legend": {"position": "bottom", "mode": "table", "values": [VALUES[v] for v in panel.legend_values]},
        "yAxis": y_axis,
        "visual": {"display": "line", "lineWidth": 1.25, "areaOpacity": 0.6 if panel.stacked else 0.1}
        | ({"stack": "all"} if panel.stacked else {}),
    }
    description = panel.description + (BEHIND_NOW if panel.unit is Unit.TIMESTAMP else "")
    return {
        "kind": "Panel",
        "spec": {
            "display": {"name": panel.title, "description": description},
            "plugin": {"kind": "TimeSeriesChart", "spec": chart},
            "queries": [
                {
                    "kind": "TimeSeriesQuery",
                    "spec": {
                        "plugin": {
                            "kind": "PrometheusTimeSeriesQuery",
                            "spec": {"query": expression(panel, q), "seriesNameFormat": _legend(q)},
                        }
                    },
                }
                for q in panel.queries
            ],
        },
    }


def perses_dashboard(dashboard: Dashboard) -> dict[str, Any]:
    panels = {panel_key(p.title): _panel(p) for p in dashboard.panels()}
    if len(panels) != len(dashboard.panels()):
        raise ValueError("two panels of the dashboard share a title: Perses keys its panels by it")
    layouts = [
        {
            "kind": "Grid",
            "spec": {
                "display": {"title": row.title, "collapse": {"open": True}},
                "items": [
                    {
                        "x": (index % COLUMNS) * WIDTH,
                        "y": (index // COLUMNS) * HEIGHT,
                        "width": WIDTH,
                        "height": HEIGHT,
                        "content": {"$ref": f"#/spec/panels/{panel_key(panel.title)}"},
                    }
                    for index, panel in enumerate(row.panels)
                ],
            },
        }
        for row in dashboard.rows
    ]
    variables = [
        {
            "kind": "ListVariable",
            "spec": {
                "name": v.name,
                "display": {"name": v.label, "hidden": False},
                "allowAllValue": True,
                "allowMultiple": True,
                "customAllValue": ".*",
                "defaultValue": "$__all",
                "plugin": {
                    "kind": "PrometheusLabelValuesVariable",
                    "spec": {"labelName": v.label_name, "matchers": [v.metric]},
                },
            },
        }
        for v in dashboard.variables
    ]
    return {
        "kind": "Dashboard",
        "metadata": {"name": dashboard.name, "project": PROJECT},
        "spec": {
            "display": {"name": dashboard.title, "description": dashboard.description},
            "duration": dashboard.duration,
            "refreshInterval": dashboard.refresh,
            "variables": variables,
            "panels": panels,
            "layouts": layouts,
        },
    }
