"""The local servers' processes (the Kafka broker, the schema registry): each in a process group
of its own, stopped as a whole."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(process: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM to the process's group (a controlled shutdown: logs flushed), SIGKILL after
    ``grace_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
