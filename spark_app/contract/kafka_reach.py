"""Before a query starts: can the job's Kafka client reach each listener it names, as it will
connect? A refusal (a wrong password, an untrusted CA, an expired client certificate) is then
one line naming the source, the listener and the fix, instead of the Java trace Spark's Kafka
client would end the query with minutes later.

librdkafka tells why only through its error callback; a metadata request alone says "transport
failure". So the check asks for metadata in short rounds and stops at the first refusal it can
explain, or at success."""

from __future__ import annotations

import logging
import time
from typing import Any

from spark_app.contract.errors import KappaError
from spark_app.contract.kafka_refusals import explain
from spark_app.contract.kafka_security import KafkaSecurity, client_config

REACH_TIMEOUT_S = 20.0


class _Heard(logging.Handler):
    """librdkafka's log lines (a connection closed at the first request is only logged)."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__()
        self.texts = texts

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())


class KafkaRefusedError(KappaError):
    """A Kafka listener refused the job's client, or could not be reached; the message names
    the source or sink, the listener and the fix."""

    restartable = True  # a Secret fixed (or a broker back) lets the same spec through


def listener_of(bootstrap: str, security: KafkaSecurity | None) -> str:
    """How a person names the listener: its protocol, and where."""
    protocol = security.protocol if security is not None else "PLAINTEXT"
    return f"{protocol} listener {bootstrap}"


def reach(bootstrap: str, security: KafkaSecurity | None, where: str, timeout: float = REACH_TIMEOUT_S) -> None:
    """Return once the listener gave its metadata to a client configured as the job's; raise
    ``KafkaRefusedError`` on its first explained refusal, or after ``timeout``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    texts: list[str] = []

    def heard(error: Any) -> None:
        texts.append(str(error.str()))

    listener = listener_of(bootstrap, security)
    logger = logging.Logger("kappa.kafka.reach")  # its own: nothing reaches the job's log or stderr
    logger.addHandler(_Heard(texts))
    config = {"bootstrap.servers": bootstrap, "error_cb": heard, "logger": logger, **client_config(security)}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except KafkaException as exc:
            texts.append(str(exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc))
        admin.poll(0.1)  # the error callback and the logger run here
        line = explain(texts, where, listener)
        if line is not None:
            raise KafkaRefusedError(line)
        if time.monotonic() >= deadline:
            last = texts[-1] if texts else "no answer"
            raise KafkaRefusedError(
                f"{where}: {listener}: no answer in {timeout:.0f} s ({last}); check the bootstrap address "
                "and that the listener is up and reachable from the job's pods"
            )
