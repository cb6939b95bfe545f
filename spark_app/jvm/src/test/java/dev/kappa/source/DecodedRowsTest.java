package dev.kappa.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * What {@link DecodedRows} promises: a read is served only when every row it needs is kept,
 * served rows never change (a retried task reads the same ones), an entry goes once every range it
 * keeps was asked for (one without rows too), and under the bound the rows needed last are the ones
 * not kept.
 */
class DecodedRowsTest {
  /** A row (id bigint, ts bigint), laid out as Spark's UnsafeProjection lays it out (no codegen needed). */
  static UnsafeRow row(long id, long ts) {
    int size = UnsafeRow.calculateBitSetWidthInBytes(2) + 2 * 8;
    UnsafeRow row = new UnsafeRow(2);
    row.pointTo(new byte[size], size);
    row.setLong(0, id);
    row.setLong(1, ts);
    return row;
  }

  static DecodedRows.Entry entry(String owner, String path, long start, long end, long[][] keep, long... times) {
    UnsafeRow[] rows = new UnsafeRow[times.length];
    for (int i = 0; i < times.length; i++) {
      rows[i] = row(i, times[i]);
    }
    return new DecodedRows.Entry(owner, path, start, end, keep, times, rows);
  }

  static long[][] ranges(long... bounds) {
    long[][] out = new long[bounds.length / 2][];
    for (int i = 0; i < out.length; i++) {
      out[i] = new long[] {bounds[2 * i], bounds[2 * i + 1]};
    }
    return out;
  }

  /** The store is the executor's, one per JVM: each test leaves it empty. */
  @AfterEach
  void empty() {
    DecodedRows.dropOwner("q");
    DecodedRows.bound(1L << 20);
    assertEquals(0, DecodedRows.bytes());
  }

  @Test
  void servesOnlyWhatIsKeptTheSameRowsEachTimeAndDropsAnEntryOnceEveryRangeWasAskedFor() {
    DecodedRows.bound(1L << 20);
    // kept: rows of [100, 200) and [300, 400) of bytes [0, 1000) of f
    assertTrue(DecodedRows.put(entry("q", "f", 0, 1000, ranges(100, 200, 300, 400), 110, 150, 310, 390)), "put");
    assertNull(DecodedRows.take("f", 0, 1000, ranges(100, 250)), "a range past what is kept decodes");
    assertNull(DecodedRows.take("f", 0, 2000, ranges(100, 200)), "more bytes than decoded decode");
    assertNull(DecodedRows.take("g", 0, 1000, ranges(100, 200)), "another file decodes");
    List<UnsafeRow> first = DecodedRows.take("f", 500, 1000, ranges(100, 200));
    assertNotNull(first, "fewer bytes are served");
    assertEquals(2, first.size(), "fewer bytes: served " + first);
    assertEquals(110, first.get(0).getLong(1), "in time order");
    List<UnsafeRow> again = DecodedRows.take("f", 0, 1000, ranges(100, 200));
    assertEquals(first, again, "a retried read gets the same rows");
    List<UnsafeRow> last = DecodedRows.take("f", 0, 1000, ranges(300, 400));
    assertNotNull(last, "the second range");
    assertEquals(2, last.size(), "the second range");
    assertNull(DecodedRows.take("f", 0, 1000, ranges(300, 400)), "every range asked for once: the entry went");
    assertEquals(0, DecodedRows.bytes(), "no bytes held");
  }

  @Test
  void aKeptRangeWithoutRowsIsServedEmptyAndTheEntryWaitsForItWhicheverReadComesFirst() {
    // reads of one batch's tasks come in any order: the entry must serve both, so both find no
    // file to decode however they interleave
    DecodedRows.bound(1L << 20);
    for (boolean emptyFirst : new boolean[] {true, false}) {
      assertTrue(DecodedRows.put(entry("q", "f", 0, 1000, ranges(100, 200, 300, 400), 110, 150)), "put");
      long[][] first = emptyFirst ? ranges(300, 400) : ranges(100, 200);
      long[][] second = emptyFirst ? ranges(100, 200) : ranges(300, 400);
      assertNotNull(DecodedRows.take("f", 0, 1000, first), "the first read");
      List<UnsafeRow> rows = DecodedRows.take("f", 0, 1000, second);
      assertNotNull(rows, "the second read is served too");
      assertEquals(emptyFirst ? 2 : 0, rows.size(), "its rows");
      assertEquals(0, DecodedRows.bytes(), "then the entry went");
    }
  }

  @Test
  void coveredByTheUnionOfRanges() {
    List<long[]> asked = List.of(new long[] {150, 300}, new long[] {100, 160});
    assertTrue(DecodedRows.covered(new long[] {100, 300}, asked), "overlapping");
    assertTrue(DecodedRows.covered(new long[] {120, 200}, asked), "inside");
    assertFalse(DecodedRows.covered(new long[] {100, 301}, asked), "past the end");
    assertFalse(DecodedRows.covered(new long[] {90, 200}, asked), "before the start");
    assertFalse(DecodedRows.covered(new long[] {100, 300}, List.of(new long[] {100, 150}, new long[] {160, 300})), "a gap");
  }

  @Test
  void underTheBoundKeepsWhatIsNeededSoonestAndAStoppedQueryDropsItsRows() {
    // entries needed later than a new one make room for it; one needed last is not kept
    DecodedRows.Entry soon = entry("q", "a", 0, 10, ranges(100, 200), 150);
    DecodedRows.Entry later = entry("q", "b", 0, 10, ranges(500, 600), 550);
    DecodedRows.bound(soon.size + later.size);
    assertTrue(DecodedRows.put(later) && DecodedRows.put(soon), "both fit");
    DecodedRows.Entry sooner = entry("q", "c", 0, 10, ranges(50, 60), 55);
    assertTrue(DecodedRows.put(sooner), "a sooner one takes the place of the one needed last");
    assertNull(DecodedRows.take("b", 0, 10, ranges(500, 600)), "the one needed last went");
    DecodedRows.Entry latest = entry("q", "d", 0, 10, ranges(900, 950), 920);
    assertFalse(DecodedRows.put(latest), "one needed after everything kept is not kept");
    List<UnsafeRow> kept = DecodedRows.take("a", 0, 10, ranges(100, 200));
    assertNotNull(kept, "the kept ones serve");
    assertEquals(1, kept.size(), "the kept ones serve");
    DecodedRows.dropOwner("q");
    assertEquals(0, DecodedRows.bytes(), "a stopped query's rows go");
    assertNull(DecodedRows.take("c", 0, 10, ranges(50, 60)), "a stopped query's rows go");
  }

  @Test
  void boundZeroKeepsNothing() {
    DecodedRows.bound(0);
    assertFalse(DecodedRows.put(entry("q", "e", 0, 10, ranges(1, 2), 1)), "bound 0 keeps nothing");
  }
}
