"""The dashboard as Grafana's JSON model (schemaVersion 39), for Grafana's dashboard sidecar.

Two panels side by side under each row; a ``timestamp`` panel's series are scaled to the
milliseconds Grafana's date unit reads; a query with ``right_axis`` is drawn on a second axis.
Pure: the definition in, a dict out."""

from __future__ import annotations

from typing import Any

from kappa_operator.dashboard.definition import Dashboard, Panel, Query, Unit

UNITS = {
    Unit.TIMESTAMP: "dateTimeAsIso",
    Unit.SECONDS: "s",
    Unit.RATIO: "percentunit",
    Unit.COUNT: "short",
    Unit.MULTIPLIER: "x",
    Unit.BYTES: "bytes",
    Unit.BYTES_PER_SECOND: "Bps",
    Unit.ROWS_PER_SECOND: "rowsps",
    Unit.REQUESTS_PER_SECOND: "reqps",
    Unit.OPERATIONS_PER_SECOND: "ops",
}
CALCS = {"last": "lastNotNull", "mean": "mean", "max": "max"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH, HEIGHT, COLUMNS = 12, 8, 2


def _expr(panel: Panel, query: Query) -> str:
    return f"{query.expr} * 1000" if panel.unit is Unit.TIMESTAMP else query.expr


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": UNITS[panel.unit],
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 60 if panel.stacked else 10,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        },
    }
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    ref_ids = [chr(ord("A") + i) for i in range(len(panel.queries))]
    overrides = [
        {
            "matcher": {"id": "byFrameRefID", "options": ref_id},
            "properties": [
                {"id": "unit", "value": "none"},
                {"id": "custom.axisPlacement", "value": "right"},
                {"id": "custom.axisLabel", "value": query.right_axis},
            ],
        }
        for ref_id, query in zip(ref_ids, panel.queries, strict=True)
        if query.right_axis
    ]
    return {
        "type": "timeseries",
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": HEIGHT, "w": WIDTH, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
                "calcs": [CALCS[v] for v in panel.legend_values],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {"refId": ref, "datasource": DATASOURCE, "expr": _expr(panel, q), "legendFormat": q.legend, "range": True}
            for ref, q in zip(ref_ids, panel.queries, strict=True)
        ],
    }


def grafana_dashboard(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row in dashboard.rows:
        panels.append(
            {
                "type": "row",
                "id": len(panels) + 1,
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for index, panel in enumerate(row.panels):
            x = (index % COLUMNS) * WIDTH
            panels.append(_panel(panel, len(panels) + 1, x, y))
            if x + WIDTH >= COLUMNS * WIDTH or index == len(row.panels) - 1:
                y += HEIGHT
    variables: list[dict[str, Any]] = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "options": [],
        }
    ]
    for variable in dashboard.variables:
        values = f"label_values({variable.metric}, {variable.label_name})"
        variables.append(
            {
                "name": variable.name,
                "label": variable.label,
                "type": "query",
                "datasource": DATASOURCE,
                "query": {"query": values, "refId": variable.name},
                "definition": values,
                "includeAll": True,
                "multi": True,
                "allValue": ".*",
                "current": {},
                "refresh": 2,
                "sort": 1,
                "options": [],
            }
        )
    return {
        "title": dashboard.title,
        "uid": dashboard.name,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "editable": True,
        "graphTooltip": 1,
        "refresh": dashboard.refresh,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": f"now-{dashboard.duration}", "to": "now"},
        "timezone": "utc",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": variables},
        "panels": panels,
    }
