package dev.kappa.source;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.datasources.FilePartition;

/**
 * One task's reads: Spark's {@link FilePartition} of file pieces, and for each piece the time
 * ranges of the file's later slices ({@code keep[i]}, [lo, hi) in µs; empty: none), whose rows the
 * read keeps for them ({@link DecodedRows}). {@code rows}: the batch is read row by row (some
 * piece of it is a time slice); a batch of whole files is read in columnar batches.
 */
final class SlicePartition implements InputPartition {
  final FilePartition files;
  final long[][][] keep;
  final boolean rows;

  SlicePartition(FilePartition files, long[][][] keep, boolean rows) {
    this.files = files;
    this.keep = keep;
    this.rows = rows;
  }

  @Override
  public String[] preferredLocations() {
    return files.preferredLocations();
  }
}
