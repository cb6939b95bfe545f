"""`kappa demo`: the product's story on an embedded catalog, in one command.

An rmi StreamingJob runs live into an Iceberg table; an outage leaves a window of its output
missing or corrupt; a Backfill re-reads that window from the Iceberg history, aligned through
the embedded watermark coordinator, into a branch that is validated against the clean replay
and published; a Rewind takes the stateful sessions job back to a checkpoint from before the
outage. Then a summary table, plots and summary.json, every number computed by the run.
"""

from kappa_operator.demo.jobs import DemoSettings
from kappa_operator.demo.steps import DemoError
from kappa_operator.demo.story import run_demo

__all__ = ["DemoError", "DemoSettings", "run_demo"]
