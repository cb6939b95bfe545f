package dev.kappa.source;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.FileStatusCache;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.InMemoryFileIndex;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's own Parquet relation over data files whose sizes an Iceberg table's manifests already
 * gave, made without asking the store for a single status.
 *
 * <p>{@code spark.read.parquet(paths)} asks for each path's status before planning: past 32 paths
 * in a Spark job, one round trip per file on an object store. On a new executor that job cost 2-3
 * s of a 25 s Backfill (127 files on S3, bench/node.py). The manifests say everything Spark's
 * planner uses of a status (the path and its length), so the index is made from them: its file
 * status cache answers every path, and nothing is listed. What Spark then does (splits, the scan,
 * {@code _metadata}, filters pushed into the reader) is what it does for {@code spark.read}.
 */
public final class KnownFiles {
  private KnownFiles() {}

  /**
   * The relation over {@code paths} (each {@code sizes[i]} bytes long), read with {@code
   * schemaJson} (a Spark {@code StructType} as JSON: its field ids kept) and the Hadoop {@code
   * options} (an object store's settings).
   */
  public static Dataset<Row> parquet(
      SparkSession spark, List<String> paths, List<? extends Number> sizes, String schemaJson, Map<String, String> options) {
    if (paths.size() != sizes.size()) {
      throw new IllegalArgumentException(paths.size() + " paths but " + sizes.size() + " sizes");
    }
    scala.collection.immutable.Map<String, String> opts = scala.collection.immutable.Map$.MODULE$.from(
        CollectionConverters.asScala(options));
    Configuration conf = spark.sessionState().newHadoopConfWithOptions(opts);
    List<Path> roots = new ArrayList<>(paths.size());
    List<FileStatus> statuses = new ArrayList<>(paths.size());
    for (int i = 0; i < paths.size(); i++) {
      Path path = qualified(new Path(paths.get(i)), conf);
      roots.add(path);
      // no block size or modification time is known or used: splits are cut by
      // spark.sql.files.maxPartitionBytes, and nothing here is cached across reads
      statuses.add(new FileStatus(sizes.get(i).longValue(), false, 1, 0L, 0L, path));
    }
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    InMemoryFileIndex index = new InMemoryFileIndex(
        spark,
        CollectionConverters.asScala(roots).toSeq(),
        opts,
        Option.apply(schema),
        new Statuses(statuses),
        Option.empty(),
        Option.empty());
    HadoopFsRelation relation = new HadoopFsRelation(
        index, new StructType(), schema, Option.empty(), new ParquetFileFormat(), opts, spark);
    return spark.baseRelationToDataFrame(relation);
  }

  private static Path qualified(Path path, Configuration conf) {
    try {
      return path.getFileSystem(conf).makeQualified(path);
    } catch (IOException e) {
      throw new UncheckedIOException("no file system for " + path + ": " + e.getMessage(), e);
    }
  }

  /** Each file's own status, as the manifests gave it: the index finds every path here. */
  static final class Statuses extends FileStatusCache {
    private final Map<Path, FileStatus[]> byPath = new java.util.HashMap<>();

    Statuses(List<FileStatus> statuses) {
      for (FileStatus status : statuses) {
        byPath.put(status.getPath(), new FileStatus[] {status});
      }
    }

    @Override
    public Option<FileStatus[]> getLeafFiles(Path path) {
      return Option.apply(byPath.get(path));
    }

    @Override
    public void putLeafFiles(Path path, FileStatus[] leafFiles) {}

    @Override
    public void invalidateAll() {}
  }
}
