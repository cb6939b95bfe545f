package dev.kappa.source;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;

/**
 * The rows of a file a later slice will read, kept by the executor that decoded them.
 *
 * <p>An ingestion file holds a minute of on-time rows and a tail of late ones; its event-time
 * range meets many admission steps, and each step's slice of it needs a read. Decoding the file
 * once per slice is what made an aligned run scan several times the rows it delivers. So the
 * first read of a file keeps the rows of its later slices ({@code keep}, from the planner) and
 * later reads of the file take their rows from here instead of decoding it again.
 *
 * <p>Correct whatever is kept: a read whose rows are not all here decodes the file as before. An
 * entry is never changed after it is put, so a retried task (or a batch re-run after a restart)
 * reads the same rows; it goes when every range it keeps was read from it once (asked for, even
 * where a range holds no row: when it goes is then the same whichever read comes first), when the
 * query that put it stops, or when a read needed sooner would pass the bound ({@link #put}). Rows of a time range all lie
 * in the row groups of that range's slice (the planner cuts slices by the rows' own times), so a
 * read of fewer bytes of the file than an entry covers finds all its rows in the entry.
 */
final class DecodedRows {
  private static final Map<String, List<Entry>> BY_PATH = new LinkedHashMap<>();
  private static final Set<Entry> ALL = new LinkedHashSet<>();
  private static long bytes;
  private static long maxBytes = Runtime.getRuntime().maxMemory() / 10;

  private DecodedRows() {}

  /** One read's kept rows, sorted by event time (µs), and what they cover. */
  static final class Entry {
    final String owner;
    final String key;
    final long start;
    final long end;
    final long[][] keep;
    final long[] times;
    final UnsafeRow[] rows;
    final long size;
    private final List<long[]> asked = new ArrayList<>();

    Entry(String owner, String key, long start, long end, long[][] keep, long[] times, UnsafeRow[] rows) {
      this.owner = owner;
      this.key = key;
      this.start = start;
      this.end = end;
      this.keep = keep;
      this.times = times;
      this.rows = rows;
      long n = 64L + 8L * times.length;
      for (UnsafeRow r : rows) {
        n += r.getSizeInBytes() + 16L;
      }
      this.size = n;
    }

    /** Whether every range lies within the kept ranges and the read within the bytes decoded. */
    boolean covers(long readStart, long readEnd, long[][] ranges) {
      if (readStart < start || readEnd > end) {
        return false;
      }
      for (long[] r : ranges) {
        if (!within(r, keep)) {
          return false;
        }
      }
      return true;
    }

    /** The kept rows in the ranges ([lo, hi) each), in time order per range. */
    List<UnsafeRow> in(long[][] ranges) {
      List<UnsafeRow> out = new ArrayList<>();
      for (long[] r : ranges) {
        int from = lowerBound(times, r[0]);
        int to = lowerBound(times, r[1]);
        for (int i = from; i < to; i++) {
          out.add(rows[i]);
        }
        asked.add(r.clone());
      }
      return out;
    }

    /** When a read first needs these rows: the start of the earliest kept range. */
    long nextUse() {
      return keep.length == 0 ? Long.MAX_VALUE : keep[0][0];
    }

    /** Whether every kept range was asked for once, a range without rows too. */
    boolean allAsked() {
      for (long[] k : keep) {
        if (!covered(k, asked)) {
          return false;
        }
      }
      return true;
    }
  }

  /** The bound on kept bytes in this JVM, as the latest batch's setting has it (negative: a tenth of the heap). */
  static synchronized void bound(long limit) {
    maxBytes = limit >= 0 ? limit : Runtime.getRuntime().maxMemory() / 10;
  }

  static synchronized long maxBytes() {
    return maxBytes;
  }

  static synchronized long bytes() {
    return bytes;
  }

  /** The rows of {@code ranges} a read of [start, end) of the file would decode, if all are kept. */
  static synchronized List<UnsafeRow> take(String key, long start, long end, long[][] ranges) {
    List<Entry> entries = BY_PATH.get(key);
    if (entries == null) {
      return null;
    }
    for (Entry e : entries) {
      if (e.covers(start, end, ranges)) {
        List<UnsafeRow> out = e.in(ranges);
        if (e.allAsked()) {
          remove(e);
        }
        return out;
      }
    }
    return null;
  }

  /**
   * Keeps a read's rows for later reads if they fit the bound. To fit, entries needed later than
   * this one (their first kept time after its) go, latest first: reads come in event-time
   * order, so what is needed last is what an aligned run can best afford to decode again.
   */
  static synchronized boolean put(Entry e) {
    if (e.rows.length == 0 || e.size > maxBytes) {
      return false;
    }
    while (bytes + e.size > maxBytes) {
      Entry last = null;
      for (Entry old : ALL) {
        if (last == null || old.nextUse() > last.nextUse()) {
          last = old;
        }
      }
      if (last == null || last.nextUse() <= e.nextUse()) {
        return false;
      }
      remove(last);
    }
    BY_PATH.computeIfAbsent(e.key, k -> new ArrayList<>()).add(e);
    ALL.add(e);
    bytes += e.size;
    return true;
  }

  /** Drops what a stopped query kept (in the driver's JVM: local mode's executors). */
  static synchronized void dropOwner(String owner) {
    List<Entry> gone = new ArrayList<>();
    for (Entry e : ALL) {
      if (e.owner.equals(owner)) {
        gone.add(e);
      }
    }
    for (Entry e : gone) {
      remove(e);
    }
  }

  private static void remove(Entry e) {
    ALL.remove(e);
    unlink(e);
  }

  private static void unlink(Entry e) {
    List<Entry> entries = BY_PATH.get(e.key);
    if (entries != null && entries.remove(e)) {
      bytes -= e.size;
      if (entries.isEmpty()) {
        BY_PATH.remove(e.key);
      }
    }
  }

  /** Whether the union of {@code ranges} covers [r[0], r[1]). */
  static boolean covered(long[] r, List<long[]> ranges) {
    List<long[]> sorted = new ArrayList<>(ranges);
    sorted.sort((a, b) -> Long.compare(a[0], b[0]));
    long reached = r[0];
    for (long[] k : sorted) {
      if (k[0] > reached) {
        break;
      }
      reached = Math.max(reached, k[1]);
      if (reached >= r[1]) {
        return true;
      }
    }
    return reached >= r[1];
  }

  static boolean within(long[] r, long[][] ranges) {
    for (long[] k : ranges) {
      if (k[0] <= r[0] && r[1] <= k[1]) {
        return true;
      }
    }
    return false;
  }

  static boolean inAny(long t, long[][] ranges) {
    for (long[] r : ranges) {
      if (r[0] <= t && t < r[1]) {
        return true;
      }
    }
    return false;
  }

  /** The first index whose time is at least {@code t}. */
  static int lowerBound(long[] times, long t) {
    int lo = 0;
    int hi = times.length;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (times[mid] < t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
}
