"""The one dashboard definition and what each server is given from it: the chart's files are
what the definition generates (a hand edit of either fails here), and the Grafana and Perses
dashboards show the same panels, rows and queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kappa_operator.dashboard.__main__ import CHART, generated, main
from kappa_operator.dashboard.definition import Dashboard, Panel, Unit, kappa_dashboard
from kappa_operator.dashboard.grafana import grafana_dashboard
from kappa_operator.dashboard.perses import expression, panel_key, perses_dashboard


def test_the_charts_files_are_what_the_definition_generates() -> None:
    for name, text in generated(kappa_dashboard()).items():
        assert (CHART / "dashboards" / name).read_text() == text, (
            f"{name} differs from operator/dashboard/kappa.yaml: run `python -m kappa_operator.dashboard`"
        )


def test_check_names_a_drifted_file_and_writing_fixes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dashboards").mkdir()
    assert main(["--chart", str(tmp_path)]) == 0
    edited = tmp_path / "dashboards" / "kappa.perses.json"
    edited.write_text(edited.read_text().replace("Alignment lag per member", "Lag"))
    assert main(["--check", "--chart", str(tmp_path)]) == 1
    assert f"{edited}: differs" in capsys.readouterr().out
    assert main(["--chart", str(tmp_path)]) == 0 and main(["--check", "--chart", str(tmp_path)]) == 0


def test_both_servers_show_the_same_rows_panels_and_queries() -> None:
    definition = kappa_dashboard()
    grafana, perses = grafana_dashboard(definition), perses_dashboard(definition)
    rows = [p["title"] for p in grafana["panels"] if p["type"] == "row"]
    assert rows == [layout["spec"]["display"]["title"] for layout in perses["spec"]["layouts"]]
    grafana_panels = [p for p in grafana["panels"] if p["type"] != "row"]
    referenced = [item["content"]["$ref"] for layout in perses["spec"]["layouts"] for item in layout["spec"]["items"]]
    assert referenced == [f"#/spec/panels/{panel_key(p['title'])}" for p in grafana_panels]
    assert set(perses["spec"]["panels"]) == {panel_key(p["title"]) for p in grafana_panels}
    for panel, shown in zip(definition.panels(), grafana_panels, strict=True):
        in_perses = perses["spec"]["panels"][panel_key(panel.title)]["spec"]
        assert in_perses["display"]["name"] == shown["title"] == panel.title
        assert [q["spec"]["plugin"]["spec"]["query"] for q in in_perses["queries"]] == [
            expression(panel, q) for q in panel.queries
        ]
        assert [t["expr"].removesuffix(" * 1000") for t in shown["targets"]] == [q.expr for q in panel.queries]


def test_a_timestamp_panel_shows_dates_in_grafana_and_age_in_perses() -> None:
    definition = kappa_dashboard()
    (watermarks,) = [p for p in definition.panels() if p.title == "Member watermarks"]
    assert watermarks.unit is Unit.TIMESTAMP
    (grafana,) = [p for p in grafana_dashboard(definition)["panels"] if p["title"] == "Member watermarks"]
    assert grafana["fieldConfig"]["defaults"]["unit"] == "dateTimeAsIso"
    assert grafana["targets"][0]["expr"].endswith(" * 1000")
    perses = perses_dashboard(definition)["spec"]["panels"]["member-watermarks"]["spec"]
    assert perses["plugin"]["spec"]["yAxis"]["format"]["unit"] == "seconds"
    assert perses["queries"][0]["spec"]["plugin"]["spec"]["query"].startswith("time() - (")
    assert "behind now" in perses["display"]["description"]


def test_grafana_lays_two_panels_per_line_under_each_row() -> None:
    panels = grafana_dashboard(kappa_dashboard())["panels"]
    positions = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels]
    assert len(set(positions)) == len(positions)
    assert {p["gridPos"]["x"] for p in panels if p["type"] != "row"} == {0, 12}
    assert len({p["id"] for p in panels}) == len(panels)


def test_a_bad_definition_names_the_field() -> None:
    panel = {"title": "t", "description": "d", "unit": "furlongs", "queries": [{"expr": "up", "legend": "x"}]}
    with pytest.raises(ValidationError, match="unit"):
        Panel.model_validate(panel)
    with pytest.raises(ValidationError, match="queries"):
        Panel.model_validate({**panel, "unit": "seconds", "queries": []})
    same = {"title": "Same", "description": "d", "unit": "count", "queries": [{"expr": "up", "legend": "x"}]}
    twice = Dashboard.model_validate(
        {"name": "n", "title": "t", "description": "d", "tags": [], "refresh": "30s", "duration": "1h",
         "variables": [], "rows": [{"title": "r", "panels": [same, same]}]}
    )  # fmt: skip
    with pytest.raises(ValueError, match="share a title"):
        perses_dashboard(twice)


def test_the_perses_file_is_json_perses_reads() -> None:
    loaded = json.loads((CHART / "dashboards" / "kappa.perses.json").read_text())
    assert loaded["kind"] == "Dashboard" and loaded["metadata"]["project"] == "kappa"
    assert {v["spec"]["name"] for v in loaded["spec"]["variables"]} == {"group", "namespace"}
