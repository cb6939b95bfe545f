"""A real Apache Kafka broker on 127.0.0.1 for tests and local runs (`kappa kafka start`).

KRaft in combined mode (one process is broker and controller, as Kafka's own quickstart runs
it), from the jars ``spark_app.jars`` pins (bundle ``kafka-broker``, fetched from Maven Central
once), on the machine's Java 17. Topics are created with the settings a test needs (partitions,
``retention.ms``, ``segment.bytes``: a retention test must see a segment deleted for real).

Secured (``Secured``), it also listens as a company's broker does: SASL_SSL (SCRAM-SHA-512 and
PLAIN users) and MTLS (TLS with a client certificate required), its certificate signed by a
local ``Authority``. The controller and the inter-broker listener stay PLAINTEXT on 127.0.0.1,
as does the port the project's own admin calls use.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kappa_operator.local.ports import free_port
from kappa_operator.local.processes import stop_group
from spark_app import jars
from spark_app.contract.errors import ConfigError

if TYPE_CHECKING:
    from kappa_operator.local.certificates import Authority

SERVER_MAIN = "kafka.Kafka"
STORAGE_MAIN = "kafka.tools.StorageTool"
START_TIMEOUT = 60.0
LOG4J2 = """\
status = warn
appender.file.type = Console
appender.file.name = out
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""
"""The broker's log: its stdout, which goes to broker.log (the server's own INFO lines, the
clients' and the raft layer's WARN and up)."""


SASL_SSL, MTLS = "SASL_SSL", "MTLS"
"""The secured listeners' names (MTLS speaks Kafka's protocol SSL, with a client certificate
required on it alone)."""
SCRAM_ITERATIONS = 8192


@dataclass(frozen=True)
class Secured:
    """What the secured listeners accept: certificates ``authority`` signed (the broker's own
    too), and these users' passwords."""

    authority: Authority
    scram: Mapping[str, str] = field(default_factory=dict)
    """SCRAM-SHA-512 users: name -> password."""
    plain: Mapping[str, str] = field(default_factory=dict)
    """PLAIN users: name -> password."""


def _jaas_quoted(value: str) -> str:
    if '"' in value or "\\" in value or "\n" in value:
        raise ConfigError(f"a local Kafka user or password cannot hold a quote, backslash or newline: {value!r}")
    return f'"{value}"'


def secured_properties(secured: Secured, keystore: Path) -> list[str]:
    """The SASL_SSL and MTLS listeners' settings (their ports are in ``listeners``)."""
    plain_users = " ".join(f"user_{n}={_jaas_quoted(p)}" for n, p in secured.plain.items())
    lines = []
    for listener in ("sasl_ssl", "mtls"):
        lines += [
            f"listener.name.{listener}.ssl.keystore.type=PEM",
            f"listener.name.{listener}.ssl.keystore.location={keystore}",
            f"listener.name.{listener}.ssl.truststore.type=PEM",
            f"listener.name.{listener}.ssl.truststore.location={secured.authority.ca}",
        ]
    return [
        *lines,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f"required {plain_users};",
        "listener.name.mtls.ssl.client.auth=required",
    ]


def properties(
    data: Path,
    port: int,
    controller_port: int,
    host: str = "127.0.0.1",
    secured: Mapping[str, int] | None = None,
) -> str:
    """server.properties of a one-node cluster: every internal topic with one replica, no
    rebalance delay (a test's consumer group starts at once), segments checked for deletion
    every second (a topic's retention.ms then acts within seconds, not 5 minutes). Records are
    kept forever unless a topic says otherwise: the broker's 7-day default, checked every second,
    deleted within seconds the records a test, a demo or a replay writes with event timestamps
    weeks back (issue 44); a retention test sets its topic's retention.ms. ``secured``: the
    secured listeners' ports, by name."""
    extra = secured or {}
    advertised = ",".join([f"PLAINTEXT://{host}:{port}"] + [f"{name}://{host}:{p}" for name, p in extra.items()])
    protocols = {SASL_SSL: "SASL_SSL", MTLS: "SSL"}
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
            f"listeners={advertised},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners={advertised}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map="
            + ",".join(["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"] + [f"{n}:{protocols[n]}" for n in extra]),
            f"log.dirs={data / 'logs'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "log.retention.check.interval.ms=1000",
            "log.retention.ms=-1",
            "auto.create.topics.enable=false",
            "",
        ]
    )


