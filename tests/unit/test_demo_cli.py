"""`kappa demo` without Spark: how a failure reaches the person running it (a message naming
the step or the broken promise, a non-zero exit), and the checks that decide it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import kappa_operator.demo as demo
from kappa_operator.cli import build_parser, main
from kappa_operator.demo.report import evaluate
from kappa_operator.demo.steps import DemoError, Steps


def test_flags() -> None:
    args = build_parser().parse_args(["demo", "--hours", "1", "--seed", "3", "--out", "x"])
    assert (args.hours, args.seed, args.out, args.max_drift) == (1.0, 3, Path("x"), "5m")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--hours", "0.1"], "--hours must be between"),
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
    }
    for path, value in changes.items():
        part, field = path.split("__")
        s[part][field] = value
    return json.loads(json.dumps(s))


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
    ],
)
def test_each_broken_promise_fails_its_check(change: dict[str, Any], failed: str) -> None:
    assert [c.name for c in evaluate(_summary(**change)) if not c.ok] == [failed]
