package dev.kappa.source;

/**
 * The Python planner, as the JVM sees it: every decision of the aligned source (which splits a
 * batch admits, under the drift bound, the read-rate cap and the admission rounds) is taken by
 * the one Python implementation, in the driver's own Python process, through a py4j callback.
 * The JVM side only reads what was admitted. Offsets and plans travel as JSON strings so the
 * contract stays the same whatever carries it.
 */
public interface AdmissionPlanner {
  /** The offset of a query that has no checkpoint yet (JSON). */
  String initialOffset();

  /** The source's own read limit: {"kind": "all"|"maxFiles"|"maxRows"|"maxBytes", "value": n}. */
  String defaultReadLimit();

  /** The end offset of the next batch from {@code start} under {@code limit} (both JSON). */
  String latestOffset(String start, String limit);

  /**
   * The tasks that read the batch [start, end): a JSON list of tasks, each a list of pieces
   * {"path", "start", "length", "fileSize", "ranges", "keep"} (byte range of whole row groups;
   * ranges: the time slices [lo, hi) in microseconds whose rows the piece delivers, empty for all
   * rows; keep: the time ranges of the file's later slices whose rows the read keeps).
   */
  String plan(String start, String end);

  /** Spark committed everything up to {@code end}. */
  void commit(String end);

  /** Trigger.AvailableNow: read up to what exists now, then stop. */
  void prepareForTriggerAvailableNow();

  /** The query stopped. */
  void stop();
}
