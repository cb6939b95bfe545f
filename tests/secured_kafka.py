"""A StreamingJob of the Kafka example made to reach a secured listener: what the operator's,
the local run's and the API server's tests of spec.kafkaSecurity start from."""

from __future__ import annotations

import copy
from typing import Any

COMPANY = {
    "protocol": "SASL_SSL",
    "sasl": {"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "kafka-user"}},
    "tls": {"ca": {"secretRef": {"name": "kafka-ca"}}},
}
"""One block: SCRAM over TLS, the user's Secret and the CA's (keys by default)."""


def secured(job: dict[str, Any], *sources: str, **blocks: dict[str, Any]) -> dict[str, Any]:
    """``job`` (a manifest of examples/kafka-rmi-streamingjob.yaml) with ``blocks`` (default:
    ``company``) in spec.kafkaSecurity and ``sources`` (default: impressions) reading through
    the first."""
    out = copy.deepcopy(job)
    blocks = blocks or {"company": COMPANY}
    out["spec"]["kafkaSecurity"] = copy.deepcopy(blocks)
    for source in sources or ("impressions",):
        out["spec"]["sources"][source]["live"]["security"] = next(iter(blocks))
    return out
