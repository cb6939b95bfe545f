"""Issue 30 item 6: every `kappa` command the README and docs show is run here as written (only
the scratch directory replaced), in order, from the repository root: a newcomer's first hour
must not meet a command that fails. A command the suite cannot run on this machine is listed
with the reason and the test that covers it instead; a new command in the docs that is in
neither list fails this test."""

from __future__ import annotations

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
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        # issue 44: a run ended with a Py4J error and a Java trace after its last line
        assert "Py4JException" not in done.stderr + done.stdout, f"{command}\n{done.stderr[-3000:]}"
