"""The operator's Event recorder writing through the Kubernetes client to the real
kube-apiserver, as the chart's ServiceAccount (issue 27, Fix 7): a failure retried three times
is one Warning Event, counted, reported by kappa-operator. The decisions behind it are in
tests/unit/kappa_operator/kube/test_kubernetes_events.py."""

from __future__ import annotations

import kubernetes
import pytest

from harness.chart import Installed
from kappa_operator.kube.api import Cluster
from kappa_operator.kube.events import COMPONENT, EventRecorder, rfc3339
from kappa_operator.local_cluster.control_plane import ControlPlane
from tests.cluster.spark_operator import events, reasons
from tests.unit.kappa_operator.kube.test_kubernetes_events import T0, Clock, body

pytestmark = pytest.mark.usefixtures("never_forbidden")


def test_a_retried_failure_is_one_warning_event_counted_on_the_server(
    control_plane: ControlPlane, installed: Installed, namespace: str
) -> None:
    client = kubernetes.config.new_client_from_config(config_file=str(installed.kubeconfig))
    cluster, clock = Cluster(client), Clock()
    recorder = EventRecorder(lambda: cluster, instance="pod-1", clock=clock)
    job = {**body(), "metadata": {**body()["metadata"], "namespace": namespace}}
    for step in (0, 0.3, 30, 60):
        clock.now = T0 + step
        recorder.event(job, "Error", "RetryingAfterError", "boom")
    assert recorder.flush()
    [event] = events(control_plane, namespace, "rmi")
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "RetryingAfterError", 3)
    assert event["reportingComponent"] == COMPONENT and event["reportingInstance"] == "pod-1"
    assert (event["firstTimestamp"], event["lastTimestamp"]) == (rfc3339(T0), rfc3339(T0 + 60))
    assert reasons(control_plane, namespace, "rmi") == ["RetryingAfterError"] * 3
