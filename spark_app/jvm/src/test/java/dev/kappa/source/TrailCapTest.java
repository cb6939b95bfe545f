package dev.kappa.source;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** Green's end offsets under blue's durable ones ({@link TrailCap}). */
class TrailCapTest {
  @Test
  void readsUpToBluesOffsetsAndNoFurther() {
    String latest = "{\"plays\":{\"0\":100,\"1\":80}}";
    String start = "{\"plays\":{\"0\":10,\"1\":10}}";
    assertEquals("{\"plays\":{\"0\":42,\"1\":80}}", TrailCap.cap(latest, start, "{\"plays\":{\"0\":42,\"1\":95}}"));
  }

  @Test
  void neverEndsBeforeTheBatchStarts() {
    String latest = "{\"plays\":{\"0\":100}}";
    assertEquals("{\"plays\":{\"0\":50}}", TrailCap.cap(latest, "{\"plays\":{\"0\":50}}", "{\"plays\":{\"0\":7}}"));
  }

  @Test
  void aPartitionBlueHasNotReadStaysWhereItStartsOrIsLeftOut() {
    String latest = "{\"plays\":{\"0\":100,\"1\":80,\"2\":5}}";
    String start = "{\"plays\":{\"0\":10,\"1\":10}}";
    assertEquals("{\"plays\":{\"0\":42,\"1\":10}}", TrailCap.cap(latest, start, "{\"plays\":{\"0\":42}}"));
  }

  @Test
  void noCapYetReadsNothing() {
    String latest = "{\"plays\":{\"0\":100}}";
    assertEquals("{\"plays\":{\"0\":3}}", TrailCap.cap(latest, "{\"plays\":{\"0\":3}}", null));
    assertEquals("{}", TrailCap.cap(latest, null, null));
  }
}
