package dev.kappa.source;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Iterator;
import java.util.Map;

/**
 * How far a blue/green upgrade's new version ("green") may read a topic: never past what the
 * running version ("blue") has durably read, so that at the switch both have read exactly the
 * same input (spark_app/contract/blue_green.py). Offsets are Spark's Kafka offset JSON,
 * {@code {"topic": {"partition": offset}}}; the cap is blue's, by topic and partition.
 *
 * <p>Per partition of the stream's latest offset: the smaller of it and the cap, never below
 * where the batch starts. A partition the cap does not name stays where it starts (blue has read
 * none of it yet), and one the batch does not start from either is left out (Spark then meets
 * it at a later batch, as a new partition).
 */
final class TrailCap {
  private static final ObjectMapper JSON = new ObjectMapper();

  private TrailCap() {}

  static String cap(String latest, String start, String cap) {
    JsonNode latestNode = parse(latest);
    JsonNode startNode = start == null ? JSON.createObjectNode() : parse(start);
    JsonNode capNode = cap == null ? JSON.createObjectNode() : parse(cap);
    ObjectNode out = JSON.createObjectNode();
    for (Iterator<Map.Entry<String, JsonNode>> topics = latestNode.fields(); topics.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = topics.next();
      ObjectNode partitions = JSON.createObjectNode();
      for (Iterator<Map.Entry<String, JsonNode>> ps = topic.getValue().fields(); ps.hasNext(); ) {
        Map.Entry<String, JsonNode> p = ps.next();
        JsonNode from = startNode.path(topic.getKey()).path(p.getKey());
        JsonNode limit = capNode.path(topic.getKey()).path(p.getKey());
        long end = p.getValue().asLong();
        if (limit.isNumber()) {
          end = Math.min(end, limit.asLong());
        } else if (from.isNumber()) {
          end = from.asLong();
        } else {
          continue;
        }
        partitions.put(p.getKey(), from.isNumber() ? Math.max(end, from.asLong()) : end);
      }
      if (partitions.size() > 0) {
        out.set(topic.getKey(), partitions);
      }
    }
    return out.toString();
  }

  private static JsonNode parse(String json) {
    try {
      return JSON.readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException("not Kafka offsets JSON: " + json, e);
    }
  }
}
