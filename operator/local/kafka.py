"""A real Apache Kafka broker on 127.0.0.1 for tests and local runs (`kappa kafka start`).

KRaft in combined mode (one process is broker and controller, as Kafka's own quickstart runs
it), from the jars ``spark_app.jars`` pins (bundle ``kafka-broker``, fetched from Maven Central
once), on the machine's Java 17. Topics are created with the settings a test needs (partitions,
``retention.ms``, ``segment.bytes``: a retention test must see a segment deleted for real).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from spark_app import jars
from spark_app.contract.errors import ConfigError

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def properties(data: Path, port: int, controller_port: int, host: str = "127.0.0.1") -> str:
    """server.properties of a one-node cluster: every internal topic with one replica, no
    rebalance delay (a test's consumer group starts at once), segments checked for deletion
    every second (a topic's retention.ms then acts within seconds, not 5 minutes). Records are
    kept forever unless a topic says otherwise: the broker's 7-day default, checked every second,
    deleted within seconds the records a test, a demo or a replay writes with event timestamps
    weeks back (issue 44); a retention test sets its topic's retention.ms."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
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

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def start(cls, data: Path, port: int | None = None, heap: str = "512m", host: str = "127.0.0.1") -> KafkaBroker:
        """Format ``data`` (once: a restart keeps the topics) and start the broker; returns when
        it accepts connections. Fails with the broker's log when it does not. ``host``: the
        address it listens on and gives its clients (the one-node cluster's bridge, for pods)."""
        java = shutil.which("java")
        if java is None:
            raise ConfigError("a Kafka broker needs Java 17 (`java` on PATH)")
        classpath = ":".join(str(j) for j in jars.resolve("kafka-broker"))
        data.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        config = data / "server.properties"
        config.write_text(properties(data, port, free_port(), host))
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
        broker = cls(data, port, process, log, host=host)
        broker._wait_ready()
        return broker

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
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

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
