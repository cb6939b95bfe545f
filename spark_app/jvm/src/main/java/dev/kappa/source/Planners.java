package dev.kappa.source;

import java.util.concurrent.ConcurrentHashMap;

/**
 * The planners of this driver, by the key the Python runtime passes as the source's option
 * {@code planner}. The runtime registers one per (query, source) before the query starts; the
 * streams Spark builds look theirs up on the driver.
 */
public final class Planners {
  private static final ConcurrentHashMap<String, AdmissionPlanner> BY_KEY = new ConcurrentHashMap<>();

  private Planners() {}

  public static void register(String key, AdmissionPlanner planner) {
    BY_KEY.put(key, planner);
  }

  public static void unregister(String key) {
    BY_KEY.remove(key);
  }

  static AdmissionPlanner get(String key) {
    AdmissionPlanner planner = BY_KEY.get(key);
    if (planner == null) {
      throw new IllegalStateException(
          "no kappa planner is registered as '" + key + "' in this driver: the kappa-iceberg source is "
              + "built by the kappa runtime (python -m spark_app), which registers its planner first");
    }
    return planner;
  }
}
