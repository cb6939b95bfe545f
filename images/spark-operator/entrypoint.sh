#!/bin/bash
# The spark-operator's process under tini, with a passwd entry for an arbitrary uid (spark-submit's
# JVM asks for the user's name) as images/spark/entrypoint.sh gives the drivers.
set -euo pipefail
if ! getent passwd "$(id -u)" >/dev/null 2>&1; then
  for wrapper in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
    [ -s "$wrapper" ] || continue
    NSS_WRAPPER_PASSWD="$(mktemp)" NSS_WRAPPER_GROUP="$(mktemp)"
    echo "spark:x:$(id -u):$(id -g):spark:${SPARK_HOME:-/opt/spark}:/bin/false" >"$NSS_WRAPPER_PASSWD"
    echo "spark:x:$(id -g):" >"$NSS_WRAPPER_GROUP"
    export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
    break
  done
fi
exec /usr/bin/tini -s -- /usr/bin/spark-operator "$@"
