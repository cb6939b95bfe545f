"""An append-only JSON-lines trace of what sources decided and which files their tasks open
(the row counts a run reports from Spark's progress are ``spark_app.contract.row_counts``).

Several planners (one per query and source, on the callback threads of the driver) and
several drivers of one alignment group may write one trace, so it is a file opened in append
mode: each event is one ``write`` of one line, which the OS keeps whole. Off unless the config
sets ``tracePath``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def trace(path: str | None, event: str, /, **fields: Any) -> None:
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"t": time.time(), "event": event, "pid": os.getpid(), **fields}, default=str)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_trace(path: str | Path, event: str | None = None) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    events = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return [e for e in events if event is None or e["event"] == event]
