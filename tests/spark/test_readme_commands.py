"""Issue 30 item 6: every `kappa` command the README and docs show is run here as written (only
the scratch directory replaced), in order, from the repository root: a newcomer's first hour
must not meet a command that fails. A command the suite cannot run on this machine is listed
with the reason and the test that covers it instead; a new command in the docs that is in
neither list fails this test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "charts" / "kappa-operator" / "README.md"]
SCRATCH = "/tmp/k"
NOT_HERE = {
    "kappa demo": "the demo itself: tests/spark/test_demo.py runs it (its own settings, same code)",
    "kappa operator": "runs until stopped, against a cluster: tests/cluster/test_operator_on_server.py",
    "kappa coordinator": "a long-running service: tests/unit/kappa_operator/coordinator/ and the cluster tests",
    "kappa kafka start": "a foreground broker: tests/conftest.py's kafka_broker fixture runs the same class",
    "kappa cluster": "a whole cluster, as root: tests/node starts the same LocalCluster",
}


SHOWS = {
    "kappa example-data /tmp/k": [
        r"ingest\.impressions \(160,000 rows\) and ingest\.playbacks \(40,000 rows\), 98 commits"
    ],
    "kappa plan examples/rmi-backfill.yaml": [
        r"mode\s+│\s+bounded, maxDrift 10m",
        r"expected micro-batches\s+│\s+1\s",
        r"read in total\s+│\s+113,304 rows",
        r"no warnings",
    ],
    "kappa run examples/rmi-streamingjob.yaml": [
        r"rmi\s+│\s+200000\s+│\s+1\s+│",
        r"StreamingJob default/rmi: Completed",
    ],
    "kappa checkpoints list": [r"│\s+0\s+│[^\n]*│\s+16\s+│", r"│\s+1\s+│[^\n]*│\s+26\s+│"],
    "kappa run examples/rmi-backfill.yaml": [
        r"rmi-outage\s+│\s+113226\s+│\s+1\s+│",
        r"auto ran bounded",
        r"Backfill default/rmi-outage: Succeeded published backfill-rmi-outage into main: "
        r"marts\.attributed_plays \(match 1\.0000",
    ],
    "kappa rewind examples/rmi-rewind.yaml": [
        r"refused: no restorable point: sink attributed_plays: no snapshot committed before"
    ],
    "kappa run examples/rmi-rewind.yaml": [
        r"restored attributed_plays at batch 1",
        r"Rewind default/rmi-before-outage: Succeeded rmi resumed from",
    ],
    "kappa example-data /tmp/k/insights": [
        r"ingest\.impressions \(40,000 rows\) and ingest\.playbacks \(10,000 rows\)"
    ],
    "kappa run examples/own-pipeline/watch-time-streamingjob.yaml": [
        r"watch-time\s+│\s+10000\s+│\s+1\s+│",
        r"StreamingJob player-insights/watch-time: Completed",
    ],
}
"""What each command must show (the docs' own words: the rows the examples' seeded data gives, a
Backfill that ends Succeeded, the dry run the README says is refused), by the longest prefix of
the command: a command that only exits 0 has not shown it did what the docs say."""


WIDE = {**os.environ, "COLUMNS": "200"}
"""A console wide enough that rich wraps none of what ``SHOWS`` reads (80 columns when not a terminal)."""


def shows(command: str) -> list[str]:
    prefixes = [k for k in SHOWS if command == k or command.startswith(k + " ")]
    assert prefixes, f"{command!r}: say in SHOWS what it must show (a documented command no test reads)"
    return SHOWS[max(prefixes, key=len)]


def documented_commands() -> list[str]:
    """`kappa ...` lines of the docs' shell blocks, comments dropped, in document order."""
    found: list[str] = []
    for doc in DOCS:
        if not doc.exists():
            continue
        # every fenced block in order (a yaml block must not shift the pairing), shell ones kept
        for lang, block in re.findall(r"^[ \t]*```([A-Za-z]*)\n(.*?)^[ \t]*```", doc.read_text(), re.S | re.M):
            if lang not in ("", "bash", "sh", "console"):
                continue
            for line in block.splitlines():
                command = line.split("  #", 1)[0].strip()
                if re.match(r"^kappa [a-z]", command) and not command.endswith(":") and ": " not in command:
                    found.append(command)
    return found


def exempt(command: str) -> bool:
    return any(command == k or command.startswith(k + " ") for k in NOT_HERE)


def test_every_documented_command_runs(tmp_path: Path) -> None:
    commands = documented_commands()
    # a command shown twice (the README and a doc repeat a step) runs once: it is the same command
    runnable = list(dict.fromkeys(c for c in commands if not exempt(c)))
    assert any(c.startswith("kappa example-data") for c in runnable), "the README's newcomer path is found"
    kappa = str(Path(sys.executable).parent / "kappa")
    scratch = str(tmp_path / "k")
    for command in runnable:
        argv = [kappa, *shlex.split(command.replace(SCRATCH, scratch))[1:]]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, env=WIDE)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        # issue 44: a run ended with a Py4J error and a Java trace after its last line
        assert "Py4JException" not in done.stderr + done.stdout, f"{command}\n{done.stderr[-3000:]}"
        missing = [pattern for pattern in shows(command) if not re.search(pattern, done.stdout)]
        assert not missing, f"{command} did not show {missing}:\n{done.stdout[-4000:]}"
