"""`kappa demo` without Spark: how a failure reaches the person running it (a message naming
the step or the broken promise, a non-zero exit), and the checks that decide it."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import kappa_operator.demo as demo
from kappa_operator.cli.commands import build_parser, main
from kappa_operator.demo import shapes
from kappa_operator.demo.jobs import START
from kappa_operator.demo.report import evaluate
from kappa_operator.demo.steps import DemoError, Steps
from spark_app.examples import windows


def test_flags() -> None:
    args = build_parser().parse_args(["demo", "--hours", "1", "--seed", "3", "--out", "x"])
    assert (args.hours, args.seed, args.out, args.max_drift) == (1.0, 3, Path("x"), "5m")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--hours", "0.1"], "--hours must be between"),
        (["--hours", "0.5"], "--hours must be between 0.75 and 48"),
        (["--max-drift", "0s"], "--max-drift must be > 0"),
        (["--max-drift", "5x"], "expected a duration"),
    ],
)
def test_bad_flags_are_refused_before_anything_runs(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *flags, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_a_failed_demo_exits_1_with_the_message_and_keeps_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(settings: demo.DemoSettings, console: Console) -> dict[str, Any]:
        settings.out.mkdir(parents=True)
        raise DemoError("backfill the window, aligned: the source is gone")

    monkeypatch.setattr(demo, "run_demo", broken)
    assert main(["demo", "--hours", "1", "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "kappa demo failed" in out and "the source is gone" in out
    assert "DemoError" in (tmp_path / "out" / "error.log").read_text()


def test_a_step_that_raises_names_the_step() -> None:
    console = Console(file=io.StringIO(), width=100)
    steps = Steps(console)

    def boom() -> None:
        raise RuntimeError("disk full\nJava stack ...")

    with pytest.raises(DemoError, match=r"^publish the branch: disk full$"):
        steps.run("publish the branch", boom)
    assert steps.run("count", lambda: 3, detail=lambda n: f"{n} things") == 3
    assert isinstance(console.file, io.StringIO)
    text = console.file.getvalue()
    assert re.search(r"✗ +[\d.]+s  publish the branch\n", text) and re.search(r"✓ +[\d.]+s  count: 3 things\n", text)


def _summary(**changes: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "backfill": {
            "dropped_by_watermark": 0,
            "vs_clean_replay": {"match_ratio": 1.0, "rows": 10},
            "output_rows": 10,
            "peak_state_rows": 5,
        },
        "unaligned": {"peak_state_rows": 8},
        "publish": {
            "rows_added": 10,
            "main_vs_clean_replay_window": {"match_ratio": 1.0},
            "main_vs_clean_replay_table": {"match_ratio": 1.0},
        },
        "rewind": {
            "restored_batch": 3,
            "restored_batch_committed_at": "2026-11-22T00:00:00+00:00",
            "outage_started": "2026-11-22T00:00:01+00:00",
            "restored_source_snapshot": 7,
            "last_good_source_snapshot": 7,
            "match_ratio": 1.0,
            "sessions_rows": 4,
            "clean_rows": 4,
        },
        "shapes": {
            "windows": _shape(rows=6, batch_rows=6, open_reported=0),
            "sessions": _shape(rows=4, batch_rows=7, open_reported=3),
        },
    }
    for path, value in changes.items():
        *parts, field = path.split("__")
        part = s
        for name in parts:
            part = part[name]
        part[field] = value
    return json.loads(json.dumps(s))


def _shape(rows: int, batch_rows: int, open_reported: int) -> dict[str, Any]:
    return {
        "rows": rows,
        "batch_rows": batch_rows,
        "matched": rows,
        "only_batch": batch_rows - rows,
        "only_backfill": 0,
        "duplicates": 0,
        "open_reported": open_reported,
        "final": open_reported == 0,
        "dropped_by_watermark": 0,
    }


def test_checks_hold_on_a_consistent_summary() -> None:
    assert all(c.ok for c in evaluate(_summary()))


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({"backfill__dropped_by_watermark": 3}, "no late drops"),
        ({"backfill__vs_clean_replay": {"match_ratio": 0.99, "rows": 10}}, "backfill = clean replay"),
        ({"publish__rows_added": 9}, "published the branch"),
        ({"publish__main_vs_clean_replay_table": {"match_ratio": 0.5}}, "main repaired"),
        ({"unaligned__peak_state_rows": 4}, "alignment bounds state"),
        ({"rewind__outage_started": "2026-11-21T23:59:59+00:00"}, "rewound to before the outage"),
        ({"rewind__restored_source_snapshot": 8}, "rewound to before the outage"),
        ({"rewind__clean_rows": 5}, "rewound sessions = clean run"),
        ({"shapes__windows__matched": 5}, "windows backfill = batch"),
        ({"shapes__windows__rows": 7}, "windows backfill = batch"),
        ({"shapes__windows__final": False}, "windows backfill = batch"),
        ({"shapes__windows__dropped_by_watermark": 1}, "windows backfill = batch"),
        ({"shapes__sessions__open_reported": 2}, "sessions backfill = batch, open counted"),
        ({"shapes__sessions__only_backfill": 1}, "sessions backfill = batch, open counted"),
        ({"shapes__sessions__duplicates": 1}, "sessions backfill = batch, open counted"),
        ({"shapes__sessions__final": True}, "sessions backfill = batch, open counted"),
    ],
)
def test_each_broken_promise_fails_its_check(change: dict[str, Any], failed: str) -> None:
    assert [c.name for c in evaluate(_summary(**change)) if not c.ok] == [failed]


@pytest.mark.parametrize("hours", [0.75, 1.0, 2.0, 48.0])
def test_the_shapes_window_is_in_the_middle_of_the_history_with_room_to_drain(hours: float) -> None:
    s = demo.DemoSettings(out=Path("out"), hours=hours)
    start, end = shapes.window(s)
    history_end = START + timedelta(hours=hours)
    assert START + shapes.LOOK_BACK <= start < end, "history before the window, the warm-up inside it"
    assert end + shapes.DRAIN + shapes.MARGIN <= history_end, "the drain reads history that exists"
    assert end - start >= timedelta(minutes=8) and start - START == (history_end - START) / 3
    cfg = shapes.job(s, windows)
    assert cfg.window is not None and cfg.window.warmup == shapes.LOOK_BACK and cfg.window.drain is None
    assert cfg.pipeline_args == {"lateness": "600 seconds"} and cfg.alignment.mode == "auto"
    assert cfg.sinks[windows.OUTPUT].time_column == windows.TIME_COLUMN
    assert shapes.DRAIN == shapes.LATENESS + shapes.LOOK_BACK
    assert cfg.alignment.max_drift < shapes.LATENESS, "room in the lateness guard for the split span"


def test_open_results_come_from_the_report_not_its_wording() -> None:
    """The count the runtime took from Spark's state (Edges.open_results), summed over sinks;
    none without edges."""
    edges = SimpleNamespace(
        notices=("not yet final: 4 windows or sessions of sessions ...", "not yet final: 2 windows or sessions ..."),
        open_results=6,
    )
    assert shapes.open_reported(SimpleNamespace(edges=edges)) == 6  # type: ignore[arg-type]
    assert shapes.open_reported(SimpleNamespace(edges=None)) == 0  # type: ignore[arg-type]
