package dev.kappa.source;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.v2.parquet.ParquetPartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.LongAccumulator;

/**
 * Reads a batch's pieces with Spark's own Parquet reader and hands on only the rows of each
 * piece's time slice, so Spark counts as input ({@code numInputRows}) the rows delivered; the
 * rows decoded are counted apart ({@code scanned}). A piece's first read keeps the rows of the
 * file's later slices ({@link DecodedRows}); a later piece served from them is not decoded
 * again ({@code reused}). A batch of whole files (no time slices) is read in columnar batches,
 * as {@code spark.read.parquet} reads it.
 */
final class SliceReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final ParquetPartitionReaderFactory parquet;
  private final StructType dataSchema;
  private final StructType readSchema;
  private final int[] ordering;
  private final int[] widths;
  private final String owner;
  private final String key;
  private final long maxBytes;
  private final LongAccumulator scanned;
  private final LongAccumulator reused;

  SliceReaderFactory(
      ParquetPartitionReaderFactory parquet,
      StructType dataSchema,
      StructType readSchema,
      String orderingColumn,
      String owner,
      long maxBytes,
      LongAccumulator scanned,
      LongAccumulator reused) {
    this.parquet = parquet;
    this.dataSchema = dataSchema;
    this.readSchema = readSchema;
    String[] names = orderingColumn.split("\\.");
    this.ordering = new int[names.length];
    this.widths = new int[names.length];
    StructType level = dataSchema;
    for (int i = 0; i < names.length; i++) {
      ordering[i] = level.fieldIndex(names[i]);
      widths[i] = level.fields().length;
      if (i + 1 < names.length) {
        level = (StructType) level.fields()[ordering[i]].dataType();
      }
    }
    this.owner = owner;
    this.key = Integer.toHexString(dataSchema.json().hashCode()) + "|";
    this.maxBytes = maxBytes;
    this.scanned = scanned;
    this.reused = reused;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    SlicePartition p = (SlicePartition) partition;
    return !p.rows && parquet.supportColumnarReads(p.files);
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    PartitionReader<ColumnarBatch> batches = parquet.createColumnarReader(((SlicePartition) partition).files);
    return new PartitionReader<>() {
      private long rows;

      @Override
      public boolean next() throws IOException {
        boolean more = batches.next();
        if (more) {
          rows += batches.get().numRows();
        }
        return more;
      }

      @Override
      public ColumnarBatch get() {
        return batches.get();
      }

      @Override
      public void close() throws IOException {
        scanned.add(rows);
        rows = 0;
        batches.close();
      }
    };
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    DecodedRows.bound(maxBytes);
    return new SliceRows((SlicePartition) partition);
  }

  /** A row without an event time: in no time range (Long.MIN_VALUE µs is before any timestamp Spark reads). */
  static final long NO_TIME = Long.MIN_VALUE;

  /** The event time (µs) of a row as read, or {@link #NO_TIME}: unboxed, it is asked of every row. */
  static long time(InternalRow row, int[] ordering, int[] widths) {
    InternalRow level = row;
    int last = ordering.length - 1;
    for (int i = 0; i < last; i++) {
      if (level.isNullAt(ordering[i])) {
        return NO_TIME;
      }
      level = level.getStruct(ordering[i], widths[i + 1]);
    }
    return level.isNullAt(ordering[last]) ? NO_TIME : level.getLong(ordering[last]);
  }

  /** The piece's time ranges, from its constant columns (pairs; unused ones null). */
  static long[][] ranges(InternalRow slice) {
    List<long[]> out = new ArrayList<>();
    for (int i = 0; i + 1 < slice.numFields(); i += 2) {
      if (!slice.isNullAt(i) && !slice.isNullAt(i + 1)) {
        out.add(new long[] {slice.getLong(i), slice.getLong(i + 1)});
      }
    }
    return out.toArray(new long[0][]);
  }

  private final class SliceRows implements PartitionReader<InternalRow> {
    private final PartitionedFile[] files;
    private final long[][][] keep;
    private final UnsafeProjection dataOnly = UnsafeProjection.create(dataSchema);
    private final UnsafeProjection withSlice = UnsafeProjection.create(readSchema);
    private final JoinedRow joined = new JoinedRow();
    private int index = -1;
    private PartitionedFile file;
    private long[][] ranges;
    private long[][] later;
    private PartitionReader<InternalRow> decoding;
    private java.util.Iterator<UnsafeRow> served;
    private List<Long> keptTimes;
    private List<UnsafeRow> keptRows;
    private long keptBytes;
    private InternalRow current;
    private long scannedRows;
    private long reusedRows;

    SliceRows(SlicePartition partition) {
      this.files = partition.files.files();
      this.keep = partition.keep;
    }

    @Override
    public boolean next() throws IOException {
      while (true) {
        if (served != null) {
          if (served.hasNext()) {
            current = withSlice.apply(joined.apply(served.next(), file.partitionValues()));
            reusedRows++;
            return true;
          }
          served = null;
        } else if (decoding != null) {
          if (decoding.next()) {
            InternalRow row = decoding.get();
            scannedRows++;
            if (ranges.length == 0) {
              current = row;
              return true;
            }
            long t = time(row, ordering, widths);
            if (t == NO_TIME) {
              continue;
            }
            if (keptRows != null && DecodedRows.inAny(t, later)) {
              keepRow(t, row);
            }
            if (DecodedRows.inAny(t, ranges)) {
              current = row;
              return true;
            }
            continue;
          }
          finishFile();
        }
        if (!openNext()) {
          return false;
        }
      }
    }

    private void keepRow(long t, InternalRow row) {
      UnsafeRow copy = dataOnly.apply(row).copy();
      keptBytes += copy.getSizeInBytes() + 24L;
      if (keptBytes > DecodedRows.maxBytes()) {
        keptRows = null;
        keptTimes = null;
        return;
      }
      keptTimes.add(t);
      keptRows.add(copy);
    }

    private boolean openNext() {
      index++;
      if (index >= files.length) {
        return false;
      }
      file = files[index];
      ranges = ranges(file.partitionValues());
      later = keep[index];
      long start = file.start();
      long end = start + file.length();
      String path = key + file.filePath().urlEncoded();
      if (ranges.length > 0) {
        List<UnsafeRow> rows = DecodedRows.take(path, start, end, ranges);
        if (rows != null) {
          served = rows.iterator();
          return true;
        }
      }
      decoding = parquet.buildReader(file);
      boolean keeping = ranges.length > 0 && later.length > 0 && DecodedRows.maxBytes() > 0;
      keptRows = keeping ? new ArrayList<>() : null;
      keptTimes = keeping ? new ArrayList<>() : null;
      keptBytes = 0;
      return true;
    }

    private void finishFile() throws IOException {
      decoding.close();
      decoding = null;
      if (keptRows != null && !keptRows.isEmpty()) {
        Integer[] order = new Integer[keptRows.size()];
        for (int i = 0; i < order.length; i++) {
          order[i] = i;
        }
        Arrays.sort(order, (a, b) -> Long.compare(keptTimes.get(a), keptTimes.get(b)));
        long[] times = new long[order.length];
        UnsafeRow[] rows = new UnsafeRow[order.length];
        for (int i = 0; i < order.length; i++) {
          times[i] = keptTimes.get(order[i]);
          rows[i] = keptRows.get(order[i]);
        }
        long start = file.start();
        DecodedRows.put(new DecodedRows.Entry(
            owner, key + file.filePath().urlEncoded(), start, start + file.length(), later, times, rows));
      }
      keptRows = null;
      keptTimes = null;
    }

    @Override
    public InternalRow get() {
      return current;
    }

    @Override
    public void close() throws IOException {
      scanned.add(scannedRows);
      reused.add(reusedRows);
      scannedRows = 0;
      reusedRows = 0;
      keptRows = null;
      if (decoding != null) {
        decoding.close();
        decoding = null;
      }
    }
  }
}
