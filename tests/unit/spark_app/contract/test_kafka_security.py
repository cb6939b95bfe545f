"""The Kafka clients' security from files (pure): Spark's options hold only paths and the
references Kafka's client resolves, never a value; librdkafka's config reads the SASL values;
the combinations a listener cannot take are refused naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spark_app.contract.kafka_refusals import explain
from spark_app.contract.kafka_security import (
    KafkaSecurity,
    clashing_options,
    client_config,
    jaas_unsafe,
    spark_options,
)

SECRET = "s3cr3t-marker"
FILES = {"/etc/kappa/kafka/user/username": "alice", "/etc/kappa/kafka/user/password": SECRET}


def sasl_ssl(mechanism: str = "SCRAM-SHA-512", client: bool = False) -> KafkaSecurity:
    tls: dict[str, str] = {"caFile": "/etc/kappa/kafka/ca/ca.crt"}
    if client:
        tls |= {"certFile": "/etc/kappa/kafka/client/tls.crt", "keyFile": "/etc/kappa/kafka/client/tls.key"}
    return KafkaSecurity.model_validate(
        {
            "protocol": "SASL_SSL",
            "sasl": {
                "mechanism": mechanism,
                "usernameFile": "/etc/kappa/kafka/user/username",
                "passwordFile": "/etc/kappa/kafka/user/password",
            },
            "tls": tls,
        }
    )


def test_spark_options_name_the_files_and_hold_no_value() -> None:
    options = spark_options(sasl_ssl(client=True))
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="${kappadir:/etc/kappa/kafka/user:username}" '
        'password="${kappadir:/etc/kappa/kafka/user:password}";'
    )
    assert options["kafka.ssl.truststore.location"] == "/etc/kappa/kafka/ca/ca.crt"
    assert options["kafka.ssl.keystore.key"] == "${kappadir:/etc/kappa/kafka/client:tls.key}"
    assert options["kafka.config.providers.kappadir.class"].endswith("DirectoryConfigProvider")
    assert not any(SECRET in v or "alice" in v for v in options.values())


def test_plain_uses_its_own_login_module_and_plaintext_needs_nothing() -> None:
    assert spark_options(sasl_ssl("PLAIN"))["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )
    assert spark_options(None) == spark_options(KafkaSecurity()) == client_config(KafkaSecurity()) == {}


def test_mtls_without_sasl_sets_no_providers_for_a_ca_alone() -> None:
    ca_only = KafkaSecurity.model_validate({"protocol": "SSL", "tls": {"caFile": "/ca.pem"}})
    assert spark_options(ca_only) == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/ca.pem",
    }


def test_client_config_reads_the_sasl_files_only() -> None:
    read: list[str] = []

    def reader(path: str) -> str:
        read.append(path)
        return FILES[path]

    config = client_config(sasl_ssl(client=True), reader)
    assert config["sasl.username"] == "alice" and config["sasl.password"] == SECRET
    assert config["security.protocol"] == "sasl_ssl" and config["ssl.key.location"] == "/etc/kappa/kafka/client/tls.key"
    assert sorted(read) == sorted(FILES)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"protocol": "SASL_SSL"}, "protocol SASL_SSL needs sasl"),
        (
            {"protocol": "SSL", "sasl": {"mechanism": "PLAIN", "usernameFile": "u", "passwordFile": "p"}},
            "protocol SSL takes no sasl",
        ),
        ({"protocol": "PLAINTEXT", "tls": {"caFile": "/ca"}}, "tls needs SSL or SASL_SSL"),
        ({"protocol": "SSL", "tls": {"certFile": "/c"}}, "needs both certFile and keyFile"),
        ({"protocol": "SASL_SSL", "sasl": {"mechanism": "GSSAPI"}}, "mechanism"),
    ],
)
def test_what_a_listener_cannot_take_is_refused(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaSecurity.model_validate(spec)


def test_options_that_would_fight_the_security_block_are_found() -> None:
    given = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/x", "maxOffsetsPerTrigger": "5"}
    assert clashing_options(given) == ["kafka.security.protocol", "kafka.ssl.truststore.location"]


@pytest.mark.parametrize(("value", "bad"), [("ok-pass", False), ('a"b', True), ("a\\b", True), ("pw\n", True)])
def test_values_jaas_cannot_carry_are_named(value: str, bad: bool) -> None:
    assert (jaas_unsafe(value) is not None) == bad


# librdkafka 2.16's texts, as a real broker made it say them (docs/design/kafka-security-research.md)
WRONG_SCRAM = (
    "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 12ms in state AUTH_REQ)"
)
UNTRUSTED = (
    "ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify "
    "failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured"
)
EXPIRED = (
    "ssl://127.0.0.1:9094/bootstrap: Receive failed: error:0A000416:SSL routines::ssl/tls alert certificate "
    "unknown: SSL alert number 46 (after 3ms in state APIVERSION_QUERY)"
)
NO_CERT = "ssl://127.0.0.1:9094/bootstrap: Receive failed: ssl/tls alert bad certificate: SSL alert number 42"
MECHANISM = (
    "SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's "
    "supported mechanisms: SCRAM-SHA-512,PLAIN (after 1ms in state AUTH_HANDSHAKE)"
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (WRONG_SCRAM, "refused the SASL username or password; check the username and password keys"),
        (UNTRUSTED, "not signed by the CA the job trusts; name the CA"),
        (EXPIRED, "refused the client certificate (expired"),
        (NO_CERT, "requires a client certificate signed by its CA"),
        (MECHANISM, "does not offer this SASL mechanism (it offers SCRAM-SHA-512,PLAIN)"),
    ],
)
def test_a_refusal_is_one_line_naming_the_source_the_listener_and_the_fix(text: str, says: str) -> None:
    line = explain(["1/1 brokers are down", text], "sources.plays", "127.0.0.1:9093")
    assert line is not None and line.startswith("sources.plays: 127.0.0.1:9093: ") and says in line
    assert "\n" not in line and "after" not in line.split(": ", 2)[2].split(";")[0]


def test_an_unknown_failure_is_not_dressed_as_a_known_one() -> None:
    assert explain(["1/1 brokers are down", "Connection refused"], "sources.plays", "x:1") is None
