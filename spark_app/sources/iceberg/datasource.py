"""``spark.readStream.format("kappa-iceberg").option("spec", <SourceSpec JSON>)``.

The runtime registers this data source and builds one per configured Iceberg source. The
schema is the (projected) table schema mapped to Spark, identical for the live and the
backfill candidate of a source.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_app.catalogs import load_table
from spark_app.errors import ConfigError
from spark_app.sources.iceberg.schema import ordering_field, project, spark_schema
from spark_app.sources.iceberg.spec import SourceSpec
from spark_app.sources.iceberg.stream import BackfillReader, LiveReader

FORMAT = "kappa-iceberg"


class KappaIcebergDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    @property
    def spec(self) -> SourceSpec:
        raw = self.options.get("spec")
        if raw is None:
            raise ConfigError(f'the {FORMAT} source needs option "spec" (a SourceSpec as JSON)')
        return SourceSpec.model_validate_json(raw)

    def schema(self) -> StructType:
        spec = self.spec
        table = load_table(spec.catalog_name, spec.catalog, spec.source.table)
        ordering_field(table.schema(), spec.ordering_column, spec.source.table)
        return spark_schema(project(table.schema(), spec.source.columns, spec.source.table))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        spec = self.spec
        if spec.source.kind == "icebergBackfill":
            return BackfillReader(spec, schema)
        return LiveReader(spec, schema)
