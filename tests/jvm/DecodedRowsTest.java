package dev.kappa.source;

import java.util.List;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * What {@link DecodedRows} promises, checked in its own JVM (run by tests/spark/test_jvm_decoded_rows.py):
 * a read is served only when every row it needs is kept, served rows never change (a retried
 * task reads the same ones), an entry goes once all its rows were served, and under the bound
 * the rows needed last are the ones not kept.
 */
public final class DecodedRowsTest {
  private static final UnsafeProjection ROW =
      UnsafeProjection.create(new StructType().add("id", DataTypes.LongType).add("ts", DataTypes.LongType));

  private DecodedRowsTest() {}

  static UnsafeRow row(long id, long ts) {
    return ROW.apply(new GenericInternalRow(new Object[] {id, ts})).copy();
  }

  static DecodedRows.Entry entry(String owner, String path, long start, long end, long[][] keep, long... times) {
    UnsafeRow[] rows = new UnsafeRow[times.length];
    for (int i = 0; i < times.length; i++) {
      rows[i] = row(i, times[i]);
    }
    return new DecodedRows.Entry(owner, path, start, end, keep, times, rows);
  }

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  static long[][] ranges(long... bounds) {
    long[][] out = new long[bounds.length / 2][];
    for (int i = 0; i < out.length; i++) {
      out[i] = new long[] {bounds[2 * i], bounds[2 * i + 1]};
    }
    return out;
  }

  public static void main(String[] args) {
    DecodedRows.bound(1L << 20);
    // kept: rows of [100, 200) and [300, 400) of bytes [0, 1000) of f
    check(DecodedRows.put(entry("q", "f", 0, 1000, ranges(100, 200, 300, 400), 110, 150, 310, 390)), "put");
    check(DecodedRows.take("f", 0, 1000, ranges(100, 250)) == null, "a range past what is kept decodes");
    check(DecodedRows.take("f", 0, 2000, ranges(100, 200)) == null, "more bytes than decoded decode");
    check(DecodedRows.take("g", 0, 1000, ranges(100, 200)) == null, "another file decodes");
    List<UnsafeRow> first = DecodedRows.take("f", 500, 1000, ranges(100, 200));
    check(first != null && first.size() == 2 && first.get(0).getLong(1) == 110, "fewer bytes: served " + first);
    List<UnsafeRow> again = DecodedRows.take("f", 0, 1000, ranges(100, 200));
    check(again != null && again.equals(first), "a retried read gets the same rows");
    List<UnsafeRow> last = DecodedRows.take("f", 0, 1000, ranges(300, 400));
    check(last != null && last.size() == 2, "the second range");
    check(DecodedRows.take("f", 0, 1000, ranges(300, 400)) == null, "all served once: the entry went");
    check(DecodedRows.bytes() == 0, "no bytes held: " + DecodedRows.bytes());

    // the bound: entries needed later than a new one make room for it; one needed last is not kept
    DecodedRows.Entry soon = entry("q", "a", 0, 10, ranges(100, 200), 150);
    DecodedRows.Entry later = entry("q", "b", 0, 10, ranges(500, 600), 550);
    DecodedRows.bound(soon.size + later.size);
    check(DecodedRows.put(later) && DecodedRows.put(soon), "both fit");
    DecodedRows.Entry sooner = entry("q", "c", 0, 10, ranges(50, 60), 55);
    check(DecodedRows.put(sooner), "a sooner one takes the place of the one needed last");
    check(DecodedRows.take("b", 0, 10, ranges(500, 600)) == null, "the one needed last went");
    DecodedRows.Entry latest = entry("q", "d", 0, 10, ranges(900, 950), 920);
    check(!DecodedRows.put(latest), "one needed after everything kept is not kept");
    check(DecodedRows.take("a", 0, 10, ranges(100, 200)).size() == 1, "the kept ones serve");
    DecodedRows.dropOwner("q");
    check(DecodedRows.bytes() == 0 && DecodedRows.take("c", 0, 10, ranges(50, 60)) == null, "a stopped query's go");
    DecodedRows.bound(0);
    check(!DecodedRows.put(entry("q", "e", 0, 10, ranges(1, 2), 1)), "bound 0 keeps nothing");
    System.out.println("DecodedRowsTest: ok");
  }
}
