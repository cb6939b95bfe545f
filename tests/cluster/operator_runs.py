"""How the tests on the real server run the operator under test, besides the chart's own process
(``operator`` in tests/cluster/conftest.py), always with the chart's ServiceAccount (its token,
exactly the chart's RBAC):

- :func:`in_process`: ``kappa operator`` (``kappa_operator.service.runner.run_operator``, what the CLI
  runs) in a thread of the test process, for the modules that need hooks inside it: every
  function that reads rows or copies files made to raise (:func:`forbid_data_plane`), a storage
  call made to hang, the embedded coordinator's groups and the metrics registry read directly.
- :class:`Processes`: ``kappa operator`` with the installed Deployment's arguments as processes of
  its own, watching one namespace, with extra flags, a fault armed
  (``KAPPA_OPERATOR_FAULT``: it exits mid-reconcile) or the data plane refused; killed and
  started again as a pod would be.

**One operator at a time** (:func:`claim`): two operators watching the same objects would fight
over them (both create, both patch, both hold finalizers). Every way of running one claims the
control plane for its module and releases it when the module ends, after its objects are gone
(:func:`release`), so a later cluster-wide operator never finds half-deleted objects of another
module.

Run as the main module (``runpy``, the repository last on the path: see :meth:`Processes.start`),
it is ``kappa ARGS`` with the data plane refused; each refused call is appended to the file named
by ``KAPPA_TEST_REFUSED``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.operator_process import OperatorProcess, healthy, local_args, token_from_chart
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually, free_port

if TYPE_CHECKING:
    from harness.chart import Installed
    from kappa_operator.handlers.context import Context

ROOT = Path(__file__).resolve().parents[2]
KAPPA = ("streamingjobs", "backfills", "rewinds")
FAULT = "KAPPA_OPERATOR_FAULT"

# --- one operator at a time -------------------------------------------------------------------

_RUNNING: list[str] = []


@contextlib.contextmanager
def claim(what: str) -> Iterator[None]:
    """``what`` is the only operator on the control plane until the block ends."""
    assert not _RUNNING, f"{what}: {_RUNNING[0]} still runs; two operators would fight over the same objects"
    _RUNNING.append(what)
    try:
        yield
    finally:
        _RUNNING.remove(what)


def kappa_objects(plane: ControlPlane, namespace: str) -> list[str]:
    """``plural/name`` of every StreamingJob, Backfill and Rewind in ``namespace``."""
    found = []
    for plural in KAPPA:
        answer = plane.admin.get(f"/apis/kappa.dev/v1alpha1/namespaces/{namespace}/{plural}")
        if answer.status == 200:
            found += [f"{plural}/{o['metadata']['name']}" for o in answer.body["items"]]
    return found


def delete_kappa_objects(plane: ControlPlane, namespace: str) -> None:
    for plural in KAPPA:
        plane.admin.request(
            "DELETE",
            f"/apis/kappa.dev/v1alpha1/namespaces/{namespace}/{plural}",
            params={"propagationPolicy": "Background"},
        )


def release(plane: ControlPlane, namespaces: list[str], timeout: float = 90.0) -> None:
    """Delete the operator's objects in ``namespaces`` and wait until they are gone (their
    finalizers removed by the operator, which must still run)."""
    for ns in namespaces:
        delete_kappa_objects(plane, ns)
    eventually(
        lambda: not any(kappa_objects(plane, ns) for ns in namespaces),
        f"the objects in {namespaces} released by the operator",
        timeout=timeout,
        every=0.3,
    )


def creates(plane: ControlPlane, user: str, namespace: str, resource: str) -> int:
    """Create requests ``user`` sent for ``resource`` in ``namespace``, answered or refused,
    from the audit log (waits for its flush)."""
    time.sleep(1.2)  # the audit backend flushes its batch every second
    return sum(
        1
        for e in plane.audit_events(user)
        if e.get("verb") == "create"
        and (e.get("objectRef") or {}).get("resource") == resource
        and (e.get("objectRef") or {}).get("namespace") == namespace
        and not (e.get("objectRef") or {}).get("subresource")
    )


# --- the data plane, refused -------------------------------------------------------------------

DATA_PLANE = (
    ("pyiceberg.table.DataScan", "to_arrow"),
    ("pyiceberg.table.DataScan", "to_arrow_batch_reader"),
    ("pyiceberg.io.pyarrow.ArrowScan", "to_table"),
    ("pyiceberg.io.pyarrow.ArrowScan", "to_record_batches"),
    ("pyarrow.parquet", "read_table"),
    ("pyarrow.parquet.ParquetFile", "read"),
    ("spark_app.sinks.iceberg.window.TimeWindow", "rows"),
    ("spark_app.sinks.iceberg.window.TimeWindow", "read"),
    ("spark_app.sinks.iceberg.validation", "compare_in_process"),
    ("spark_app.sinks.iceberg.publish", "publish"),
    ("spark_app.contract.storage.Location", "copy_to"),
    ("spark_app.contract.storage", "copy_many"),
)
"""What reads rows or copies files: in the operator's process, each raises (issue 16)."""

