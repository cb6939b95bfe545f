package dev.kappa.source;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.UncheckedIOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.junit.jupiter.api.Test;

/**
 * The JSON that crosses the py4j bridge between the Python planner
 * (spark_app/sources/iceberg/bridge.py, byte_ranges.py) and the JVM stream
 * ({@link KappaMicroBatchStream}, {@link AdmissionPlanner}). The fixtures are exactly what the
 * Python side writes today (json.dumps, default separators); the strings the JVM writes are
 * exactly what bridge.py's {@code limit_of} reads.
 */
class BridgeJsonTest {
  /** {@code len(SLICE_RANGES)} pairs of _kappa_lo_i/_kappa_hi_i columns (byte_ranges.SLICE_RANGES = 4). */
  private static final int SLICE_COLUMNS = 8;

  // -- the read limit the planner gives (bridge.limit_json) --------------------------------

  @Test
  void readsThePlannersReadLimits() {
    ReadLimit files = KappaMicroBatchStream.readLimit("{\"kind\": \"maxFiles\", \"value\": 5}");
    assertEquals(5, assertInstanceOf(ReadMaxFiles.class, files).maxFiles());
    ReadLimit rows = KappaMicroBatchStream.readLimit("{\"kind\": \"maxRows\", \"value\": 1000}");
    assertEquals(1000L, assertInstanceOf(ReadMaxRows.class, rows).maxRows());
    ReadLimit bytes = KappaMicroBatchStream.readLimit("{\"kind\": \"maxBytes\", \"value\": 1073741824}");
    assertEquals(1L << 30, assertInstanceOf(ReadMaxBytes.class, bytes).maxBytes());
    assertInstanceOf(ReadAllAvailable.class, KappaMicroBatchStream.readLimit("{\"kind\": \"all\"}"));
  }

  @Test
  void readsALimitWithoutKindOrOfAnUnknownKindAsAllAvailable() {
    assertInstanceOf(ReadAllAvailable.class, KappaMicroBatchStream.readLimit("{}"));
    assertInstanceOf(ReadAllAvailable.class, KappaMicroBatchStream.readLimit("{\"value\": 5}"));
    assertInstanceOf(ReadAllAvailable.class, KappaMicroBatchStream.readLimit("{\"kind\": \"minRows\", \"value\": 5}"));
  }

  @Test
  void readsALimitWithoutValueAsZero() {
    // the Python side always writes a value with a bounded kind; without one the bound is 0
    assertEquals(0L, assertInstanceOf(ReadMaxRows.class, KappaMicroBatchStream.readLimit("{\"kind\": \"maxRows\"}")).maxRows());
    assertEquals(0, assertInstanceOf(ReadMaxFiles.class, KappaMicroBatchStream.readLimit("{\"kind\": \"maxFiles\"}")).maxFiles());
  }

  @Test
  void rejectsALimitThatIsNotJson() {
    assertThrows(UncheckedIOException.class, () -> KappaMicroBatchStream.readLimit("maxFiles=5"));
  }

  // -- the read limit Spark passes to latestOffset (read by bridge.limit_of) ------------------

  @Test
  void writesSparksReadLimitsAsThePlannerReadsThem() {
    assertEquals("{\"kind\":\"maxFiles\",\"value\":5}", KappaMicroBatchStream.limitJson(ReadLimit.maxFiles(5)));
    assertEquals("{\"kind\":\"maxRows\",\"value\":1000}", KappaMicroBatchStream.limitJson(ReadLimit.maxRows(1000)));
    assertEquals(
        "{\"kind\":\"maxBytes\",\"value\":1073741824}", KappaMicroBatchStream.limitJson(ReadLimit.maxBytes(1L << 30)));
    assertEquals("{\"kind\":\"all\"}", KappaMicroBatchStream.limitJson(ReadLimit.allAvailable()));
  }

  @Test
  void writesLimitsThePlannerHasNoKindForAsAllAvailable() {
    assertEquals("{\"kind\":\"all\"}", KappaMicroBatchStream.limitJson(ReadLimit.minRows(10, 1000)));
    assertEquals(
        "{\"kind\":\"all\"}",
        KappaMicroBatchStream.limitJson(ReadLimit.compositeLimit(new ReadLimit[] {ReadLimit.maxRows(5), ReadLimit.maxFiles(2)})));
  }

  @Test
  void aLimitSurvivesTheRoundTrip() {
    for (ReadLimit limit : new ReadLimit[] {
        ReadLimit.maxFiles(7), ReadLimit.maxRows(123456789012L), ReadLimit.maxBytes(Long.MAX_VALUE), ReadLimit.allAvailable()}) {
      assertEquals(limit, KappaMicroBatchStream.readLimit(KappaMicroBatchStream.limitJson(limit)), limit.toString());
    }
  }

  // -- offsets (bridge.offset_json): kept verbatim, Spark compares them by their text ----------

  @Test
  void keepsAnOffsetsJsonVerbatim() {
    String offset =
        "{\"kind\":\"backfill\",\"plan\":\"abc123\",\"position\":0,\"snapshot_id\":\"5123456789\",\"source\":\"orders\",\"splits\":12,\"v\":1}";
    assertEquals(offset, new KappaOffset(offset).json());
    assertEquals(new KappaOffset(offset), new KappaOffset(offset));
  }

