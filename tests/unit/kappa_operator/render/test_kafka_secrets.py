"""A Kafka block's Secrets rendered as files (pure): one read-only volume per Secret, mounted in a
fixed place, and a JobConfig block that names only those files."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kappa_operator.models.kafka_security import KafkaSecuritySpec
from kappa_operator.render.kafka_security import (
    VOLUME_NAME_MAX,
    contract_security,
    secret_volumes,
    volume_name,
)
from spark_app.contract.kafka_security import spark_options

SASL_MTLS = {
    "protocol": "SASL_SSL",
    "sasl": {"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "kafka-user"}},
    "tls": {"ca": {"secretRef": {"name": "kafka-ca"}}, "client": {"secretRef": {"name": "kafka-client"}}},
}


def test_the_files_are_where_the_secrets_are_mounted() -> None:
    spec = KafkaSecuritySpec.model_validate(SASL_MTLS)
    sec = contract_security(spec)
    assert sec is not None and sec.sasl is not None and sec.tls is not None
    assert sec.sasl.password_file == "/etc/kappa/kafka/kafka-user/password"
    assert (sec.tls.ca_file, sec.tls.cert_file, sec.tls.key_file) == (
        "/etc/kappa/kafka/kafka-ca/ca.crt",
        "/etc/kappa/kafka/kafka-client/tls.crt",
        "/etc/kappa/kafka/kafka-client/tls.key",
    )
    volumes, mounts = secret_volumes([spec])
    assert [v["secret"]["secretName"] for v in volumes] == ["kafka-user", "kafka-ca", "kafka-client"]
    assert {v["secret"]["defaultMode"] for v in volumes} == {0o444}, "Spark's user (185) is not the files' owner"
    assert all(m["readOnly"] and m["mountPath"].startswith("/etc/kappa/kafka/") for m in mounts)
    assert {m["name"] for m in mounts} == {v["name"] for v in volumes}
    assert "kafka.sasl.jaas.config" in spark_options(sec)


def test_a_secret_named_twice_is_mounted_once() -> None:
    one = KafkaSecuritySpec.model_validate(
        {"protocol": "SSL", "tls": {"ca": {"secretRef": {"name": "tls"}}, "client": {"secretRef": {"name": "tls"}}}}
    )
    volumes, mounts = secret_volumes([one, one, None])
    assert len(volumes) == len(mounts) == 1


def test_volume_names_are_dns_labels_and_distinct() -> None:
    long_a, long_b = "a" * 200 + ".x", "a" * 200 + "-x"
    names = {volume_name(long_a), volume_name(long_b), volume_name("a.b"), volume_name("a-b")}
    assert len(names) == 4 and all(len(n) <= VOLUME_NAME_MAX and "." not in n for n in names)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"protocol": "SASL_SSL"}, "sasl is needed"),
        ({"protocol": "PLAINTEXT", "tls": {}}, "tls needs protocol SSL or SASL_SSL"),
        ({"protocol": "SSL", "sasl": SASL_MTLS["sasl"]}, "and only then"),
        ({"protocol": "SSL", "tls": {"ca": {"secretRef": {"name": "Bad_Name"}}}}, "name"),
    ],
)
def test_a_block_a_listener_cannot_take_is_refused(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaSecuritySpec.model_validate(spec)


def test_no_block_renders_nothing() -> None:
    assert contract_security(None) is None and secret_volumes([None]) == ([], [])


def test_the_operators_own_client_takes_the_secrets_values_in_memory_not_files() -> None:
    from kappa_operator.render.kafka_security import operator_settings

    data = {
        "kafka-user": {"username": "alice", "password": "s3cret"},
        "kafka-ca": {"ca.crt": "CA PEM"},
        "kafka-client": {"tls.crt": "CERT PEM", "tls.key": "KEY PEM"},
    }
    settings = operator_settings(KafkaSecuritySpec.model_validate(SASL_MTLS), data.__getitem__)
    assert settings == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
        "ssl.ca.pem": "CA PEM",
        "ssl.certificate.pem": "CERT PEM",
        "ssl.key.pem": "KEY PEM",
    }
    data["kafka-ca"] = {"ca.pem": "CA PEM"}
    with pytest.raises(Exception, match=r"Secret kafka-ca has no key 'ca\.crt'.*name the key it has \(ca\.pem\)"):
        operator_settings(KafkaSecuritySpec.model_validate(SASL_MTLS), data.__getitem__)
