package dev.kappa.source;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.readStream.format("dev.kappa.source.KappaSource").schema(s).option("planner", key)}:
 * the aligned Iceberg source's data path. The schema is given by the runtime (the table's
 * columns as Spark reads them from Parquet, then the slice bounds {@code _kappa_lo},
 * {@code _kappa_hi}), so nothing is inferred here.
 */
public final class KappaSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "kappa-iceberg";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    throw new IllegalArgumentException("the kappa-iceberg source needs the schema its runtime gives it (.schema(...))");
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new KappaTable(schema);
  }

  static final class KappaTable implements Table, SupportsRead {
    private final StructType schema;

    KappaTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "kappa-iceberg";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new KappaScan(schema, options);
    }
  }

  static final class KappaScan implements Scan {
    private final StructType schema;
    private final CaseInsensitiveStringMap options;

    KappaScan(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      this.options = options;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return "kappa-iceberg[" + options.get("planner") + "]";
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      String key = options.get("planner");
      if (key == null) {
        throw new IllegalArgumentException("the kappa-iceberg source needs option \"planner\"");
      }
      return new KappaMicroBatchStream(key, schema, options);
    }
  }
}
