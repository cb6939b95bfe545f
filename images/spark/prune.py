"""What the Spark image keeps of the pip-installed environment (images/spark/Dockerfile, stage
`python`): run there once after `pip install --no-compile`, as root, with the venv's Python
(stdlib only). Everything it deletes is either for another platform, for building or testing
packages, or for a part of Spark no kappa job starts; what it keeps is split into the layers
the two images share (see the Dockerfile):

  /dist/spark/bin          Spark's launch scripts (spark-submit, spark-class, ...), from pyspark
  /dist/spark/jars-submit  the jars of Spark's Kubernetes submission client: the whole
                           spark-operator image's Spark, and the first layer of the Spark image's
  /dist/spark/jars         the rest of the jars a driver and its executors run (SQL, Parquet,
                           Arrow, RocksDB, MLlib, ...)
  /opt/venv                the venv without pyspark's bin/ and jars/ (symlinks to /opt/spark's)

Each step prints what it removed and how much, so a build log says where the bytes went.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

DIST = Path("/dist/spark")
SPARK_HOME = Path("/opt/spark")

UNUSED_JARS = (
    # Hive: the metastore catalog, HiveQL and the Thrift JDBC server. kappa jobs use Spark's
    # in-memory catalog (the tables are pyiceberg's and the kappa-iceberg source's); a session
    # built without enableHiveSupport() never loads them.
    "spark-hive_2.13",
    "spark-hive-thriftserver_2.13",
    "hive-beeline",
    "hive-cli",
    "hive-common",
    "hive-exec",
    "hive-jdbc",
    "hive-metastore",
    "hive-serde",
    "hive-service-rpc",
    "hive-shims",
    "hive-shims-0.23",
    "hive-shims-common",
    "hive-shims-scheduler",
    "datanucleus-api-jdo",
    "datanucleus-core",
    "datanucleus-rdbms",
    "derby",
    "derbyshared",
    "derbytools",
    "javax.jdo",
    "jdo-api",
    "javolution",
    "jpam",
    "libfb303",
    "libthrift",
    "HikariCP",
    "commons-dbcp",
    "ST4",
    "antlr-runtime",
    "stax-api",
    "super-csv",
    "opencsv",
    "json",
    "jta",
    "transaction-api",
    "jline",
    # spark-shell's Scala REPL (and the Scala compiler only it runs) and the Spark Connect
    # server: a kappa driver is a Python process of Spark's classic API.
    "spark-repl_2.13",
    "scala-compiler",
    "spark-connect_2.13",
)
"""Artifacts (jar names less their version) no kappa driver or executor loads: not in the Spark
image. hive-storage-api stays (ORC's reader and writer use it)."""

NOT_FOR_SUBMIT = (
    "JLargeArrays",
    "JTransforms",
    "aircompressor",
    "algebra_2.13",
    "arpack",
    "arpack_combined_all",
    "arrow-compression",
    "arrow-format",
    "arrow-memory-core",
    "arrow-memory-netty",
    "arrow-memory-netty-buffer-patch",
    "arrow-vector",
    "blas",
    "breeze-macros_2.13",
    "breeze_2.13",
    "cats-kernel_2.13",
    "commons-cli",
    "commons-compiler",
    "commons-lang",
    "commons-pool",
    "datasketches-java",
    "datasketches-memory",
    "dropwizard-metrics-hadoop-metrics2-reporter",
    "flatbuffers-java",
    "hive-storage-api",
    "httpclient",
    "httpcore",
    "istack-commons-runtime",
    "jakarta.activation-api",
    "jakarta.xml.bind-api",
    "janino",
    "java-diff-utils",
    "jaxb-core",
    "jaxb-runtime",
    "joda-time",
    "jts-core",
    "lapack",
    "orc-core",
    "orc-format",
    "orc-mapreduce",
    "orc-shims",
    "parquet-column",
    "parquet-common",
    "parquet-encoding",
    "parquet-format-structures",
    "parquet-hadoop",
    "parquet-jackson",
    "scala-parser-combinators_2.13",
    "spark-catalyst_2.13",
    "spark-graphx_2.13",
    "spark-mllib-local_2.13",
    "spark-mllib_2.13",
    "spark-pipelines_2.13",
    "spark-sketch_2.13",
    "spark-sql-api_2.13",
    "spark-sql_2.13",
    "spark-streaming_2.13",
    "spark-yarn_2.13",
    "spire-macros_2.13",
    "spire-platform_2.13",
    "spire-util_2.13",
    "spire_2.13",
    "threeten-extra",
    "univocity-parsers",
    "xmlschema-core",
    # in the closure, but the submission client never opens a RocksDB: its 70 MB jar is the
    # largest of Spark's
    "rocksdbjni",
)
"""Artifacts Spark's Kubernetes submission client (spark-submit --deploy-mode cluster, what the
spark-operator runs) does not need: every jar of pyspark's not in the runtime dependency
closure of org.apache.spark:spark-kubernetes_2.13 (`mvn dependency:tree` of it, 4.2.0), where
SparkSubmit and KubernetesClientApplication live, plus rocksdbjni. A jar a newer pyspark adds
is kept in both images: the safe side. Not in the spark-operator's image."""

NATIVE = re.compile(r"(^|/)(lib[\w.-]+\.(so|jnilib|dylib)|[\w.-]+\.dll)$")
PLATFORM = re.compile(r"linux|osx|darwin|mac|win|freebsd|aix|sunos")
ARCH = {"x86_64": ("linux64", "x86_64", "amd64"), "aarch64": ("aarch64", "aarch_64", "arm64")}
"""How the jars name this machine's native libraries (rocksdbjni: librocksdbjni-linux64.so;
zstd-jni: linux/amd64/libzstd-jni.so; netty: ...-linux-x86_64.jar)."""


def of(jar: str, artifacts: tuple[str, ...]) -> bool:
    """Whether ``jar`` (a file name: artifact-version[-classifier].jar) is of one of
    ``artifacts``: the version begins with a digit, which no artifact id here goes on with
    (``commons-lang`` is not ``commons-lang3``). Pure."""
    return any(re.fullmatch(re.escape(a) + r"-\d.*\.jar", jar) for a in artifacts)


def foreign_native(name: str, machine: str) -> bool:
    """Whether a jar entry (or a jar's name, for netty's per-platform jars) names a native
    library for another OS or CPU than Linux on ``machine`` (``uname -m``), or for musl libc
    (Debian's is glibc). A name that names no platform is not foreign. Pure."""
    lowered = name.lower()
    if not PLATFORM.search(lowered):
        return False
    linux = "linux" in lowered and "musl" not in lowered
    return not (linux and any(tag in lowered for tag in ARCH[machine]))


def _size(path: Path) -> int:
    if path.is_symlink() or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _remove(paths: list[Path], why: str) -> None:
    total = sum(_size(p) for p in paths)
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    print(f"prune: {len(paths)} removed, {total / 1e6:.1f} MB: {why}", flush=True)


def strip_jar(jar: Path, machine: str) -> None:
    """The jar rewritten without its other platforms' native libraries (rocksdbjni carries 14
    of them, 15 MB each; zstd-jni 20)."""
    with zipfile.ZipFile(jar) as src:
        foreign = [i for i in src.infolist() if NATIVE.search(i.filename) and foreign_native(i.filename, machine)]
        if not foreign:
            return
        before = jar.stat().st_size
        tmp = jar.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w") as dst:
            for info in src.infolist():
                if info not in foreign:
                    dst.writestr(info, src.read(info), compress_type=info.compress_type)
    tmp.replace(jar)
    print(f"prune: {jar.name}: {len(foreign)} foreign native libraries, {(before - jar.stat().st_size) / 1e6:.1f} MB")


def spark(pyspark: Path, machine: str) -> None:
    jars = pyspark / "jars"
    _remove([j for j in jars.iterdir() if of(j.name, UNUSED_JARS)], "Hive, the REPL, Spark Connect")
    _remove([p for p in jars.iterdir() if not p.name.endswith(".jar")], "not a jar (connect-repl/)")
    _remove(
        [j for j in jars.glob("netty-*.jar") if foreign_native(j.name, machine)], "netty's other platforms' natives"
    )
    for jar in (*jars.glob("rocksdbjni-*.jar"), *jars.glob("zstd-jni-*.jar")):
        strip_jar(jar, machine)
    submit, rest = DIST / "jars-submit", DIST / "jars"
    for d in (submit, rest):
        d.mkdir(parents=True, exist_ok=True)
    for jar in sorted(jars.iterdir()):
        shutil.move(jar, (rest if of(jar.name, NOT_FOR_SUBMIT) else submit) / jar.name)
    print(f"prune: jars: {_size(submit) / 1e6:.0f} MB for spark-submit, {_size(rest) / 1e6:.0f} MB more for jobs")
    jars.rmdir()
    # Spark's launch scripts (the Windows ones and the shells of other languages not)
    (DIST / "bin").mkdir(parents=True, exist_ok=True)
    for script in ("spark-submit", "spark-class", "load-spark-env.sh", "find-spark-home", "pyspark"):
        shutil.move(pyspark / "bin" / script, DIST / "bin" / script)
    shutil.rmtree(pyspark / "bin")
    # pyspark finds its Spark where it was installed (pyspark/jars, pyspark/bin) when SPARK_HOME
    # is unset: the same one, in /opt/spark.
    for name in ("jars", "bin"):
        (pyspark / name).symlink_to(SPARK_HOME / name)
    _remove([pyspark / d for d in ("examples", "data", "sbin") if (pyspark / d).exists()], "pyspark's examples")


def python(venv: Path, site: Path) -> None:
    _remove(
        [
            *(site / p for p in os.listdir(site) if re.match(r"^(pip|setuptools|pkg_resources|_distutils_hack)\b", p)),
            site / "distutils-precedence.pth",
            *(venv / "bin").glob("pip*"),
        ],
        "pip and setuptools (nothing installs at run time)",
    )
    _remove(sorted(p for p in site.rglob("tests") if p.is_dir()), "the packages' own test suites")
    pyarrow = site / "pyarrow"
    _remove(
        [pyarrow / "include", pyarrow / "src", *pyarrow.rglob("*.pxd"), *pyarrow.rglob("*.pyx")],
        "pyarrow's C++ headers and Cython sources (for building extensions)",
    )
    # Arrow Flight (an RPC framework): imported by nothing here (pyiceberg, pyspark, pandas)
    # and loaded by no other pyarrow library (readelf: only _flight's extension needs it).
    _remove(
        [
            *pyarrow.glob("libarrow_flight.so*"),
            *pyarrow.glob("libarrow_python_flight.so*"),
            *pyarrow.glob("_flight.cpython-*.so"),
            pyarrow / "flight.py",
        ],
        "Arrow Flight",
    )
    # zstandard's CFFI backend: the fallback for Pythons its C extension does not build for
    # (PyPy); CPython imports backend_c (zstandard/__init__.py, the "default" policy)
    zstd = site / "zstandard"
    _remove([*zstd.glob("_cffi.cpython-*.so"), zstd / "backend_cffi.py"], "zstandard's CFFI backend")
    _remove(sorted(p for p in site.rglob("__pycache__") if p.is_dir()), "bytecode (compiled below)")
    link_copies(site)


def link_copies(site: Path) -> None:
    """A wheel cannot hold symbolic links, so a library installed as libx.so, libx.so.N and
    libx.so.N.M.K (pyarrow's libarrow_python) comes as three copies: the first kept, the others
    made links to it, as a system install has them."""
    seen: dict[tuple[Path, int, str], Path] = {}
    linked = saved = 0
    for lib in sorted(site.rglob("*.so*"), key=lambda p: (len(p.name), p.name), reverse=True):
        if lib.is_symlink() or not lib.is_file():
            continue
        key = (lib.parent, lib.stat().st_size, hashlib.sha256(lib.read_bytes()).hexdigest())
        if key in seen:
            saved += lib.stat().st_size
            lib.unlink()
            lib.symlink_to(seen[key].name)
            linked += 1
        else:
            seen[key] = lib
    print(f"prune: {linked} copies of shared libraries made links, {saved / 1e6:.1f} MB")


HOT = (
    "pyspark.sql",
    "pyspark.sql.functions",
    "pyspark.sql.pandas.functions",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.streaming",
    "pyspark.daemon",
    "pyspark.worker",
    "pandas",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyiceberg.catalog.sql",
    "pyiceberg.catalog.rest",
    "pyiceberg.io.pyarrow",
    "pyiceberg.table",
    "pydantic",
    "yaml",
    "confluent_kafka",
    "sqlalchemy",
    "psycopg2",
)
"""What a driver and an executor's Python workers import (spark_app's own modules are compiled
by the image's last step, which imports them): only these get bytecode. A module without it
compiles at each import (the image is read-only to the job's user): ~3 s more for each Python
process that imports pyspark, pandas and pyarrow; bytecode for every module installed is 110
MB."""


def compile_hot() -> None:
    """Bytecode written by importing ``HOT`` (Python writes it for each module it compiles):
    exactly the modules those imports load. It records its source's size and mtime, which the
    COPY into the final stage keeps; a stale one is recompiled, never wrongly used."""
    code = f"import importlib, sys\nfor m in {HOT!r}: importlib.import_module(m)\nprint(len(sys.modules))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd="/")
    print(f"prune: bytecode for the {done.stdout.strip()} modules a driver and its workers import")


def main() -> int:
    machine = os.uname().machine
    if machine not in ARCH:
        print(f"prune: no native-library names known for {machine}", file=sys.stderr)
        return 1
    site = Path(sysconfig.get_paths()["purelib"])
    spark(site / "pyspark", machine)
    python(Path(sys.prefix), site)
    compile_hot()
    return 0


if __name__ == "__main__":
    sys.exit(main())