_TEST_THREAD = threading.local()


@contextlib.contextmanager
def outside_the_operator() -> Iterator[None]:
    """The test's own look at the data (on its thread): not the operator's."""
    _TEST_THREAD.allowed = True
    try:
        yield
    finally:
        _TEST_THREAD.allowed = False


def refuse_data_plane(patch: Callable[[Any, str, Any], None], refused: Callable[[str], None]) -> None:
    """Replace every function of ``DATA_PLANE`` (and its imports by name) with one that raises,
    except inside ``outside_the_operator``; ``refused`` is told the name of each call refused."""
    for where, attr in DATA_PLANE:
        try:
            owner: Any = importlib.import_module(where)
        except ImportError:
            module, _, cls = where.rpartition(".")
            owner = getattr(importlib.import_module(module), cls)
        original = getattr(owner, attr)

        def refuse(*args: Any, _name: str = f"{where}.{attr}", _original: Any = original, **kwargs: Any) -> Any:
            if getattr(_TEST_THREAD, "allowed", False):
                return _original(*args, **kwargs)
            refused(_name)
            raise AssertionError(f"{_name} called inside the operator process: it must not touch data")

        patch(owner, attr, refuse)
        for name, module in list(sys.modules.items()):  # and wherever it was imported by name
            if name.startswith(("kappa_operator", "spark_app")) and getattr(module, attr, None) is original:
                patch(module, attr, refuse)


def forbid_data_plane(monkeypatch: Any) -> list[str]:
    """Make every function of ``DATA_PLANE`` raise in this process (the in-process operator's
    threads included), except inside ``outside_the_operator``; the calls it refused are listed
    (the test asserts none): the operator renders, reads reports and patches status."""
    refused: list[str] = []
    refuse_data_plane(monkeypatch.setattr, refused.append)
    return refused


# --- in this process ------------------------------------------------------------------------------

TOKEN = "in-process-token"


def progress_interval(args: tuple[str, ...]) -> float:
    """The chart's ``--progress-interval``, read by the operator's own command line."""
    from kappa_operator.cli.commands import build_parser

    return float(build_parser().parse_args(["operator", *args]).progress_interval)


"""The in-process operator's coordinator admin token."""


@dataclass
class InProcess:
    """``kappa operator`` running in a thread of the test process."""

    context: Context
    """The operator's shared context (``kappa_operator.handlers.context.ctx()``)."""
    namespaces: list[str] = field(default_factory=list)
    """The namespaces tests made for it: their objects are released before it stops."""

    def groups(self) -> dict[str, Any]:
        """The embedded coordinator's alignment groups."""
        groups: Any = self.context.groups
        return dict(groups.service.core.groups())


@contextlib.contextmanager
def in_process(plane: ControlPlane, installed: Installed) -> Iterator[InProcess]:
    """``kappa operator`` as the chart runs it (every namespace, the embedded coordinator, the
    chart's ServiceAccount through its kubeconfig), in a thread of this process."""
    import kubernetes
    import pytest

    from kappa_operator.handlers.context import ctx
    from kappa_operator.kube.events import KOPF_OBJECTS
    from kappa_operator.service.runner import OperatorOptions, run_operator

    health = f"127.0.0.1:{free_port()}"
    options = OperatorOptions(
        coordinator_bind=f"127.0.0.1:{free_port()}",
        token=TOKEN,
        health_bind=health,
        progress_interval=progress_interval(installed.args),
    )
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            run_operator(options, stop_flag=stop)
        except BaseException as exc:
            failed.append(exc)

    kopf_objects = logging.getLogger(KOPF_OBJECTS)
    with claim("the in-process operator"), pytest.MonkeyPatch.context() as env:
        # the operator routes kopf's object logs to its Events: undone when it stops
        env.setattr(kopf_objects, "handlers", list(kopf_objects.handlers))
        env.setenv("KUBECONFIG", str(installed.kubeconfig))
        # the Kubernetes client read $KUBECONFIG when it was imported: tell it again
        env.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(installed.kubeconfig))
        for key in [k for k in os.environ if k.startswith("KUBERNETES_")]:
            env.delenv(key)  # not in a pod: kopf and the Kubernetes client read the kubeconfig
        thread = threading.Thread(target=run, name="kappa-operator", daemon=True)
        thread.start()
        url = f"http://{health}/healthz"
        eventually(lambda: failed or not thread.is_alive() or healthy(url), "the in-process operator", timeout=60)
        assert not failed and thread.is_alive(), f"the in-process operator stopped: {failed}"
        running = InProcess(ctx())
        try:
            yield running
            release(plane, running.namespaces)
        finally:
            stop.set()
            thread.join(timeout=60)
        assert not thread.is_alive(), "the in-process operator did not stop"
        assert not failed, f"the in-process operator failed: {failed}"


