"""What the demo prints, and the promises it checks (a failed one makes ``kappa demo`` exit 1).

Everything here reads the summary dict, which is built only from the run's own reports,
tables and traces: the table cannot show a number the run did not produce."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from rich import box
from rich.console import Console
from rich.table import Table


class Check(NamedTuple):
    name: str
    ok: bool
    detail: str


def evaluate(s: dict[str, Any]) -> list[Check]:
    bf, un, pub, rw = s["backfill"], s["unaligned"], s["publish"], s["rewind"]
    restored_at = datetime.fromisoformat(rw["restored_batch_committed_at"])
    return [*_rmi_checks(bf, un, pub, rw, restored_at), *_shape_checks(s["shapes"])]


def _rmi_checks(
    bf: dict[str, Any], un: dict[str, Any], pub: dict[str, Any], rw: dict[str, Any], restored_at: datetime
) -> list[Check]:
    return [
        Check(
            "no late drops",
            bf["dropped_by_watermark"] == 0,
            f"the aligned backfill dropped {bf['dropped_by_watermark']} rows",
        ),
        Check(
            "backfill = clean replay",
            bf["vs_clean_replay"]["match_ratio"] == 1.0,
            f"match {bf['vs_clean_replay']['match_ratio']:.4f} over the window",
        ),
        Check(
            "published the branch",
            pub["rows_added"] == bf["vs_clean_replay"]["rows"] == bf["output_rows"],
            f"+{pub['rows_added']} rows = the branch's {bf['vs_clean_replay']['rows']} = {bf['output_rows']} committed",
        ),
        Check(
            "main repaired",
            pub["main_vs_clean_replay_window"]["match_ratio"] == 1.0
            and pub["main_vs_clean_replay_table"]["match_ratio"] == 1.0,
            f"match {pub['main_vs_clean_replay_window']['match_ratio']:.4f} (window), "
            f"{pub['main_vs_clean_replay_table']['match_ratio']:.4f} (table)",
        ),
        Check(
            "alignment bounds state",
            bf["peak_state_rows"] <= un["peak_state_rows"],
            f"peak state {bf['peak_state_rows']} aligned, {un['peak_state_rows']} unaligned"
            + (f" ({un['peak_state_rows'] / bf['peak_state_rows']:.1f}x)" if bf["peak_state_rows"] else ""),
        ),
        Check(
            "rewound to before the outage",
            restored_at < datetime.fromisoformat(rw["outage_started"])
            and rw["restored_source_snapshot"] == rw["last_good_source_snapshot"],
            f"batch {rw['restored_batch']}, read up to the last good commit",
        ),
        Check(
            "rewound sessions = clean run",
            rw["match_ratio"] == 1.0 and rw["sessions_rows"] == rw["clean_rows"],
            f"{rw['sessions_rows']} sessions vs {rw['clean_rows']}, match {rw['match_ratio']:.4f}",
        ),
    ]


def _shape_checks(sh: dict[str, Any]) -> list[Check]:
    """Every example shape backfilled and compared with the batch computation of its pipeline
    over the whole history: windows equal it; sessions are a part of it, and what is missing is
    exactly what the run reported still open (nothing lost silently)."""
    w, se = sh["windows"], sh["sessions"]
    clean = [r["only_backfill"] == 0 and r["duplicates"] == 0 and r["dropped_by_watermark"] == 0 for r in (w, se)]
    return [
        Check(
            "windows backfill = batch",
            clean[0]
            and w["rows"] == w["matched"] == w["batch_rows"] > 0
            and w["open_reported"] == 0
            and w["final"] is True,
            f"{w['matched']} of {w['batch_rows']} equal, {w['rows']} written, {'final' if w['final'] else 'NOT final'}",
        ),
        Check(
            "sessions backfill = batch, open counted",
            clean[1]
            and se["rows"] == se["matched"] > 0
            and se["only_batch"] == se["open_reported"]
            and se["final"] is (se["open_reported"] == 0),
            f"{se['matched']} of {se['batch_rows']} equal, {se['rows']} written; {se['only_batch']} open at the "
            f"end, {se['open_reported']} reported",
        ),
    ]


def _n(value: Any) -> str:
    return "—" if value is None else str(value)


def print_report(console: Console, s: dict[str, Any]) -> None:
    table = Table(title="kappa demo: rmi, sessions and windows", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("run", no_wrap=True)
    for col in ("rows\nin", "rows\nout", "wall\ns", "event-h/\nwall-h", "peak\nstate"):
        table.add_column(col, justify="right")
    table.add_column("late\ndrops", justify="right")
    table.add_column("match", justify="right")
    rw, bf, un, sh = s["rewind"], s["backfill"], s["unaligned"], s["shapes"]
    shapes = [(k, sh[k]) for k in ("windows", "sessions")]
    runs = [
        ("rmi live", s["live"], s["live"]["output_rows"], None, None),
        ("backfill aligned", bf, bf["output_rows"], bf["event_hours_per_wall_hour"], _match(bf)),
        ("backfill unordered", un, un["output_rows"], un["event_hours_per_wall_hour"], _match(un)),
        ("sessions outage", rw["outage"], None, None, None),
        ("sessions rewound", rw["resumed"], rw["sessions_rows"], None, rw["match_ratio"]),
        *((f"{k} backfill", r, r["rows"], r["event_hours_per_wall_hour"], r["match_ratio"]) for k, r in shapes),
    ]
    for label, run, out, rate, match in runs:
        table.add_row(
            label,
            _n(run["input_rows"]),
            _n(out),
            f"{run['seconds']:.1f}",
            _n(rate),
            _n(run["peak_state_rows"]),
            _n(run["dropped_by_watermark"]),
            "—" if match is None else f"{match:.4f}",
        )
    console.print(table)
    pub, out, w, sw = s["publish"], s["outage"], s["window"], sh["window"]
    lines = [
        f"window {w['start'][11:16]}-{w['end'][11:16]} (warm-up {w['warmup']}); match = share of rows equal to the",
        "clean replay (the live output before the outage; for sessions, a clean run)",
        f"outage: {out['missing_rows']} rows missing, {out['corrupted_rows']} corrupt (main matched the backfill at "
        f"{out['main_vs_backfill_before_publish']['match_ratio']:.4f})",
        f"publish: -{pub['rows_removed']} +{pub['rows_added']} rows in one snapshot; main = clean replay: "
        f"{pub['main_vs_clean_replay_table']['match_ratio']:.4f}",
        f"alignment: {bf['throttled_decisions']}/{bf['admission_decisions']} admissions throttled, "
        f"{bf['coordinator_reports']} coordinator reports",
        f"guard: {bf['lateness_guard']}",
        f"rewind: outage began {_time(rw['outage_started'])}, restored batch {rw['restored_batch']} committed "
        f"{_time(rw['restored_batch_committed_at'])}",
        f"  (of {rw['snapshots_externalized']} snapshots); undid batches {_span(rw['undone_batches'])} "
        f"(-{rw['rows_undone']} rows); {rw['bad_rows_before_rewind']} sessions wrong before",
        f"windows, sessions: {sw['start'][11:16]}-{sw['end'][11:16]}, warm-up {sw['warmup']}, drain "
        f"{sw['drain']} (lateness {sw['lateness']} + {sw['look_ahead']});",
        "  match = share of the batch rows (the same pipeline over the whole history);",
        f"  {sh['sessions']['open_reported']} sessions still open when reading stopped: not written, reported",
    ]
    for line in lines:
        console.print(line, highlight=False)
    for c in s["checks"]:
        mark = "[green]ok[/]" if c["ok"] else "[red]FAILED[/]"
        console.print(f"{mark} {c['name']}: {c['detail']}")
    plots = {k: Path(p).name for k, p in s["plots"].items()}
    console.print(f"plots: {plots['watermarks']}, {plots['state']} (series in {plots['json']})")
    console.print(f"all under {s['settings']['out']} (summary.json); {s['wall_seconds']:.0f} s in all")


def _match(run: dict[str, Any]) -> float:
    return float(run["vs_clean_replay"]["match_ratio"])


def _time(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime("%H:%M:%S.%f")[:-3]


def _span(ids: list[int]) -> str:
    return "none" if not ids else f"{min(ids)}..{max(ids)}" if len(ids) > 1 else str(ids[0])
