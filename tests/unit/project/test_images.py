"""Issue 30 item 5: the operator's image and dependency set hold only what the control plane
needs; Spark, pandas and matplotlib go to the Spark image and the `spark` extra."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

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
