"""The Lease and the leader's pod label, read and written through the API server (the I/O edge
of the election; what to write is ``decide``).

Every write of the Lease carries the resourceVersion it was read at, so of two replicas
writing at once one gets 409 and reads again: the API server, not a clock, picks the winner."""

from __future__ import annotations

import logging
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from kappa_operator.leadership.decide import LeaseRecord

log = logging.getLogger("kappa.leadership")

LEADER_LABEL = "kappa.dev/coordinator-leader"
"""On the leader's pod only: the chart's coordinator Service selects it, so drivers' reports
reach the replica that answers them (a follower's coordinator refuses them with 503)."""


class LeaseLock:
    """One Lease, read and written with optimistic concurrency."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, name: str, timeout: float) -> None:
        self.api = kubernetes.client.CoordinationV1Api(client)
        self.namespace, self.name = namespace, name
        self.timeout = timeout
        """Seconds a request may take: a renewal that hangs must not outlast the renew deadline."""

    def read(self) -> tuple[LeaseRecord | None, str | None]:
        """The record and its resourceVersion; (None, None) when there is no Lease."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            raise
        spec = lease.spec
        record = LeaseRecord(
            holder=spec.holder_identity or None,
            lease_duration_s=int(spec.lease_duration_seconds or 0),
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=int(spec.lease_transitions or 0),
        )
        return record, lease.metadata.resource_version

    def create(self, record: LeaseRecord) -> bool:
        """False: someone created it first (409)."""
        body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": _spec(record)}
        try:
            self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def update(self, record: LeaseRecord, resource_version: str) -> bool:
        """False: it changed since it was read (409)."""
        body = {
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": resource_version},
            "spec": _spec(record),
        }
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


def _spec(record: LeaseRecord) -> dict[str, Any]:
    def micro(t: Any) -> str | None:
        return None if t is None else t.isoformat(timespec="microseconds").replace("+00:00", "Z")

    return {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.lease_duration_s,
        "acquireTime": micro(record.acquire_time),
        "renewTime": micro(record.renew_time),
        "leaseTransitions": record.transitions,
    }


class LeaderLabel:
    """The label that routes the coordinator's Service to the leader's pod."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, pod: str) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.namespace, self.pod = namespace, pod

    def claim(self) -> None:
        """On this pod, and on no other: a pod that led before and still runs (it lost the
        Lease to a partition and is exiting) stops receiving reports at once."""
        found = self.core.list_namespaced_pod(self.namespace, label_selector=f"{LEADER_LABEL}=true")
        for pod in found.items:
            if pod.metadata.name != self.pod:
                log.info("removing %s from pod %s, which led before", LEADER_LABEL, pod.metadata.name)
                self._set(pod.metadata.name, None)
        self._set(self.pod, "true")

    def drop(self) -> None:
        """From this pod, if it has it: a container restarted in the same pod keeps its labels,
        and it starts as a follower (which otherwise writes nothing)."""
        found = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{LEADER_LABEL}=true", field_selector=f"metadata.name={self.pod}"
        )
        if found.items:
            self._set(self.pod, None)

    def _set(self, pod: str, value: str | None) -> None:
        try:
            self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"labels": {LEADER_LABEL: value}}})
        except ApiException as exc:
            if exc.status != 404:  # the pod is gone: so is its label
                raise