@dataclass
class KafkaBroker:
    """One running broker; ``bootstrap`` is what clients and Spark's Kafka source are given."""

    data: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    _stopped: bool = field(default=False, repr=False)
    host: str = "127.0.0.1"
    secured_ports: Mapping[str, int] = field(default_factory=dict)
    """The secured listeners' ports, by name (``SASL_SSL``, ``MTLS``); empty unless started secured."""
    secured: Secured | None = None
    """What they accept (its authority issues a test's client certificates)."""

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """The address of ``listener`` (``PLAINTEXT``, ``SASL_SSL`` or ``MTLS``)."""
        if listener == "PLAINTEXT":
            return self.bootstrap
        if listener not in self.secured_ports:
            raise ConfigError(f"this broker has no {listener} listener (start it with secured=Secured(...))")
        return f"{self.host}:{self.secured_ports[listener]}"

    @classmethod
    def start(
        cls,
        data: Path,
        port: int | None = None,
        heap: str = "512m",
        host: str = "127.0.0.1",
        secured: Secured | None = None,
        secured_ports: Mapping[str, int] | None = None,
    ) -> KafkaBroker:
        """Format ``data`` (once: a restart keeps the topics) and start the broker; returns when
        it accepts connections. Fails with the broker's log when it does not. ``host``: the
        address it listens on and gives its clients (the one-node cluster's bridge, for pods).
        ``secured``: also the SASL_SSL and MTLS listeners, with a certificate for ``host``
        and these users; on ``secured_ports`` (by listener name; default: free ones)."""
        java = shutil.which("java")
        if java is None:
            raise ConfigError("a Kafka broker needs Java 17 (`java` on PATH)")
        classpath = ":".join(str(j) for j in jars.resolve("kafka-broker"))
        data.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        config = data / "server.properties"
        ports = dict(secured_ports or {SASL_SSL: free_port(), MTLS: free_port()}) if secured is not None else {}
        text = properties(data, port, free_port(), host, ports)
        if secured is not None:
            server = secured.authority.issue("kafka-broker", hosts=dict.fromkeys([host, "127.0.0.1", "localhost"]))
            text += "\n".join(secured_properties(secured, server.keystore)) + "\n"
        config.write_text(text)
        log = data / "broker.log"
        env = {**os.environ, "LOG_DIR": str(data)}
        if not (data / "logs" / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = [
                java,
                "-cp",
                classpath,
                STORAGE_MAIN,
                "format",
                f"--cluster-id={cluster_id}",
                "-c",
                str(config),
                "--standalone",
            ]
            done = subprocess.run(fmt, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise ConfigError(f"kafka storage format failed: {(done.stdout + done.stderr)[-2000:]}")
        logging_config = data / "log4j2.properties"
        logging_config.write_text(LOG4J2)
        cmd = [
            java,
            f"-Xmx{heap}",  # the JVM's own collector (G1 on 2+ cores): JAVA_TOOL_OPTIONS may choose another
            f"-Dlog4j2.configurationFile={logging_config}",
            "-cp",
            classpath,
            SERVER_MAIN,
            str(config),
        ]
        with log.open("ab") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        broker = cls(data, port, process, log, host=host, secured_ports=ports, secured=secured)
        broker._wait_ready()
        if secured is not None and secured.scram:
            broker.add_scram_users(secured.scram)
        return broker

    def add_scram_users(self, users: Mapping[str, str]) -> None:
        """Create (or set the password of) SCRAM-SHA-512 users, through the PLAINTEXT port."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        upserts = [UserScramCredentialUpsertion(name, info, password.encode()) for name, password in users.items()]
        admin = self.admin()
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)

    def _wait_ready(self) -> None:
        """Until a client gets the cluster's metadata from it (the broker is registered)."""
        deadline = time.monotonic() + START_TIMEOUT
        admin: AdminClient | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigError(f"the Kafka broker exited ({self.process.returncode}): {self.log_tail()}")
            try:
                if admin is None:  # a client made before the port is open logs every refused connect
                    socket.create_connection((self.host, self.port), timeout=1.0).close()
                    admin = self.admin()
                if admin.list_topics(timeout=1.0).brokers:
                    return
            except (OSError, KafkaException):
                pass
            time.sleep(0.2)
        self.stop()
        raise ConfigError(f"the Kafka broker did not start in {START_TIMEOUT:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM (a controlled shutdown: the logs are flushed), SIGKILL after 20 s."""
        if self._stopped:
            return
        self._stopped = True
        stop_group(self.process)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """Create ``name`` (an existing one is an error: a test must not read another's data)."""
        _create(self.bootstrap, [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])


def create_topics(bootstrap: str, specs: list[str]) -> list[str]:
    """``name`` or ``name:partitions`` each; the names created."""
    topics = []
    for spec in specs:
        name, _, parts = spec.partition(":")
        if not name or (parts and not parts.isdigit()):
            raise ConfigError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS, e.g. impressions:3")
        topics.append(NewTopic(name, num_partitions=int(parts or 1), replication_factor=1))
    _create(bootstrap, topics)
    return [t.topic for t in topics]


def _create(bootstrap: str, topics: list[NewTopic]) -> None:
    # the client is kept until the futures resolve: a dropped client cancels them
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=60)
