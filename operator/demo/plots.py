"""The demo's pictures, and the series they are drawn from (written beside them as JSON, so
every point in a PNG can be checked).

* ``watermarks.png``: per-source watermark, the group's global watermark and the drift bound
  over wall time, from the embedded coordinator's history of accepted reports; below it, the
  alignment lag (a source's watermark minus the global one).
* ``state.png``: rows held in Spark's state store after each micro-batch: the aligned backfill,
  the unordered one, and the live job for reference.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kappa_operator.coordinator.core import Accepted
from spark_app.apps.result import RunResult
from spark_app.contract.alignment import HELD

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _iso(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).isoformat()


def _source(member: str) -> str:
    return member.rsplit("/", 1)[-1]


def watermark_series(history: Iterable[Accepted]) -> dict[str, Any]:
    """Points are ``[wall seconds since the first report, value]``; watermarks as ISO times,
    lags in minutes. A source's watermark is the lower bound of its next split, which may start
    beyond global + maxDrift: that split waits, so a lag above maxDrift is a source being held.
    A finished member (no watermark) and a held group (a member has not
    reported yet) have no point."""
    rows = list(history)
    t0 = rows[0].now_us if rows else 0
    out: dict[str, Any] = {"sources": {}, "global": [], "bound": [], "lag_minutes": {}}
    for r in rows:
        t = round((r.now_us - t0) / 1e6, 3)
        if r.watermark is not None:
            out["sources"].setdefault(_source(r.member), []).append([t, _iso(r.watermark)])
        if r.global_watermark is None or r.global_watermark == HELD:
            continue
        out["global"].append([t, _iso(r.global_watermark)])
        if r.bound is not None:
            out["bound"].append([t, _iso(r.bound)])
        if r.watermark is not None:
            lag = (r.watermark - r.global_watermark) / 60e6
            out["lag_minutes"].setdefault(_source(r.member), []).append([t, round(lag, 3)])
    return out


def state_series(report: RunResult) -> list[list[int]]:
    """``[batch id, state rows]`` per micro-batch of a run (all its queries)."""
    return [
        [int(p["batchId"]), sum(int(op.get("numRowsTotal", 0)) for op in p.get("stateOperators", []))]
        for p in report.progress
        if "batchId" in p
    ]


def _dt(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def draw(out: Path, series: dict[str, Any]) -> dict[str, Path]:
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure

    wm = series["watermarks"]
    fig = Figure(figsize=(10, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    for name, points in sorted(wm["sources"].items()):
        top.step([p[0] for p in points], [_dt(p[1]) for p in points], where="post", label=f"{name} watermark")
    if wm["global"]:
        top.step([p[0] for p in wm["global"]], [_dt(p[1]) for p in wm["global"]], where="post", color="black",
                 linewidth=2, label="global watermark (min)")  # fmt: skip
    if wm["bound"]:
        top.step([p[0] for p in wm["bound"]], [_dt(p[1]) for p in wm["bound"]], where="post", color="grey",
                 linestyle="--", label="admission bound (global + maxDrift)")  # fmt: skip
    start, end = (_dt(t) for t in series["window"])
    for edge, label in ((start, "window start"), (end, "window end")):
        top.axhline(edge, color="tab:red", linewidth=0.8, linestyle=":")
        top.text(0.99, edge, label, transform=top.get_yaxis_transform(), fontsize=8, color="tab:red", ha="right")
    top.yaxis.set_major_formatter(DateFormatter("%H:%M", tz=UTC))
    top.set_ylabel("event time (UTC)")
    top.set_title(f"aligned backfill of {start:%H:%M}-{end:%H:%M}: watermarks through the coordinator")
    top.legend(fontsize=8, loc="upper left")
    for name, points in sorted(wm["lag_minutes"].items()):
        bottom.step([p[0] for p in points], [p[1] for p in points], where="post", label=name)
    bottom.axhline(series["max_drift_minutes"], color="grey", linestyle="--", label="maxDrift (admission limit)")
    bottom.set_ylabel("source - global watermark (min)")
    bottom.set_xlabel("wall seconds since the first report")
    bottom.set_title(
        "a source's watermark is the start of its next waiting split: above maxDrift it is being held back",
        fontsize=9,
    )
    bottom.legend(fontsize=8, loc="upper right")
    paths = {"watermarks": out / "watermarks.png", "state": out / "state.png"}
    fig.savefig(paths["watermarks"], dpi=100)

    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.subplots()
    for name, style in (("live", ":"), ("aligned", "-"), ("unaligned", "--")):
        points = series["state"][name]
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", linestyle=style, marker="o",
                markersize=3, label=f"{name} (peak {max((p[1] for p in points), default=0)})")  # fmt: skip
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("rows in state (join buffers)")
    peaks = {k: max((p[1] for p in series["state"][k]), default=0) for k in ("aligned", "unaligned")}
    saving = f": unaligned holds {peaks['unaligned'] / peaks['aligned']:.1f}x the rows" if peaks["aligned"] else ""
    ax.set_title(f"rmi state size: aligned vs unaligned backfill, live for reference{saving}")
    ax.legend(fontsize=9)
    fig.savefig(paths["state"], dpi=100)
    return paths


def write(
    out: Path,
    history: Iterable[Accepted],
    window: tuple[datetime, datetime],
    max_drift: timedelta,
    runs: dict[str, RunResult],
) -> dict[str, Path]:
    """Write ``plots.json`` and the PNGs drawn from it; returns every path written."""
    series = {
        "window": [window[0].isoformat(), window[1].isoformat()],
        "max_drift_minutes": max_drift.total_seconds() / 60,
        "watermarks": watermark_series(history),
        "state": {name: state_series(report) for name, report in runs.items()},
    }
    path = out / "plots.json"
    path.write_text(json.dumps(series, indent=1))
    return {"json": path, **draw(out, series)}
