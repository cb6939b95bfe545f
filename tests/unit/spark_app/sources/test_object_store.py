"""pyiceberg's S3 properties as the Hadoop S3A settings the JVM reader opens data files with."""

from __future__ import annotations

from pathlib import Path

from spark_app.apps.session import reads_s3, s3a_jars
from spark_app.contract.config import parse_config
from spark_app.sources.iceberg.object_store import S3A, on_s3, s3a_options


def test_moto_or_minio_settings_map_to_path_style_s3a() -> None:
    got = s3a_options(
        {"s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "k", "s3.secret-access-key": "s", "uri": "x"}
    )
    assert got == {
        "fs.s3.impl": S3A,
        "fs.s3a.impl": S3A,
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.access.key": "k",
        "fs.s3a.secret.key": "s",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.connection.ssl.enabled": "false",
    }


def test_aws_with_a_session_token_and_virtual_addressing() -> None:
    got = s3a_options(
        {
            "s3.endpoint": "https://s3.eu-west-1.amazonaws.com",
            "s3.region": "eu-west-1",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.session-token": "t",
            "s3.force-virtual-addressing": "true",
        }
    )
    assert "fs.s3a.path.style.access" not in got and "fs.s3a.connection.ssl.enabled" not in got
    assert got["fs.s3a.endpoint.region"] == "eu-west-1" and got["fs.s3a.session.token"] == "t"
    assert got["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert s3a_options({})["fs.s3.impl"] == S3A  # the instance's own credentials chain otherwise


def test_only_a_job_reading_s3_needs_the_s3a_jars(tmp_path: Path) -> None:
    def job(catalog: dict[str, str]) -> object:
        return parse_config(
            {
                "name": "j",
                "mode": "live",
                "pipeline": "spark_app.examples.copy:pipeline",
                "catalogs": {"default": {"type": "sql", "uri": "sqlite:///x.db", **catalog}},
                "sources": {"impressions": {"kind": "icebergLive", "table": "demo.impressions"}},
                "sinks": {"copy": {"kind": "console"}},
                "checkpoint": {"location": str(tmp_path)},
            }
        )

    assert on_s3("s3://bucket/wh") and on_s3("s3a://b/x") and not on_s3("file:///tmp/wh")
    local = job({"warehouse": "file:///tmp/wh"})
    assert not reads_s3(local) and s3a_jars(local) == []  # type: ignore[arg-type]
    remote = job({"warehouse": "s3://bucket/wh", "s3.endpoint": "http://127.0.0.1:1"})
    assert reads_s3(remote)  # type: ignore[arg-type]
    shipped = tmp_path / "jars"
    shipped.mkdir()
    (shipped / "hadoop-aws-3.5.0.jar").touch()
    assert s3a_jars(remote, shipped) == []  # type: ignore[arg-type]  # a Spark image has them