  // -- the planner's answer to plan(start, end) (stream.tasks, byte_ranges.task_pieces) --------

  /** Two tasks: whole files and a run of row groups; then two time slices of one file sharing a read. */
  static final String PLAN = "[[{\"path\": \"s3://b/t/data/a.parquet\", \"start\": 0, \"length\": 2048, \"fileSize\": 2048, "
      + "\"ranges\": [], \"keep\": []}, {\"path\": \"s3://b/t/data/b.parquet\", \"start\": 4, \"length\": 3000, "
      + "\"fileSize\": 5000, \"ranges\": [], \"keep\": []}], [{\"path\": \"file:/tmp/t/data/c.parquet\", \"start\": 300, "
      + "\"length\": 600, \"fileSize\": 900, \"ranges\": [[1000, 2000], [2000, 3000]], \"keep\": [[5000, 6000]]}]]";

  @Test
  void turnsThePlannersTasksIntoPartitions() {
    InputPartition[] partitions = KappaMicroBatchStream.partitions(PLAN, SLICE_COLUMNS);
    assertEquals(2, partitions.length);

    SlicePartition first = assertInstanceOf(SlicePartition.class, partitions[0]);
    assertEquals(0, first.files.index());
    PartitionedFile[] files = first.files.files();
    assertEquals(2, files.length);
    assertPiece(files[0], "s3://b/t/data/a.parquet", 0, 2048, 2048);
    assertPiece(files[1], "s3://b/t/data/b.parquet", 4, 3000, 5000);
    for (PartitionedFile f : files) {
      assertEquals(SLICE_COLUMNS, f.partitionValues().numFields());
      for (int c = 0; c < SLICE_COLUMNS; c++) {
        assertTrue(f.partitionValues().isNullAt(c), "a whole read's slice columns are null");
      }
    }
    assertArrayEquals(new long[][][] {{}, {}}, first.keep);
    assertTrue(first.rows, "a batch with a time slice is read row by row, every task of it");

    SlicePartition second = assertInstanceOf(SlicePartition.class, partitions[1]);
    assertEquals(1, second.files.index());
    assertEquals(1, second.files.files().length);
    PartitionedFile sliced = second.files.files()[0];
    assertPiece(sliced, "file:/tmp/t/data/c.parquet", 300, 600, 900);
    InternalRow bounds = sliced.partitionValues();
    assertEquals(1000L, bounds.getLong(0));
    assertEquals(2000L, bounds.getLong(1));
    assertEquals(2000L, bounds.getLong(2));
    assertEquals(3000L, bounds.getLong(3));
    for (int c = 4; c < SLICE_COLUMNS; c++) {
      assertTrue(bounds.isNullAt(c), "unused slice columns are null");
    }
    assertArrayEquals(new long[][][] {{{5000, 6000}}}, second.keep);
    assertTrue(second.rows);
  }

  @Test
  void readsABatchOfWholeFilesInColumnarBatches() {
    String plan = "[[{\"path\": \"s3://b/t/data/a.parquet\", \"start\": 0, \"length\": 2048, \"fileSize\": 2048, "
        + "\"ranges\": [], \"keep\": []}]]";
    SlicePartition only = assertInstanceOf(SlicePartition.class, KappaMicroBatchStream.partitions(plan, SLICE_COLUMNS)[0]);
    assertFalse(only.rows);
  }

  @Test
  void readsPiecesWithoutRangesOrKeepAsWholeReads() {
    String plan = "[[{\"path\": \"s3://b/t/data/a.parquet\", \"start\": 0, \"length\": 2048, \"fileSize\": 2048}]]";
    SlicePartition only = assertInstanceOf(SlicePartition.class, KappaMicroBatchStream.partitions(plan, SLICE_COLUMNS)[0]);
    assertFalse(only.rows);
    assertArrayEquals(new long[][][] {{}}, only.keep);
    assertTrue(only.files.files()[0].partitionValues().isNullAt(0));
  }

  @Test
  void anEmptyBatchHasNoPartitions() {
    assertEquals(0, KappaMicroBatchStream.partitions("[]", SLICE_COLUMNS).length);
  }

  @Test
  void rejectsMoreTimeRangesThanTheSliceColumnsHold() {
    String plan = "[[{\"path\": \"s3://b/t/data/c.parquet\", \"start\": 0, \"length\": 900, \"fileSize\": 900, "
        + "\"ranges\": [[1, 2], [2, 3], [3, 4], [4, 5], [5, 6]], \"keep\": []}]]";
    assertThrows(IllegalArgumentException.class, () -> KappaMicroBatchStream.partitions(plan, SLICE_COLUMNS));
  }

  private static void assertPiece(PartitionedFile f, String path, long start, long length, long fileSize) {
    assertEquals(path, f.filePath().urlEncoded());
    assertEquals(start, f.start());
    assertEquals(length, f.length());
    assertEquals(fileSize, f.fileSize());
  }
}
