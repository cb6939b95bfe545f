"""The machine's side of the local cluster's network: commands run on the machine or in a
node's network namespace, and the bridge every node has its one interface on.
"""

from __future__ import annotations

import subprocess

from kappa_operator.local_cluster.addresses import BRIDGE, GATEWAY, PODS


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def in_netns(netns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` in the node's network namespace, in the machine's mounts (nsenter --net: `ip
    netns exec` would give it a mount namespace of its own, where a kubelet's mounts are lost
    to containerd)."""
    return run("nsenter", f"--net=/var/run/netns/{netns}", "--", *argv, check=check)


def bridge() -> None:
    """The machine's bridge with its address, before the storage and the broker listen on it.
    A FORWARD rule drops what pods send off the cluster's ranges, whatever routes appear: pods
    reach the machine's bridge address, each other and the Services, nothing else."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    addrs = run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{GATEWAY}/24" not in addrs:
        run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    out = ("FORWARD", "-s", PODS, "!", "-d", PODS, "-j", "DROP")
    if run("iptables", "-C", *out, check=False).returncode != 0:
        run("iptables", "-I", *out)
