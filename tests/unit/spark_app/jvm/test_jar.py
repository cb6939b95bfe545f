"""The kappa source's jar, built as a session builds it (the JDK's javac and jar, against the
installed Spark's jars): Spark finds the source by the registration Maven packages too."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from spark_app.jvm import JAR, RESOURCES, SOURCE_CLASS, SOURCES, build, digest

SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def test_the_jar_registers_the_source_and_holds_a_class_per_source_file(tmp_path: Path) -> None:
    jar = build(tmp_path / JAR)
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        assert z.read(SERVICE).decode().split() == [SOURCE_CLASS]
        assert z.read(SERVICE) == (RESOURCES / SERVICE).read_bytes(), "the one registration, Maven's"
    for source in SOURCES.rglob("*.java"):
        assert source.relative_to(SOURCES).with_suffix(".class").as_posix() in names, source
    assert not list(tmp_path.glob("*.partial")), "packed, then moved into place"


def test_the_jars_cache_key_changes_with_its_resources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed registration must not be served from a jar cached before it."""
    import spark_app.jvm as jvm

    before = digest("4.2.0")
    copy = tmp_path / "resources"
    shutil.copytree(RESOURCES, copy)
    (copy / SERVICE).write_text(SOURCE_CLASS + "\ndev.kappa.source.Other\n")
    monkeypatch.setattr(jvm, "RESOURCES", copy)
    assert jvm.digest("4.2.0") != before
