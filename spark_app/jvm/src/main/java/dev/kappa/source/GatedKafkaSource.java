package dev.kappa.source;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's own Kafka source behind a gate: the live half of a job that starts from a topic's
 * Iceberg archive and goes on to Kafka in the same query (a hybrid source, as Flink's
 * FLIP-150). While the archive is read the gate is closed and the stream answers "no new
 * data" from its first offset, which is where the archive ends; once the archive is read the
 * runtime restarts the query (same checkpoint) with the gate open and every call goes to
 * Spark's Kafka stream unchanged: its offsets, its checkpointed start, its metrics and its
 * readers. It decides nothing and never reads a record itself; Kafka's classes are found at
 * run time (the connector jar is on the session's classpath), so nothing here is compiled
 * against them.
 */
public final class GatedKafkaSource implements TableProvider, DataSourceRegister {
  static final String KAFKA = "org.apache.spark.sql.kafka010.KafkaSourceProvider";
  /** "open" or "closed" (the default: a gate opens only when told). */
  static final String GATE = "kappa.gate";
  /**
   * A blue/green upgrade's green: the file (any Hadoop filesystem URI) holding the running
   * version's durable offsets, {@code {"topic": {"partition": offset}}}, which an open gate never
   * reads past ({@link TrailCap}); no file yet: nothing new is read.
   */
  static final String TRAIL = "kappa.trail";

  /** Found when first used, not when built: Spark may instantiate a provider just to list it. */
  private static TableProvider kafka() {
    try {
      ClassLoader loader = Thread.currentThread().getContextClassLoader();
      return (TableProvider) Class.forName(KAFKA, true, loader).getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException | LinkageError e) {
      throw new IllegalStateException(
          "Spark's Kafka connector (spark-sql-kafka-0-10) is not on the classpath: the kappa runtime adds it", e);
    }
  }

  @Override
  public String shortName() {
    return "kappa-kafka-gated";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return kafka().inferSchema(withoutGate(options));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    boolean open = "open".equalsIgnoreCase(properties.getOrDefault(GATE, "closed"));
    String trail = properties.get(TRAIL);
    Map<String, String> rest = new HashMap<>(properties);
    rest.remove(GATE);
    rest.remove(TRAIL);
    return new GatedTable(kafka().getTable(schema, partitioning, rest), open, trail);
  }

  static CaseInsensitiveStringMap withoutGate(CaseInsensitiveStringMap options) {
    Map<String, String> rest = new HashMap<>(options.asCaseSensitiveMap());
    rest.remove(GATE);
    rest.remove(TRAIL);
    return new CaseInsensitiveStringMap(rest);
  }

  static final class GatedTable implements Table, SupportsRead {
    private final SupportsRead inner;
    private final boolean open;
    private final String trail;

    GatedTable(Table inner, boolean open, String trail) {
      this.inner = (SupportsRead) inner;
      this.open = open;
      this.trail = trail;
    }

    @Override
    public String name() {
      return inner.name();
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return inner.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      ScanBuilder builder = inner.newScanBuilder(withoutGate(options));
      return () -> new GatedScan(builder.build(), open, trail);
    }
  }

  static final class GatedScan implements Scan {
    private final Scan inner;
    private final boolean open;
    private final String trail;

    GatedScan(Scan inner, boolean open, String trail) {
      this.inner = inner;
      this.open = open;
      this.trail = trail;
    }

    @Override
    public StructType readSchema() {
      return inner.readSchema();
    }

    @Override
    public String description() {
      return inner.description();
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return inner.supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
      return inner.reportDriverMetrics();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new GatedStream(inner.toMicroBatchStream(checkpointLocation), open, trail);
    }
  }

  /**
   * Every call to Spark's Kafka stream, but no offset moves while the gate is closed, and none
   * past the trail's (when it has one).
   */
  static final class GatedStream
      implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow, ReportsSourceMetrics {
    private final MicroBatchStream inner;
    private final boolean open;
    private final String trail;

    GatedStream(MicroBatchStream inner, boolean open, String trail) {
      this.inner = inner;
      this.open = open;
      this.trail = trail;
    }

    /** The trail file's offsets as written, or null while there is none. */
    private String trailed() {
      Path path = new Path(trail);
      Configuration conf = SparkSession.active().sessionState().newHadoopConf();
      try {
        FileSystem fs = path.getFileSystem(conf);
        if (!fs.exists(path)) {
          return null;
        }
        try (FSDataInputStream in = fs.open(path)) {
          return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
      } catch (IOException e) {
        throw new UncheckedIOException("reading the blue/green trail " + trail, e);
      }
    }

    @Override
    public Offset initialOffset() {
      return inner.initialOffset();
    }

    @Override
    public Offset deserializeOffset(String json) {
      return inner.deserializeOffset(json);
    }

    @Override
    public Offset latestOffset() {
      return inner.latestOffset();
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      if (!open) {
        return start;
      }
      Offset latest =
          inner instanceof SupportsAdmissionControl
              ? ((SupportsAdmissionControl) inner).latestOffset(start, limit)
              : inner.latestOffset();
      if (trail == null || latest == null) {
        return latest;
      }
      String capped = TrailCap.cap(latest.json(), start == null ? null : start.json(), trailed());
      return inner.deserializeOffset(capped);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      if (inner instanceof SupportsAdmissionControl) {
        return ((SupportsAdmissionControl) inner).getDefaultReadLimit();
      }
      return ReadLimit.allAvailable();
    }

    @Override
    public Offset reportLatestOffset() {
      return open && inner instanceof SupportsAdmissionControl
          ? ((SupportsAdmissionControl) inner).reportLatestOffset()
          : null;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      return inner.planInputPartitions(start, end);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return inner.createReaderFactory();
    }

    @Override
    public void commit(Offset end) {
      inner.commit(end);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
      if (open && inner instanceof SupportsTriggerAvailableNow) {
        ((SupportsTriggerAvailableNow) inner).prepareForTriggerAvailableNow();
      }
    }

    @Override
    public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
      if (open && inner instanceof ReportsSourceMetrics) {
        return ((ReportsSourceMetrics) inner).metrics(latestConsumedOffset);
      }
      return new HashMap<>();
    }

    @Override
    public void stop() {
      inner.stop();
    }

    @Override
    public String toString() {
      return inner.toString();
    }
  }
}
