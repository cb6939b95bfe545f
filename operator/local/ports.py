"""A free loopback port for a process this machine starts (a broker, a control plane, an
operator in a test), chosen the same way everywhere."""

from __future__ import annotations

import random
import socket
from pathlib import Path

LISTEN_PORTS = (20000, 32000)
"""Where ``free_port`` looks: below the kernel's ephemeral range (32768 on), which every outgoing
connection on the machine takes its local port from. A port chosen in that range can be taken by
a client's connection between the choice and the bind (a test run saw an operator's metrics bind
fail so); one below it only by another listener, which picks at random too."""


def free_port() -> int:
    """A loopback port nothing listens on now, for a process about to bind it."""
    low, high = LISTEN_PORTS
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        high = min(high, ephemeral)
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200):
        port = random.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the range is crowded: the kernel's choice, as before
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
