"""How the JVM reader opens a table's data files on S3: pyiceberg's FileIO properties as
Hadoop S3A settings.

pyiceberg reads ``s3://`` through pyarrow with ``s3.*`` properties (the catalog's, and those
a REST catalog vends with the table); Spark's Parquet reader opens files through Hadoop, whose
S3A filesystem takes ``fs.s3a.*``. The settings go into the source's options, which Spark puts
into the Hadoop configuration of exactly that scan. S3A itself (``hadoop-aws`` and the AWS SDK's
S3 modules) is on the Spark image's classpath, or fetched for a local session that reads S3
(``spark_app.jars``, bundle ``hadoop-aws``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_DIRECT = {
    "s3.endpoint": "fs.s3a.endpoint",
    "s3.access-key-id": "fs.s3a.access.key",
    "s3.secret-access-key": "fs.s3a.secret.key",
    "s3.session-token": "fs.s3a.session.token",
    "s3.region": "fs.s3a.endpoint.region",
    "s3.proxy-uri": "fs.s3a.proxy.host",
}


def on_s3(location: str) -> bool:
    return location.startswith(("s3://", "s3a://", "s3n://"))


def s3a_options(properties: Mapping[str, str]) -> dict[str, str]:
    """The Hadoop settings that read what ``properties`` lets pyiceberg read (``s3`` and ``s3a``
    schemes alike). Path-style access unless virtual addressing is asked for: an endpoint set
    explicitly is usually MinIO, moto or another S3 API that serves buckets by path."""
    out = {"fs.s3.impl": S3A, "fs.s3a.impl": S3A}
    out.update({hadoop: str(properties[key]) for key, hadoop in _DIRECT.items() if properties.get(key)})
    virtual = str(properties.get("s3.force-virtual-addressing", "")).lower() == "true"
    if properties.get("s3.endpoint") and not virtual:
        out["fs.s3a.path.style.access"] = "true"
    if properties.get("s3.access-key-id"):
        provider = (
            "TemporaryAWSCredentialsProvider" if properties.get("s3.session-token") else "SimpleAWSCredentialsProvider"
        )
        out["fs.s3a.aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
    if str(properties.get("s3.anonymous", "")).lower() == "true":
        out["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
    if str(properties.get("s3.endpoint", "")).startswith("http://"):
        out["fs.s3a.connection.ssl.enabled"] = "false"
    return out
