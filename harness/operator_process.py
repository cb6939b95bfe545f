"""The operator as the chart runs it, against the real control plane: ``kappa operator`` with
the installed Deployment's arguments, as a process of its own, authenticated with a token of
the chart's ServiceAccount (what the pod would mount) and the token Secret the chart created.

Only what a pod gives a process differs: the API server comes from a kubeconfig instead of the
in-cluster environment, and the binds move from 0.0.0.0 to free loopback ports. And the leader
election (``--leader-election``), only where a test asks for it (``election=True``): the tests
here run one operator per namespace, several at once, and one release's replicas share one
Lease (tests/cluster/test_leader_election_on_server.py runs replicas).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kappa_operator.local_cluster.control_plane import ControlPlane, free_port

BINDS = {"--coordinator-bind", "--metrics-bind", "--health-bind"}


def healthy(url: str) -> bool:
    """``url`` answers 200 (a liveness endpoint)."""
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
        return bool(r.status == 200)
    return False


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_url: str
    health_url: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def leading(self) -> bool:
        """Holds the Lease and runs kopf (a follower's /healthz answers too: only its metrics tell);
        an operator killed before holds it until it expires (15 s)."""
        with contextlib.suppress(OSError), urllib.request.urlopen(self.metrics_url, timeout=2) as r:
            return b"\nkappa_operator_leading 1.0\n" in r.read()
        return False

    def healthy(self) -> bool:
        return healthy(self.health_url)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


ELECTION = {"--leader-election": 0, "--leader-election-lease": 1, "--leader-election-namespace": 1}
"""The election's flags and how many values each takes."""


def local_args(args: tuple[str, ...], token_file: Path, election: bool = False) -> tuple[list[str], dict[str, str]]:
    """The Deployment's arguments with each bind on a free loopback port and the token file
    where this process can read it, without the election's flags unless ``election``; also
    returns the binds chosen."""
    out: list[str] = []
    binds: dict[str, str] = {}
    it = iter(args)
    for arg in it:
        if arg in ELECTION and not election:
            for _ in range(ELECTION[arg]):
                next(it)
        elif arg in BINDS:
            binds[arg] = f"127.0.0.1:{free_port()}"
            out += [arg, binds[arg]]
            next(it)
        elif arg == "--token-file":
            out += [arg, str(token_file)]
            next(it)
        else:
            out.append(arg)
    return out, binds


def token_from_chart(plane: ControlPlane, namespace: str, args: tuple[str, ...], path: Path) -> Path:
    """The coordinator token as the pod gets it: the chart's Secret, mounted as a file."""
    secrets = plane.admin.ok(plane.admin.get(f"/api/v1/namespaces/{namespace}/secrets"), "secrets")["items"]
    mine = [s for s in secrets if "token" in (s.get("data") or {})]
    assert mine, f"the chart created no token Secret in {namespace}"
    path.write_bytes(base64.b64decode(mine[0]["data"]["token"]))
    return path


@contextlib.contextmanager
def running_operator(
    plane: ControlPlane,
    namespace: str,
    args: tuple[str, ...],
    kubeconfig: Path,
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    election: bool = False,
) -> Iterator[OperatorProcess]:
    workdir.mkdir(parents=True, exist_ok=True)
    token = token_from_chart(plane, namespace, args, workdir / "token")
    argv, binds = local_args(args, token, election)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    # the downward API's POD_NAMESPACE (the Lease's namespace); no POD_NAME: not a pod, so no label
    env.update(KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1", POD_NAMESPACE=namespace, **(extra_env or {}))
    log = workdir / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kappa_operator.cli.commands", "operator", *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = OperatorProcess(
        proc, log, f"http://{binds['--metrics-bind']}/metrics", f"http://{binds['--health-bind']}/healthz"
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"kappa operator exited ({proc.returncode}):\n{running.tail()}")
            if running.leading() and running.healthy():  # kopf's liveness endpoint: kopf runs
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"kappa operator not leading after 60 s:\n{running.tail()}")
            time.sleep(0.3)
        yield running
    finally:
        running.stop()
