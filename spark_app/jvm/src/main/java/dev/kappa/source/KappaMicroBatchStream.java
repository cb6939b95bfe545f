package dev.kappa.source;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.paths.SparkPath;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.datasources.FilePartition;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetOptions;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.execution.datasources.v2.parquet.ParquetPartitionReaderFactory;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.util.LongAccumulator;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.SerializableConfiguration$;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The micro-batch stream Spark drives. It decides nothing: offsets, limits and the tasks of a
 * batch come from the Python planner ({@link AdmissionPlanner}); this class turns the tasks
 * into Spark's own {@link FilePartition}s and reads them with Spark's own Parquet reader
 * (vectorized, columnar, the same one {@code spark.read.parquet} uses). A time slice travels
 * as constant columns of its file, {@code _kappa_lo_i} and {@code _kappa_hi_i} (several ranges
 * of one file read in one pass); the reader hands on only the rows of those ranges
 * ({@link SliceReaderFactory}), and the query the runtime builds filters on them too.
 */
final class KappaMicroBatchStream
    implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow, ReportsSourceMetrics {
  /** Bytes of decoded rows an executor keeps for later slices ({@link DecodedRows}); unset: a tenth of its heap. */
  static final String DECODED_ROWS_MAX_BYTES = "spark.kappa.source.decodedRows.maxBytes";
  static final String PREFIX = "_kappa_";
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final scala.collection.immutable.Map<String, Object> NO_METADATA =
      scala.collection.immutable.Map$.MODULE$.empty();

  private final AdmissionPlanner planner;
  private final String key;
  private final StructType dataSchema;
  private final StructType partitionSchema;
  private final CaseInsensitiveStringMap options;
  private final LongAccumulator scanned;
  private final LongAccumulator reused;

  KappaMicroBatchStream(String key, StructType schema, CaseInsensitiveStringMap options) {
    this.key = key;
    this.planner = Planners.get(key);
    this.options = options;
    List<StructField> data = new ArrayList<>();
    List<StructField> slice = new ArrayList<>();
    for (StructField f : schema.fields()) {
      if (f.name().startsWith(PREFIX)) {
        slice.add(f);
      } else if (!slice.isEmpty()) {
        throw new IllegalArgumentException("the kappa-iceberg schema must end with its " + PREFIX + " columns: " + schema);
      } else {
        data.add(f);
      }
    }
    if (slice.isEmpty() || slice.size() % 2 != 0) {
      throw new IllegalArgumentException("the kappa-iceberg schema needs pairs of " + PREFIX + " columns: " + schema);
    }
    this.dataSchema = new StructType(data.toArray(new StructField[0]));
    this.partitionSchema = new StructType(slice.toArray(new StructField[0]));
    org.apache.spark.SparkContext sc = SparkSession.active().sparkContext();
    this.scanned = sc.longAccumulator("kappa-iceberg[" + key + "] scanned rows");
    this.reused = sc.longAccumulator("kappa-iceberg[" + key + "] reused rows");
  }

  /** Rows decoded from Parquet, and rows served from a file's earlier read, since the query started. */
  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    return Map.of("scannedRows", Long.toString(scanned.value()), "reusedRows", Long.toString(reused.value()));
  }

  @Override
  public Offset initialOffset() {
    return new KappaOffset(planner.initialOffset());
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new KappaOffset(json);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("kappa-iceberg admits through latestOffset(start, limit)");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    return new KappaOffset(planner.latestOffset(start.json(), limitJson(limit)));
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return readLimit(planner.defaultReadLimit());
  }

  /** The planner's read limit, {"kind": "all"|"maxFiles"|"maxRows"|"maxBytes", "value": n}, as Spark's. */
  static ReadLimit readLimit(String json) {
    JsonNode limit = parse(json);
    long value = limit.path("value").asLong();
    switch (limit.path("kind").asText("all")) {
      case "maxFiles":
        return ReadLimit.maxFiles((int) value);
      case "maxRows":
        return ReadLimit.maxRows(value);
      case "maxBytes":
        return ReadLimit.maxBytes(value);
      default:
        return ReadLimit.allAvailable();
    }
  }

  static String limitJson(ReadLimit limit) {
    if (limit instanceof ReadMaxFiles) {
      return "{\"kind\":\"maxFiles\",\"value\":" + ((ReadMaxFiles) limit).maxFiles() + "}";
    }
    if (limit instanceof ReadMaxRows) {
      return "{\"kind\":\"maxRows\",\"value\":" + ((ReadMaxRows) limit).maxRows() + "}";
    }
    if (limit instanceof ReadMaxBytes) {
      return "{\"kind\":\"maxBytes\",\"value\":" + ((ReadMaxBytes) limit).maxBytes() + "}";
    }
    return "{\"kind\":\"all\"}";
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    return partitions(planner.plan(start.json(), end.json()), partitionSchema.length());
  }

  /**
   * The planner's tasks ({@link AdmissionPlanner#plan}) as Spark's partitions: one
   * {@link SlicePartition} per task, its pieces' time ranges as {@code sliceColumns} constant columns.
   */
  static InputPartition[] partitions(String json, int sliceColumns) {
    JsonNode tasks = parse(json);
    FilePartition[] partitions = new FilePartition[tasks.size()];
    long[][][][] keeps = new long[tasks.size()][][][];
    boolean sliced = false;
    for (int i = 0; i < tasks.size(); i++) {
      JsonNode pieces = tasks.get(i);
      PartitionedFile[] files = new PartitionedFile[pieces.size()];
      keeps[i] = new long[pieces.size()][][];
      for (int j = 0; j < pieces.size(); j++) {
        JsonNode p = pieces.get(j);
        JsonNode ranges = p.get("ranges");
        sliced |= ranges != null && ranges.size() > 0;
        InternalRow slice = sliceRow(ranges, sliceColumns);
        files[j] = new PartitionedFile(
            slice,
            SparkPath.fromUrlString(p.get("path").asText()),
            p.get("start").asLong(),
            p.get("length").asLong(),
            new String[0],
            0L,
            p.get("fileSize").asLong(),
            NO_METADATA);
        keeps[i][j] = timeRanges(p.get("keep"));
      }
      partitions[i] = new FilePartition(i, files);
    }
    InputPartition[] out = new InputPartition[tasks.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = new SlicePartition(partitions[i], keeps[i], sliced);
    }
    return out;
  }

  static long[][] timeRanges(JsonNode ranges) {
    int n = ranges == null ? 0 : ranges.size();
    long[][] out = new long[n][];
    for (int i = 0; i < n; i++) {
      out[i] = new long[] {ranges.get(i).get(0).asLong(), ranges.get(i).get(1).asLong()};
    }
    return out;
  }

  /** The piece's time ranges [lo, hi) in µs as the constant columns lo_0, hi_0, lo_1, ...; unused ones null. */
  static InternalRow sliceRow(JsonNode ranges, int columns) {
    Object[] values = new Object[columns];
    int n = ranges == null ? 0 : ranges.size();
    if (2 * n > columns) {
      throw new IllegalArgumentException("a piece has " + n + " time ranges, more than the " + columns / 2 + " columns");
    }
    for (int i = 0; i < n; i++) {
      values[2 * i] = ranges.get(i).get(0).asLong();
      values[2 * i + 1] = ranges.get(i).get(1).asLong();
    }
    return new GenericInternalRow(values);
  }

  /** Built the way Spark's own ParquetScan builds it, over the schema the runtime asked for. */
  @Override
  public PartitionReaderFactory createReaderFactory() {
    org.apache.spark.sql.classic.SparkSession spark =
        (org.apache.spark.sql.classic.SparkSession) SparkSession.active();
    SQLConf conf = spark.sessionState().conf();
    Configuration hadoop = spark.sessionState().newHadoopConfWithOptions(
        CollectionConverters.asScala(options.asCaseSensitiveMap()).toMap(scala.$less$colon$less$.MODULE$.refl()));
    String requested = dataSchema.json();
    hadoop.set("parquet.read.support.class", ParquetReadSupport.class.getName());
    hadoop.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), requested);
    hadoop.set(ParquetWriteSupport.SPARK_ROW_SCHEMA(), requested);
    hadoop.set(SQLConf.SESSION_LOCAL_TIMEZONE().key(), conf.sessionLocalTimeZone());
    hadoop.setBoolean(SQLConf.NESTED_SCHEMA_PRUNING_ENABLED().key(), conf.nestedSchemaPruningEnabled());
    hadoop.setBoolean(SQLConf.CASE_SENSITIVE().key(), conf.caseSensitiveAnalysis());
    hadoop.setBoolean(SQLConf.PARQUET_BINARY_AS_STRING().key(), conf.isParquetBinaryAsString());
    hadoop.setBoolean(SQLConf.PARQUET_INT96_AS_TIMESTAMP().key(), conf.isParquetINT96AsTimestamp());
    hadoop.setBoolean(SQLConf.PARQUET_INFER_TIMESTAMP_NTZ_ENABLED().key(), conf.parquetInferTimestampNTZEnabled());
    hadoop.setBoolean(SQLConf.LEGACY_PARQUET_NANOS_AS_LONG().key(), conf.legacyParquetNanosAsLong());
    hadoop.setBoolean(
        SQLConf.PARQUET_READER_RESPECT_UNKNOWN_TYPE_ANNOTATION().key(), conf.parquetReaderRespectUnknownTypeAnnotation());
    // Iceberg matches columns by field id (renames keep their id): so does this read when the
    // runtime put the ids on the schema.
    hadoop.setBoolean(SQLConf.PARQUET_FIELD_ID_READ_ENABLED().key(), true);
    Broadcast<SerializableConfiguration> broadcast = SerializableConfiguration$.MODULE$.broadcast(spark.sparkContext(), hadoop);
    ParquetOptions parquetOptions = new ParquetOptions(
        CollectionConverters.asScala(options.asCaseSensitiveMap()).toMap(scala.$less$colon$less$.MODULE$.refl()), conf);
    ParquetPartitionReaderFactory parquet = new ParquetPartitionReaderFactory(
        conf, broadcast, dataSchema, dataSchema, partitionSchema, new Filter[0], Option.empty(), parquetOptions);
    String ordering = options.get("ordering");
    if (ordering == null) {
      throw new IllegalArgumentException("kappa-iceberg needs the option `ordering` (the event-time column)");
    }
    long maxBytes = Long.parseLong(conf.getConfString(DECODED_ROWS_MAX_BYTES, "-1"));
    List<StructField> all = new ArrayList<>(Arrays.asList(dataSchema.fields()));
    all.addAll(Arrays.asList(partitionSchema.fields()));
    StructType readSchema = new StructType(all.toArray(new StructField[0]));
    return new SliceReaderFactory(parquet, dataSchema, readSchema, ordering, key, maxBytes, scanned, reused);
  }

  @Override
  public void commit(Offset end) {
    planner.commit(end.json());
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    planner.prepareForTriggerAvailableNow();
  }

  @Override
  public void stop() {
    try {
      planner.stop();
    } finally {
      DecodedRows.dropOwner(key);
      Planners.unregister(key);
    }
  }

  @Override
  public String toString() {
    return "kappa-iceberg[" + key + "]";
  }

  private static JsonNode parse(String json) {
    try {
      return JSON.readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException("the kappa planner answered with invalid JSON: " + json, e);
    }
  }
}
