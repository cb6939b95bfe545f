"""What the READMEs show of the installed operator matches what it really prints (issue 14,
defect 10): the `kubectl get bf` sample is the Backfill CRD's printer columns."""

from __future__ import annotations

import re

from kappa_operator.models.crd import KINDS
from tests.chart.test_chart import ROOT


def header(command: str) -> list[str]:
    """The column names printed under ``command`` in the README's sample (split on 2+ spaces)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith(command)]
    return re.split(r"\s{2,}", lines[at + 1].strip())


def test_kubectl_get_bf_sample_shows_the_printer_columns() -> None:
    (backfill,) = [k for k in KINDS if k.plural == "backfills"]
    default = ["NAME", *(c["name"].upper() for c in backfill.columns if not c.get("priority"))]
    wide = ["NAME", *(c["name"].upper() for c in backfill.columns)]
    assert header("kubectl get bf -w") == default
    assert header("kubectl get bf -o wide") == wide
    assert set(wide) - set(default) == {"QUEUE", "READ RATE", "PRIORITY", "JOB", "BRANCH", "CALLS/S"}
