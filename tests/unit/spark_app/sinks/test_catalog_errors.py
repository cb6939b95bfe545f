"""A table that is not found names the fix: the catalog asked (properties redacted), what it
holds, and, for a SQL catalog opened under another name, the name the tables were created under.
Real SqlCatalogs on SQLite; no Spark."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import MagicMock

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from spark_app.catalogs import load_table, missing_table_message, redacted
from spark_app.contract.errors import ConfigError
from spark_app.sinks.iceberg.table import load_or_create

SECRET = "s3cr3t-value"


@pytest.fixture
def props(tmp_path: Path) -> dict[str, str]:
    """A database whose tables were created under the catalog name 'lake'."""
    p = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/c.db",
        "warehouse": f"file://{tmp_path}/wh",
        "s3.secret-access-key": SECRET,
        "token": SECRET,
    }
    lake = SqlCatalog("lake", **{k: v for k, v in p.items() if k != "type"})
    lake.create_namespace("demo")
    for name in ("plays", "impressions"):
        lake.create_table(f"demo.{name}", Schema(NestedField(1, "id", StringType(), required=False)))
    return p


def test_a_catalog_under_another_name_says_which_name_the_tables_are_under(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_table("default", props, "demo.plays")
    message = str(err.value)
    assert message.startswith("table demo.plays does not exist in catalog 'default'")
    assert "This database holds demo.plays under catalog name(s) 'lake'" in message
    assert "rename catalogs.default to 'lake'" in message
    assert "the name the tables were created under" in message
    assert "catalog 'default' has no namespace" in message
    # which properties: named, secrets hidden
    assert f"'uri': '{props['uri']}'" in message and f"'warehouse': '{props['warehouse']}'" in message
    assert "'s3.secret-access-key': '***'" in message and "'token': '***'" in message
    assert SECRET not in message


def test_a_table_missing_under_every_name_lists_what_the_database_has(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_table("default", props, "demo.nope")
    message = str(err.value)
    assert "no demo.nope under any catalog name, but holds tables under 'lake' (2 tables)" in message
    assert "rename catalogs.default to it" in message and SECRET not in message
    with pytest.raises(ConfigError) as err:
        load_table("lake", props, "demo.nope")
    message = str(err.value)
    assert "catalog 'lake' has namespace(s) demo; tables in 'demo': demo.impressions, demo.plays" in message
    assert "SQL catalog" not in message, "the right name: no rename hint"


def test_a_non_sql_catalog_gets_the_listing_without_the_sql_hint() -> None:
    rest = MagicMock(spec=Catalog)
    rest.name, rest.properties = "prod", {"uri": "https://user:pw@rest.example/api", "credential": "id:secret"}
    rest.list_namespaces.return_value = [("demo",), ("raw",)]
    rest.list_tables.return_value = [("demo", "plays")]
    message = missing_table_message(rest, "demo.play")
    assert message.startswith("table demo.play does not exist in catalog 'prod'")
    assert "'uri': 'https://user:***@rest.example/api'" in message and "'credential': '***'" in message
    assert "pw@" not in message and "secret" not in message
    assert "namespace(s) demo, raw; tables in 'demo': demo.plays" in message
    assert "SQL catalog" not in message and "catalogs.prod points at the catalog that holds it" in message


def test_redaction_covers_keys_named_like_secrets_and_url_passwords() -> None:
    assert redacted(
        {
            "s3.access-key-id": "AK",
            "adls.account-key": "k",
            "rest.password": "p",
            "uri": "postgresql://kappa:hunter2@db:5432/cat",
            "warehouse": "s3://bucket/wh",
        }
    ) == {
        "s3.access-key-id": "***",
        "adls.account-key": "***",
        "rest.password": "***",
        "uri": "postgresql://kappa:***@db:5432/cat",
        "warehouse": "s3://bucket/wh",
    }


def test_the_sink_does_not_create_a_second_table_under_a_renamed_catalog(props: dict[str, str]) -> None:
    renamed = SqlCatalog("default", **{k: v for k, v in props.items() if k != "type"})
    schema = pa.schema([pa.field("id", pa.string())])
    with pytest.raises(ConfigError) as err:
        load_or_create(renamed, "demo.plays", schema, [])
    message = str(err.value)
    assert "under catalog name(s) 'lake'" in message and "rename catalogs.default to 'lake'" in message
    assert "Not creating it" in message and SECRET not in message
    assert renamed.list_namespaces() == [], "nothing was created under the wrong name"
    created = load_or_create(renamed, "demo.fresh", schema, [])  # a table new to every name is created
    assert created.name() == ("demo", "fresh")
