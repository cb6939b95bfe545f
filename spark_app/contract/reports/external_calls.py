"""What a run's external calls did, left next to its checkpoint for the operator
(``_kappa/external-calls.json``): the limit in force, calls made, the rate over the last
30 s, and the time the pipeline spent waiting for the limit.

The operator shows it in the StreamingJob's or Backfill's ``status.externalCalls`` and reads
it without Spark (a few hundred bytes, when the job has a limit)."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from spark_app.contract.storage import REPORT_DIR, Location, open_location

REPORT_NAME = "external-calls.json"
EVERY_S = 5.0
"""The report is rewritten this often while the run calls (and when it ends)."""
log = logging.getLogger("kappa.external_calls")


class ExternalCallsReport(BaseModel):
    """One run's external calls, as its driver's lease server counted them."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    rate_per_second: float
    """The limit in force for the run (calls per second, the whole job)."""
    observed_per_second: float
    """Calls per second over the last 30 s (from the executors' counts, told within ~1 s)."""
    calls: int
    """Calls made so far in this run."""
    granted: int
    """Tokens the limit handed out (calls made, lost to expiry, or not used yet)."""
    expired: int
    """Tokens not used in their slot (the limit's throughput nobody took)."""
    waited_seconds: float
    """Seconds the pipeline's calls waited for the limit, summed over every task."""
    seconds: float
    """Since the run's lease server started."""
    at: datetime
    """When the driver wrote it."""


def report_location(checkpoint: str) -> Location:
    return open_location(f"{checkpoint.rstrip('/')}/{REPORT_DIR}")


def read_report(checkpoint: str) -> ExternalCallsReport | None:
    """The report under a run's checkpoint (None: none, or unreadable: said in the log)."""
    return read_report_at(report_location(checkpoint))


def read_report_at(loc: Location) -> ExternalCallsReport | None:
    """The report in a run's ``_kappa`` directory, already opened (the caller chose how)."""
    if loc.stat(REPORT_NAME) is None:
        return None
    try:
        return ExternalCallsReport.model_validate_json(loc.read_bytes(REPORT_NAME))
    except ValueError:
        log.warning("unreadable external-calls report under %s", loc.uri, exc_info=True)
        return None


class ReportWriter:
    """Writes the lease server's counts every ``EVERY_S`` seconds on a thread of its own (a
    storage hiccup is a log line, never a failed query), and once more at the end."""

    def __init__(self, checkpoint: str, snapshot: Any) -> None:
        self.location = report_location(checkpoint)
        self.snapshot = snapshot
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kappa-external-calls-report", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(EVERY_S):
            self.write()

    def write(self) -> ExternalCallsReport:
        report = ExternalCallsReport.model_validate({**self.snapshot(), "at": datetime.now(UTC)})
        try:
            self.location.write_bytes(REPORT_NAME, report.model_dump_json(by_alias=True).encode())
        except Exception:
            log.warning("could not write the external-calls report", exc_info=True)
        return report

    def stop(self) -> ExternalCallsReport:
        self._stop.set()
        self._thread.join(timeout=EVERY_S)
        return self.write()