# --- processes of their own -------------------------------------------------------------------


@dataclass
class OwnProcess(OperatorProcess):
    namespace: str = ""
    fault: str | None = None
    coordinator_url: str = ""
    token: str = ""
    """The coordinator's admin token (the chart's token Secret)."""


class Processes:
    """``kappa operator`` processes of one test module, with the installed Deployment's
    arguments and the chart's ServiceAccount, each watching the namespace it is given. Closed
    with the module: its objects are released (by a process started for it if none runs) and
    every process stopped."""

    def __init__(self, plane: ControlPlane, installed: Installed, workdir: Path) -> None:
        self.plane, self.installed, self.workdir = plane, installed, workdir
        self.started: list[OwnProcess] = []
        self.namespaces: set[str] = set()
        workdir.mkdir(parents=True, exist_ok=True)
        self.token_file = token_from_chart(plane, installed.namespace, installed.args, workdir / "token")

    def start(
        self,
        namespace: str,
        *flags: str,
        fault: str | None = None,
        refused: Path | None = None,
        replica: str | None = None,
    ) -> OwnProcess:
        """One more process, watching ``namespace``; with ``fault``, armed to exit mid-reconcile
        (``KAPPA_OPERATOR_FAULT``; it may have exited when this returns); with ``refused``, every
        function that reads rows or copies files raises in it, listed in that file; with
        ``replica``, one of the release's replicas by that name, in the leader election (it may
        be following when this returns)."""
        argv, binds = local_args(self.installed.args, self.token_file, election=replica is not None)
        argv += ["--namespace", namespace, *flags]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_") and k != FAULT}
        env.update(KUBECONFIG=str(self.installed.kubeconfig), PYTHONUNBUFFERED="1")
        if replica is not None:  # the downward API's (no pod of that name: its label is set on nothing)
            env.update(POD_NAMESPACE=self.installed.namespace, POD_NAME=replica)
        if fault:
            env[FAULT] = fault
        command = ["-m", "kappa_operator.cli.commands"]
        if refused is not None:  # the repository on the path last: its operator/ must not shadow the stdlib's
            env["KAPPA_TEST_REFUSED"] = str(refused)
            command = [
                "-c",
                f"import runpy, sys; sys.path.append({str(ROOT)!r}); "
                "runpy.run_module('tests.cluster.operator_runs', run_name='__main__')",
            ]
        log = self.workdir / f"operator-{len(self.started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *command, "operator", *argv],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        running = OwnProcess(
            proc,
            log,
            f"http://{binds['--metrics-bind']}/metrics",
            f"http://{binds['--health-bind']}/healthz",
            namespace,
            fault,
            f"http://{binds['--coordinator-bind']}",
            self.token_file.read_text().strip(),
        )
        self.started.append(running)
        self.namespaces.add(namespace)
        eventually(
            lambda: proc.poll() is not None or healthy(running.health_url),
            f"kappa operator healthy ({log})",
            timeout=60,
        )
        if proc.poll() is not None and not fault:
            raise AssertionError(f"kappa operator exited ({proc.returncode}):\n{running.tail()}")
        return running

    def close(self) -> None:
        try:
            left = sorted(ns for ns in self.namespaces if kappa_objects(self.plane, ns))
            live = {p.namespace for p in self.started if p.proc.poll() is None and p.fault is None}
            if set(left) - live:  # a plain process for each, and no two for one namespace
                for p in self.started:
                    p.stop()
                for ns in left:
                    self.start(ns)
            if left:
                release(self.plane, left)
        finally:
            for p in self.started:
                p.stop()


if __name__ == "__main__":

    def _note(name: str) -> None:
        with open(os.environ["KAPPA_TEST_REFUSED"], "a") as f:
            f.write(name + "\n")

    refuse_data_plane(setattr, _note)
    from kappa_operator.cli.commands import main

    sys.exit(main(sys.argv[1:]))
