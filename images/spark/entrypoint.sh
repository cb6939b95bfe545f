#!/bin/bash
# The Spark-on-Kubernetes entrypoint of the kappa Spark image, written here (the official image,
# which carries one, cannot be pulled where this image is built). Spark's Kubernetes backend
# starts the driver pod with `driver <spark-submit args>` and each executor pod with `executor`,
# passing what they need in the environment (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, ...); anything
# else is run as given (`bash`, `python3 -m spark_app ...`).
set -euo pipefail

# A container may run under an arbitrary UID with no passwd entry (OpenShift, restricted
# policies): the JVM and Hadoop look the user up, so give it one through nss_wrapper.
if ! getent passwd "$(id -u)" >/dev/null 2>&1 && [ -w /tmp ]; then
  cp /etc/passwd /tmp/passwd
  echo "spark:x:$(id -u):$(id -g):spark:${SPARK_HOME}:/bin/false" >> /tmp/passwd
  export NSS_WRAPPER_PASSWD=/tmp/passwd NSS_WRAPPER_GROUP=/etc/group
  export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libnss_wrapper.so
fi

# SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order: the executors' JVM options from the driver.
java_opts=()
while IFS= read -r name; do
  java_opts+=("${!name}")
done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n)

# The image's class-data-sharing archive (Dockerfile): a JVM maps it when its class path starts
# as it did when the archive was dumped (cds/classpath: an empty conf directory, then Spark's
# jars as Spark's launcher lists them), and ignores it otherwise.
CDS=/opt/spark/cds
cds_opts=()
if [ -r "${CDS}/spark.jsa" ] && [ -r "${CDS}/classpath" ]; then
  cds_opts=("-XX:SharedArchiveFile=${CDS}/spark.jsa")
  classpath="$(cat "${CDS}/classpath")"
  # a conf directory Spark mounted goes after the jars: a directory with files before them would
  # make the JVM ignore the archive
  [ -n "${SPARK_CONF_DIR:-}" ] && classpath="${classpath}:${SPARK_CONF_DIR}"
else
  classpath="${SPARK_HOME}/jars/*"
  [ -n "${SPARK_CONF_DIR:-}" ] && classpath="${SPARK_CONF_DIR}:${classpath}"
fi
[ -n "${SPARK_EXTRA_CLASSPATH:-}" ] && classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"

role="${1:-}"
case "$role" in
  driver)
    shift
    if [ "${#cds_opts[@]}" -gt 0 ]; then
      # the driver's JVM is spark-submit's: its launcher puts SPARK_CONF_DIR first on the class
      # path, so it is the archive's empty one; Spark passes the driver's own spark.properties
      # by its path (--properties-file /opt/spark/conf/spark.properties), read as before
      export SPARK_CONF_DIR="${CDS}/conf"
      export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} ${cds_opts[*]}"
    fi
    exec /usr/bin/tini -s -- "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    exec /usr/bin/tini -s -- java "${java_opts[@]}" "${cds_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${classpath}" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec /usr/bin/tini -s -- "$@"
    ;;
esac
