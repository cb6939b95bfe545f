"""Issue 30 item 5: the operator's image and dependency set hold only what the control plane
needs; Spark, pandas and matplotlib go to the Spark image and the `spark` extra. Issue 58: the
images are small (one copy of each jar, no AWS SDK bundle, no build tools in what runs) and
built once however many ask."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HEAVY = (
    "pyspark",
    "pandas",
    "matplotlib",
    "sqlalchemy",
    "pyiceberg_core",
    "kappa_operator.cli.tables",
    "spark_app.catalogs",
)
"""Absent from the operator's process: Spark and what only the Spark image needs, and the CLI's
reads of a job's tables (``kappa checkpoints``, a Rewind's dry run, on the user's machine)."""


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower()


def test_the_base_dependencies_are_the_control_planes_only() -> None:
    base = {_name(r) for r in PROJECT["dependencies"]}
    assert not base & {"pyspark", "pandas", "matplotlib"}
    assert {"kopf", "kubernetes", "pydantic", "prometheus-client", "aiohttp"} <= base
    spark = {_name(r) for r in PROJECT["optional-dependencies"]["spark"]}
    assert {"pyspark", "pandas", "matplotlib"} <= spark
    assert "kappa-operator[spark]" in PROJECT["optional-dependencies"]["dev"]


