"""Which class-sharing archive a local session maps (``spark_app.jvm.class_sharing``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from spark_app.jvm import class_sharing


def test_an_archive_is_named_by_its_java_and_each_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAPPA_JARS_CACHE", str(tmp_path / "cache"))
    java, jars = tmp_path / "java", tmp_path / "jars"
    java.write_bytes(b"\x7fELF")
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"a" * 10)
    first = class_sharing.archive(java, jars)
    assert first.parent == tmp_path / "cache" and first.suffix == ".jsa"
    assert class_sharing.archive(java, jars) == first, "the same Java and jars: the same archive"
    (jars / "spark-sql.jar").write_bytes(b"b")
    second = class_sharing.archive(java, jars)
    assert second != first, "another jar: an archive of its own (the JVM would refuse the first)"
    (jars / "spark-sql.jar").write_bytes(b"bb")
    third = class_sharing.archive(java, jars)
    assert third not in (first, second), "a jar of another size too"
    os.utime(jars / "spark-sql.jar", ns=(0, 10**9))
    fourth = class_sharing.archive(java, jars)
    assert fourth not in (first, second, third), "a jar written again (another time): the JVM refuses the old"
    other = tmp_path / "another-checkout" / "jars"
    shutil.copytree(jars, other, copy_function=shutil.copy2)  # the same names, sizes and times
    assert class_sharing.archive(java, other) != fourth, "another checkout's jars: its own archive"


def test_a_session_maps_the_archive_only_if_made_and_only_if_it_starts_the_jvm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAPPA_JARS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"\x7fELF")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert class_sharing.java_options() == "", "none made yet: nothing to map"
    made = class_sharing.archive(java, tmp_path / "spark" / "jars")
    made.parent.mkdir(parents=True)
    made.write_bytes(b"archive")
    assert class_sharing.java_options() == f"-XX:SharedArchiveFile={made}"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")
    assert class_sharing.java_options() == "", "under spark-submit the JVM already runs"
