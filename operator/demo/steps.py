"""Every step of the demo behind one rich progress display: a bar per step, fed by a poll of
what the step's job has done so far (committed batches, the group's global watermark), and a
failure that names the step.

Spark runs in a worker thread so the main thread can draw; Ctrl-C stops the active queries
instead of waiting for them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from spark_app.contract.errors import KappaError, user_message

T = TypeVar("T")

Poll = Callable[[], tuple[float, float | None, str]]
"""-> (completed, total or None when unknown, a short note)."""


class DemoError(KappaError):
    """A step failed, or the run's numbers contradict what the product promises."""


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("ch") else f"{n} {word}s"


def committed_batches(checkpoint: Path) -> int:
    """Batches a query has committed so far (``commits/N`` files of its checkpoint)."""
    commits = checkpoint / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0


def batches_poll(checkpoint: Path, expected: int | None, then: Callable[[], None] = lambda: None) -> Poll:
    """Progress of one query: its committed batches (of ``expected``, when known); ``then``
    runs first on every tick (the operator's snapshot timer in the rewind story)."""

    def poll() -> tuple[float, float | None, str]:
        then()
        done = committed_batches(checkpoint)
        return (min(done, expected) if expected else done), expected, plural(done, "batch")

    return poll


class Steps:
    """A transient bar while a step runs, then one permanent line: what it did and how long it
    took (so a log of a run reads in order, on a terminal or not)."""

    def __init__(self, console: Console, stop_work: Callable[[], None] = lambda: None) -> None:
        self.console = console
        self.stop_work = stop_work
        """Called on Ctrl-C (stops the running Spark queries)."""
        self.seconds: dict[str, float] = {}

    def print(self, text: str) -> None:
        self.console.print(text)

    def run(
        self,
        description: str,
        work: Callable[[], T],
        poll: Poll | None = None,
        detail: Callable[[T], str] | None = None,
        every: float = 0.25,
    ) -> T:
        """Run ``work`` in a worker thread, drawing ``poll`` until it ends; ``detail`` says what
        it did. Its failure becomes a DemoError naming this step."""
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("[dim]{task.fields[note]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,  # a log gets the one line per step below
        )
        started = time.monotonic()
        with progress, ThreadPoolExecutor(1, thread_name_prefix="kappa-demo") as pool:
            task = progress.add_task(description, total=None, note="")
            future: Future[T] = pool.submit(work)
            try:
                while not _wait(future, every):
                    if poll is not None:
                        done, total, note = poll()
                        progress.update(task, completed=done, total=total, note=note)
            except KeyboardInterrupt:
                self.stop_work()
                raise
            except Exception as exc:  # a poll failed: the step's own outcome decides
                progress.update(task, note=f"poll: {exc}")
                future.exception()
        seconds = time.monotonic() - started
        try:
            result = future.result()
        except Exception as exc:
            self.console.print(f"[red]✗[/] {seconds:5.1f}s  {description}")
            raise DemoError(f"{description}: {user_message(exc)}") from exc
        self.seconds[description] = seconds
        said = detail(result) if detail is not None else ""
        self.console.print(f"[green]✓[/] {seconds:5.1f}s  {description}{': ' + said if said else ''}")
        return result


def _wait(future: Future[T], seconds: float) -> bool:
    try:
        future.exception(timeout=seconds)
    except TimeoutError:
        return False
    return True


@contextmanager
def quiet(logger: str) -> Iterator[None]:
    """Keep ``logger``'s warnings off the console for a step (the demo says the same in its own
    lines, and Python's last-resort handler would print over the progress display); handlers a
    log configuration set up still get them."""
    log, handler = logging.getLogger(logger), logging.NullHandler()
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
