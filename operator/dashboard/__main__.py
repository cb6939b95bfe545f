"""`python -m kappa_operator.dashboard [--check] [--chart DIR]`: write the chart's dashboards
from the one definition, or (``--check``) say which file differs from what it generates."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kappa_operator.dashboard.definition import Dashboard, kappa_dashboard
from kappa_operator.dashboard.grafana import grafana_dashboard
from kappa_operator.dashboard.perses import perses_dashboard

CHART = Path(__file__).resolve().parents[2] / "charts" / "kappa-operator"


def generated(dashboard: Dashboard) -> dict[str, str]:
    """Each file under the chart's dashboards/ and its text."""
    return {
        "kappa.json": json.dumps(grafana_dashboard(dashboard), indent=2) + "\n",
        "kappa.perses.json": json.dumps(perses_dashboard(dashboard), indent=2) + "\n",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kappa_operator.dashboard", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    parser.add_argument("--chart", type=Path, default=CHART, help="the chart's directory")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generated(kappa_dashboard()).items():
        path = args.chart / "dashboards" / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    for path in stale:
        print(f"{path}: {'differs from' if args.check else 'written from'} operator/dashboard/kappa.yaml")
    if args.check and stale:
        print("run `python -m kappa_operator.dashboard` to write them", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
