"""What `kappa run` shows: phase transitions as the operator records them, a spinner with live
progress while Spark runs (as `kappa demo` does), summary tables and the final status, which is
what `kubectl get -o yaml` would show of the object."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kappa_operator.local.overrides import Mapped
from kappa_operator.models.backfill import PublishedTable
from kappa_operator.models.rewind import SinkRestore
from spark_app.apps.result import RunResult

PHASE_STYLE = {"Succeeded": "green", "Completed": "green", "Failed": "red", "Rewinding": "yellow"}


class Display:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._last: dict[str, tuple[Any, Any]] = {}

    def print(self, text: str) -> None:
        self.console.print(text)

    def note(self, text: str) -> None:
        self.console.print(f"[dim]{escape(text)}[/]")

    def error(self, text: str) -> None:
        self.console.print(f"[red]error:[/] {escape(text)}")

    def phase(self, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """One line per change of phase or message, as `kubectl get -w` would show it."""
        key = f"{kind}/{namespace}/{name}"
        now = (status.get("phase"), status.get("message"))
        if now == self._last.get(key) or now[0] is None:
            return
        self._last[key] = now
        style = PHASE_STYLE.get(str(now[0]), "cyan")
        self.console.print(f"[bold]{kind}[/] {namespace}/{name}: [{style}]{now[0]}[/] {escape(str(now[1] or ''))}")

    def mapping(self, root: str, rows: tuple[Mapped, ...]) -> None:
        table = Table(title=f"--local {root}: the manifest is unchanged; where its catalogs and locations live here")
        for col in ("field", "manifest", "local"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(f"spec.{r.field}", r.manifest, r.local)
        self.console.print(table)

    def notes(self, title: str, lines: list[str]) -> None:
        if lines:
            self.console.print(f"[bold]{escape(title)}[/]: " + "; ".join(escape(x) for x in lines))

    def runs(self, title: str, runs: list[tuple[str, RunResult]]) -> None:
        """The same columns as `kappa demo`'s table."""
        table = Table(title=title)
        for col in ("run", "rows", "batches", "wall s", "rows/s", "late drops", "peak state", "end wm"):
            table.add_column(col, justify="left" if col == "run" else "right")
        for label, rep in runs:
            d = rep.summary()
            table.add_row(
                label,
                str(d["input_rows"]),
                str(d["batches"]),
                f"{d['seconds']:.1f}",
                f"{d['rows_per_s'] or 0:.0f}",
                str(d["dropped_by_watermark"]),
                str(d["peak_state_rows"]),
                str(d["last_watermark"] or "-"),
            )
        self.console.print(table)
        for label, rep in runs:
            if rep.mode_choice is not None and rep.mode_choice.requested == "auto":  # status.alignmentMode
                choice = rep.mode_choice
                self.console.print(f"alignment mode ({escape(label)}): auto ran {choice.mode}: {escape(choice.reason)}")
        for label, rep in runs:
            c = rep.external_calls
            if c is not None:  # spec.externalCalls: what the limit did (status.externalCalls on a cluster)
                self.console.print(
                    f"external calls ({escape(label)}): {c.calls} at most {c.rate_per_second:g}/s for the whole job, "
                    f"{c.calls / c.seconds if c.seconds else 0:.1f}/s over the run, waited {c.waited_seconds:.1f} s"
                )

    def points(self, title: str, points: list[dict[str, Any]]) -> None:
        table = Table(title=title)
        for col in ("sink", "batch", "committed (UTC)", "watermark"):
            table.add_column(col, justify="right" if col == "batch" else "left")
        for p in points:
            table.add_row(p["sink"], str(p["batchId"]), p["committedAt"], p.get("watermark") or "-")
        self.console.print(table)

    def published(self, results: list[PublishedTable]) -> None:
        table = Table(title="published: the branch validated against main over the window, then main's window replaced")
        for col in ("table", "match ratio", "rows removed", "rows added", "snapshot"):
            table.add_column(col, justify="left" if col == "table" else "right")
        for r in results:
            table.add_row(r.table, f"{r.match_ratio:.6f}", str(r.rows_removed), str(r.rows_added), str(r.snapshot_id))
        self.console.print(table)

    def restores(self, restores: list[SinkRestore], location: str | None) -> None:
        table = Table(title=f"restored into {location} (the live checkpoint was only read)")
        for col in ("sink", "restored batch", "committed (UTC)", "resumes at", "table reset", "files removed"):
            table.add_column(col, justify="left" if col in ("sink", "committed (UTC)", "table reset") else "right")
        for r in restores:
            removed = "-" if r.files_removed is None else str(r.files_removed)
            table.add_row(r.sink, str(r.batch_id), r.committed_at, str(r.batch_id + 1), r.table or "-", removed)
        self.console.print(table)

    def status(self, kind: str, name: str, status: dict[str, Any]) -> None:
        self.console.print(f"[bold]{kind} {name}[/] status (what `kubectl get -o yaml` would show):")
        shown = {k: v for k, v in status.items() if k != "conditions"}
        shown["conditions"] = [
            f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in status.get("conditions") or []
        ]
        self.console.print(escape(yaml.safe_dump(shown, sort_keys=False, width=200)).rstrip())

    @contextmanager
    def ticking(self, text: str, tick: Callable[[], str | None], every: float = 0.5) -> Iterator[None]:
        """A spinner whose text ``tick()`` refreshes from another thread while the caller runs."""
        stop = threading.Event()
        with self.console.status(escape(text)) as spinner:

            def loop() -> None:
                while not stop.wait(every):
                    try:
                        line = tick()
                    except Exception:  # what is shown must never fail the run it shows
                        line = None
                    if line:
                        spinner.update(escape(line))

            thread = threading.Thread(target=loop, name="kappa-run-progress", daemon=True)
            thread.start()
            try:
                yield
            finally:
                stop.set()
                thread.join(timeout=5)
