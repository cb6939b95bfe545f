package dev.kappa.source;

import org.apache.spark.sql.connector.read.streaming.Offset;

/** An offset of the Python planner, kept as its JSON (Spark compares offsets by their JSON). */
final class KappaOffset extends Offset {
  private final String json;

  KappaOffset(String json) {
    this.json = json;
  }

  @Override
  public String json() {
    return json;
  }
}