def test_the_operator_process_imports_no_spark(tmp_path: Path) -> None:
    """What `kappa operator` loads (its handlers, reconcilers, the coordinator, the CLI's parser)."""
    code = (
        "import sys, kappa_operator.cli.commands, kappa_operator.service.runner, kappa_operator.handlers;"
        "import kappa_operator.observe.restore_points;"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_operator_image_installs_the_base_set_and_the_spark_image_the_spark_pins() -> None:
    operator = (ROOT / "images" / "operator" / "Dockerfile").read_text()
    # the base set, read from pyproject.toml in its own layer, then the project without extras
    assert "tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies']" in operator
    assert "pip install --no-deps /src" in operator and "[spark]" not in operator
    spark = (ROOT / "images" / "spark" / "Dockerfile").read_text()
    pinned = {r.strip('"') for r in re.findall(r'"[^"\s]+"', spark.split("RUN pip install", 1)[1].split("\n\n", 1)[0])}
    for requirement in [*PROJECT["optional-dependencies"]["spark"], "pydantic>=2.6,<3", "confluent-kafka>=2.6,<3"]:
        if _name(requirement) != "matplotlib":  # the demo's plots only
            assert requirement in pinned, requirement
    base = {r for r in PROJECT["dependencies"] if _name(r) in ("pydantic", "pyyaml", "pyarrow", "confluent-kafka")}
    assert base <= pinned


def stage(dockerfile: str, name: str) -> list[str]:
    """The instructions of stage ``name`` (continuation lines joined)."""
    lines = dockerfile.replace("\\\n", " ").splitlines()
    body = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    start = next(i for i, line in enumerate(body) if re.match(rf"FROM \S+ AS {name}$", line))
    end = next((i for i in range(start + 1, len(body)) if body[i].startswith("FROM ")), len(body))
    return body[start + 1 : end]


def test_the_operator_images_dependencies_are_one_layer_only_their_list_invalidates() -> None:
    """A README or code edit must not reinstall ~40 packages (a node test run rebuilds the image
    each time they change): the install sees only the list, copied from a stage of its own."""
    build = stage((ROOT / "images" / "operator" / "Dockerfile").read_text(), "build")
    install = next(i for i, step in enumerate(build) if "pip install -r /tmp/requirements.txt" in step)
    before = [step for step in build[:install] if step.startswith(("COPY", "ADD"))]
    assert before == ["COPY --from=requirements /requirements.txt /tmp/requirements.txt"], before
    assert any(step.startswith("COPY pyproject.toml README.md") for step in build[install:])


# --- issue 58: small images ------------------------------------------------------------------

SPARK_DOCKERFILE = (ROOT / "images" / "spark" / "Dockerfile").read_text()
POMS = ROOT / "spark_app" / "jars"
MVN = "{http://maven.apache.org/POM/4.0.0}"


def _prune() -> Any:
    """images/spark/prune.py as a module (a build script, not a package of the project)."""
    spec = importlib.util.spec_from_file_location("kappa_image_prune", ROOT / "images" / "spark" / "prune.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pom(bundle: str) -> ET.Element:
    return ET.parse(POMS / bundle / "pom.xml").getroot()


def _copy_filter(pom: ET.Element, name: str) -> list[str]:
    found = pom.find(f".//{MVN}configuration/{MVN}{name}")
    return [] if found is None or found.text is None else [s.strip() for s in found.text.split(",")]


def _pyspark_jars() -> list[str]:
    import pyspark

    return sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def _stages(dockerfile: str) -> dict[str, tuple[str, list[str]]]:
    """Each stage by name (the last one: ""): its FROM and its instructions."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in dockerfile.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            parts = line.split()
            name = parts[3] if len(parts) > 3 else ""
            out[name] = (parts[1], [])
        elif name is not None:
            out[name][1].append(line)
    return out


def _chain(stages: dict[str, tuple[str, list[str]]], name: str) -> list[str]:
    """The stage ``name`` and those it is built FROM, down to the base."""
    chain = [name]
    while stages[chain[-1]][0] in stages:
        chain.append(stages[chain[-1]][0])
    return chain


def test_s3a_takes_the_aws_sdk_modules_it_uses_not_the_650_mb_bundle() -> None:
    pom = _pom("hadoop-aws")
    deps = {d.findtext(f"{MVN}artifactId"): d for d in pom.iter(f"{MVN}dependency")}
    excluded = [e.findtext(f"{MVN}artifactId") for e in deps["hadoop-aws"].iter(f"{MVN}exclusion")]
    assert excluded == ["bundle"] and "bundle" not in deps
    assert {"s3", "sts", "s3-transfer-manager"} <= set(deps)
    # the SDK of the bundle hadoop-aws is built against, and hadoop-aws of PySpark's own Hadoop
    assert pom.findtext(f"{MVN}properties/{MVN}aws.sdk.version") == "2.35.4"
    assert f"hadoop-client-api-{deps['hadoop-aws'].findtext(f'{MVN}version')}.jar" in _pyspark_jars()
    # the copy takes the AWS groups (and reactive-streams), none of the third parties PySpark ships
    groups = _copy_filter(pom, "includeGroupIds")
    assert set(groups) == {
        "org.apache.hadoop",
        "software.amazon.awssdk",
        "software.amazon.eventstream",
        "software.amazon.s3.analyticsaccelerator",
        "org.reactivestreams",
    }
    assert not [j for j in _pyspark_jars() if j.startswith(("reactive-streams-", "hadoop-aws-"))]


def test_the_kafka_connector_copies_only_what_pyspark_lacks_in_pysparks_version() -> None:
    pom = _pom("kafka-connector")
    copied = _copy_filter(pom, "includeArtifactIds")
    assert "spark-sql-kafka-0-10_2.13" in copied
    prune = _prune()
    shipped = _pyspark_jars()
    assert not [j for j in shipped if prune.of(j, tuple(copied))], "a jar twice on the classpath"
    version = next(d.findtext(f"{MVN}version") for d in pom.iter(f"{MVN}dependency"))
    assert f"spark-core_2.13-{version}.jar" in shipped


def test_the_spark_images_final_stages_hold_no_build_tools() -> None:
    """No JDK, Maven, pip or venv tooling in what the images run on (the final stage and the
    stages it is built FROM): those are in build stages, which give files by COPY --from."""
    stages = _stages(SPARK_DOCKERFILE)
    chain = _chain(stages, "")
    assert chain == ["", "runtime", "jvm"], chain
    for name in chain:
        for step in stages[name][1]:
            if step.startswith("RUN"):
                assert not re.search(r"openjdk|maven|python3-venv|pip install|jlink", step), (name, step)
            if step.startswith("COPY --from="):
                assert step.split()[1].removeprefix("--from=") in ("jre", "python", "maven", "kappa-source"), step
    assert any("openjdk-17-jdk-headless" in s for s in stages["jdk"][1])
    assert stages["jre"][0] == "jdk" and any("jlink" in s for s in stages["jre"][1])
    # the spark-operator's image is the jvm stage plus its binary: no Python, no spark_app
    operator = (ROOT / "images" / "spark-operator" / "Dockerfile").read_text()
    assert "FROM ${SPARK_JVM}" in operator
    assert not [
        s for s in stages["jvm"][1] if re.search(r"python3|spark_app|/opt/venv", s) and "--from=python" not in s
    ]


def test_the_jvm_stage_is_rebuilt_when_what_it_copies_changes() -> None:
    """images.JVM keys the spark-operator's image: every file the jvm stage and the stages it
    takes from copy from the context."""
    from kappa_operator.local_cluster.images import JVM

    stages = _stages(SPARK_DOCKERFILE)
    needed, todo = set(), ["jvm"]
    while todo:
        name = todo.pop()
        if name in needed or name not in stages:
            continue
        needed.add(name)
        todo.append(stages[name][0])
        todo += [s.split()[1].removeprefix("--from=") for s in stages[name][1] if s.startswith("COPY --from=")]
    copied = {
        src
        for name in needed
        for step in stages[name][1]
        if step.startswith("COPY") and "--from=" not in step
        for src in re.sub(r"--\S+", "", step).split()[1:-1]
    }
    assert needed == {"jvm", "jre", "jdk", "python"}, needed
    assert copied <= set(JVM), copied - set(JVM)


def test_prune_keeps_one_platforms_natives() -> None:
    prune = _prune()
    ours = ["librocksdbjni-linux64.so", "linux/amd64/libzstd-jni-1.5.7-7.so", "netty-x-4.2.13.Final-linux-x86_64.jar"]
    theirs = [
        "librocksdbjni-linux64-musl.so",
        "librocksdbjni-linux-aarch64.so",
        "librocksdbjni-osx-x86_64.jnilib",
        "librocksdbjni-win64.dll",
        "win/amd64/libzstd-jni-1.5.7-7.dll",
        "darwin/x86_64/libzstd-jni-1.5.7-7.dylib",
        "netty-transport-native-kqueue-4.2.13.Final-osx-x86_64.jar",
    ]
    assert not [n for n in ours if prune.foreign_native(n, "x86_64")]
    assert all(prune.foreign_native(n, "x86_64") for n in theirs)
    assert not prune.foreign_native("netty-transport-native-unix-common-4.2.13.Final.jar", "x86_64")
    assert prune.foreign_native("librocksdbjni-linux64.so", "aarch64")


def test_prune_names_jars_pyspark_ships_and_splits_them_once() -> None:
    """Each artifact the prune lists name is one of PySpark's (a renamed jar after an upgrade
    fails here, not silently in an image), and no jar is both unused and kept for jobs."""
    prune = _prune()
    shipped = _pyspark_jars()
    for artifact in (*prune.UNUSED_JARS, *prune.NOT_FOR_SUBMIT):
        assert [j for j in shipped if prune.of(j, (artifact,))], f"no jar of {artifact} in pyspark"
    assert not set(prune.UNUSED_JARS) & set(prune.NOT_FOR_SUBMIT)
    assert prune.of("commons-lang3-3.20.0.jar", ("commons-lang",)) is False
    assert prune.of("hive-storage-api-2.8.1.jar", prune.UNUSED_JARS) is False, "ORC needs it"
    submit = [j for j in shipped if not prune.of(j, (*prune.UNUSED_JARS, *prune.NOT_FOR_SUBMIT))]
    for needed in ("spark-core_2.13", "spark-kubernetes_2.13", "kubernetes-client", "hadoop-client-api"):
        assert [j for j in submit if prune.of(j, (needed,))], needed


def test_two_builders_asking_for_one_image_build_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI's background build and a test fixture ask at once: one builds (under the image's
    file lock), the other waits and finds the archive it wrote."""
    import threading
    import time

    from kappa_operator.local_cluster import images

    monkeypatch.setattr(images, "CACHE", tmp_path)
    monkeypatch.setattr(images, "prune_layer_cache", lambda: None)
    builds: list[str] = []

    def bud(*args: str) -> None:
        builds.append(args[-1])
        time.sleep(0.3)  # long enough for the other thread to arrive while this one builds

    monkeypatch.setattr(images, "buildah_bud", bud)
    monkeypatch.setattr(images, "export", lambda name, archive: archive.write_bytes(b"archive"))
    out: list[Path] = []

    def ask() -> None:
        out.append(images._bud("spark", "0123456789abcdef", "kappa.dev/x:1", tmp_path / "Dockerfile", tmp_path, {}))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and out[0] == out[1] == tmp_path / "spark-0123456789abcdef.oci.tar"
