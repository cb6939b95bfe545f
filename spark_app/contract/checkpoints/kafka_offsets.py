"""What a Kafka cluster holds, asked of its brokers (metadata only, never a record): the
earliest or the next offset of each partition of some topics.

One edge for everything that must know where a topic starts or ends: a Rewind's retention
check (earliest), a Kafka sink recording what each batch produced (latest), and a cascade
finding which offsets of a topic an upstream job wrote after its restored batch (latest, the
upstream job stopped)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from spark_app.contract.errors import KappaError
from spark_app.contract.kafka_security import KafkaSecurity, client_config

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

PartitionOffsets = dict[tuple[str, int], int]
"""(topic, partition) -> offset."""

Security = KafkaSecurity | Mapping[str, str] | None
"""How the client reaches the listener: a block naming files (the driver's), or librdkafka's
settings already made from the Secrets' values (the operator's, which has no files)."""

TIMEOUT_S = 15
RETRIES = 4
"""Attempts after a retriable error (a partition's leader moving), 0.5 s, 1 s, ... apart."""


def partitions_of(bootstrap: str, topics: Iterable[str], security: Security = None) -> set[tuple[str, int]]:
    """The partitions the cluster has of ``topics`` (a topic it does not have: none)."""
    from confluent_kafka import KafkaException

    wanted = set(topics)
    try:
        listed = admin(bootstrap, security).list_topics(timeout=TIMEOUT_S).topics
    except KafkaException as exc:
        raise KappaError(f"could not ask Kafka ({bootstrap}) for its topics: {exc}") from exc
    return {(t, p) for t, meta in listed.items() if t in wanted and meta.error is None for p in meta.partitions}


def topics_matching(bootstrap: str, pattern: str, security: Security = None) -> set[str]:
    """The cluster's topics whose whole name matches ``pattern`` (a ``topicPattern``; Java's
    and Python's regular expressions agree on the patterns topic names need)."""
    from confluent_kafka import KafkaException

    regex = re.compile(pattern)
    try:
        listed = admin(bootstrap, security).list_topics(timeout=TIMEOUT_S).topics
    except KafkaException as exc:
        raise KappaError(f"could not ask Kafka ({bootstrap}) for its topics: {exc}") from exc
    return {t for t in listed if regex.fullmatch(t)}


def offsets(
    bootstrap: str,
    partitions: Iterable[tuple[str, int]],
    which: Literal["earliest", "latest"],
    security: Security = None,
) -> PartitionOffsets:
    """The earliest retained, or the next to be written ("latest"), offset of each partition
    the cluster has; partitions it does not have are left out."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    wanted = set(partitions)
    present = partitions_of(bootstrap, {t for t, _ in wanted}, security) & wanted
    if not present:
        return {}
    spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
    client = admin(bootstrap, security)
    for attempt in range(RETRIES + 1):
        try:
            answers = client.list_offsets({TopicPartition(t, p): spec for t, p in present}, request_timeout=TIMEOUT_S)
            return {(tp.topic, tp.partition): f.result(timeout=2 * TIMEOUT_S).offset for tp, f in answers.items()}
        except KafkaException as exc:
            # a partition's leader moving (a new topic's, a broker's restart) is retriable:
            # asked again once the metadata has caught up
            if attempt < RETRIES and _leader_moving(exc):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise KappaError(f"could not ask Kafka ({bootstrap}) for the {which} offsets: {exc}") from exc
    raise AssertionError("unreachable")


def end_offsets(bootstrap: str, topic: str, security: Security = None) -> dict[int, int]:
    """partition -> the offset the next record written to it gets (every partition of ``topic``)."""
    found = offsets(bootstrap, partitions_of(bootstrap, [topic], security), "latest", security)
    return {p: o for (_, p), o in found.items()}


def admin(bootstrap: str, security: Security = None) -> AdminClient:
    """An admin client of the cluster, through its secured listener when ``security`` names one
    (the SASL values read from their files into the client's config only)."""
    from confluent_kafka.admin import AdminClient

    settings = client_config(security) if security is None or isinstance(security, KafkaSecurity) else security
    return AdminClient({"bootstrap.servers": bootstrap, **settings})


def _leader_moving(exc: Exception) -> bool:
    """A retriable error, or one naming a partition whose leader is not (yet) known here."""
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    moving = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    return error.retriable() or error.code() in moving
