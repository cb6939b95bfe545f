"""Where a StreamingJob's pipeline code comes from when it is not baked into the Spark image,
and the extra packages and jars it needs.

* ``spec.deps``: the Kubeflow spark-operator's ``Dependencies`` (SparkApplication v1beta2
  ``spec.deps``), same field names, rendered into every application of the job as it is:
  ``pyFiles`` (.py/.zip/.egg on the driver's and executors' PYTHONPATH, e.g. the team's
  zipped package on object storage), ``jars``, ``packages`` (Maven coordinates resolved at
  submission), ``repositories``, ``excludePackages``, ``files``, ``archives``.
* ``spec.pipelineFrom.configMap``: a ConfigMap holding the pipeline's modules
  (``kubectl create configmap NAME --from-file=pipeline.py``), mounted into the driver, put on
  its ``sys.path`` and shipped to the executors by the driver (``spark_app.apps.pipeline_code``).

The operator only names these in what it renders; it never reads the pipeline's code.

Bounds are small on purpose: a maximal StreamingJob must stay under the size budget of
``models.common`` (its spec is kept twice in annotations), and a pipeline that needs more than
a handful of artifacts belongs in its own image.
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from kappa_operator.models.common import CRModel

DEP_URI_MAX = 200
"""A path or URI of a jar, file, archive, pyFile or repository."""
COORDINATE_MAX = 128
"""A Maven coordinate (``groupId:artifactId:version``)."""
CODE_FILES_MAX = 3
"""Entries of pyFiles and jars (more: zip them into one; the StreamingJob spec stays within SPEC_JSON_MAX)."""
OTHER_FILES_MAX = 2
"""Entries of files, archives and repositories."""
PACKAGES_MAX = 6
"""Entries of packages (each brings its dependencies along)."""
EXCLUDES_MAX = 2
"""Entries of excludePackages."""

URI_PATTERN = r"^[^,\s]+$"
PY_FILE_PATTERN = r"^[^,\s]+\.([pP][yY]|[zZ][iI][pP]|[eE][gG][gG])$"
COORDINATE_PATTERN = r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+$"
EXCLUDE_PATTERN = r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+$"
REPOSITORY_PATTERN = r"^[a-z][a-z0-9+.-]*://[^,\s]+$"


def _one_location(value: Any) -> Any:
    """Spark joins each list with commas and splits it again: an entry holding a comma or a
    space would silently become two, or a path that does not exist."""
    if isinstance(value, str) and not re.fullmatch(URI_PATTERN, value):
        raise ValueError(
            f"expected one path or URI per entry, without commas or spaces (Spark splits these lists on commas), "
            f"got {value!r}: write each as its own list entry"
        )
    return value


def _py_file(value: Any) -> Any:
    _one_location(value)
    if isinstance(value, str) and not re.fullmatch(PY_FILE_PATTERN, value):
        raise ValueError(
            f"Spark puts .py, .zip and .egg files on the PYTHONPATH; {value!r} is none of them: zip the package "
            "(`zip -r pkg.zip pkg`), or list other archives under deps.archives"
        )
    return value


def _coordinate(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(COORDINATE_PATTERN, value):
        raise ValueError(
            f"expected a Maven coordinate groupId:artifactId:version such as "
            f"org.apache.spark:spark-avro_2.13:4.0.0, got {value!r}"
        )
    return value


def _exclusion(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(EXCLUDE_PATTERN, value):
        raise ValueError(f"expected groupId:artifactId (no version) such as com.google.guava:guava, got {value!r}")
    return value


def _repository(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(REPOSITORY_PATTERN, value):
        raise ValueError(f"expected a repository URL such as https://repo.example.com/maven2, got {value!r}")
    return value


Location = Annotated[str, Field(pattern=URI_PATTERN, max_length=DEP_URI_MAX), BeforeValidator(_one_location)]
PyFile = Annotated[str, Field(pattern=PY_FILE_PATTERN, max_length=DEP_URI_MAX), BeforeValidator(_py_file)]
Coordinate = Annotated[str, Field(pattern=COORDINATE_PATTERN, max_length=COORDINATE_MAX), BeforeValidator(_coordinate)]
Exclusion = Annotated[str, Field(pattern=EXCLUDE_PATTERN, max_length=COORDINATE_MAX), BeforeValidator(_exclusion)]
Repository = Annotated[str, Field(pattern=REPOSITORY_PATTERN, max_length=DEP_URI_MAX), BeforeValidator(_repository)]

SUBMITTER_SCHEMES = frozenset({"", "local", "file", "http", "https", "ftp"})
"""The schemes spark-submit resolves without opening a Hadoop filesystem."""


def fetched_by_driver(location: str) -> bool:
    """A pyFile on a Hadoop filesystem (``s3a://``, ``gs://``, ``abfss://``, ``hdfs://``).

    spark-submit resolves every dependency's path as it submits, and for these it opens the
    filesystem: on a cluster, in the Spark operator's pod, which has neither the filesystem's
    jars (hadoop-aws is in the Spark image) nor the job's credentials (``envFrom`` is the
    driver's): "S3AFileSystem not found" is what a user of the spark-operator meets. So these
    are not handed to spark-submit: the driver fetches them itself, with its own credentials,
    through ``SparkContext.addPyFile`` (``spark_app.apps.pipeline_code``), which puts them on
    its path and ships them to the executors. The operator never reads them either."""
    scheme = urlsplit(location).scheme.lower()
    return len(scheme) > 1 and scheme not in SUBMITTER_SCHEMES


_NEEDS_PACKAGES = "!has(self.{field}) || size(self.{field}) == 0 || (has(self.packages) && size(self.packages) > 0)"
_NEEDS_PACKAGES_MESSAGE = "{field} only applies to what packages resolves: set packages too, or drop {field}"


class Dependencies(CRModel):
    """Extra code of the job's Spark applications: the spark-operator's ``Dependencies``
    (SparkApplication v1beta2 ``spec.deps``), rendered into the live application and every
    Backfill's, publish, plan and Rewind restore application of the job as it is.

    A location is ``local:///path`` (inside the Spark image), a URI Spark fetches from
    (``s3a://``, ``gs://``, ``abfss://``, ``hdfs://``, ``https://``), or a path or ``file://``
    URI on this machine, which only `kappa run` reads (on a cluster, spark-submit runs in the
    Spark operator's pod, which does not have it). pyFiles on a Hadoop filesystem are fetched
    by the driver, not by spark-submit (``fetched_by_driver``); jars, files and archives there
    need the Spark operator's image to have the filesystem (or an ``https://`` or ``local://``
    location instead)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": _NEEDS_PACKAGES.format(field=field),
                    "message": _NEEDS_PACKAGES_MESSAGE.format(field=field),
                }
                for field in ("excludePackages", "repositories")
            ]
        }
    )

    py_files: list[PyFile] = Field(default=[], max_length=CODE_FILES_MAX)
    """.py, .zip or .egg files put on the PYTHONPATH of the driver and the executors (spark-submit
    `--py-files`): the pipeline's package, zipped, e.g. s3a://team-artifacts/orders-1.2.0.zip."""
    jars: list[Location] = Field(default=[], max_length=CODE_FILES_MAX)
    """Jars added to the driver's and executors' classpath (`--jars`)."""
    packages: list[Coordinate] = Field(default=[], max_length=PACKAGES_MAX)
    """Maven coordinates `groupId:artifactId:version` resolved with their dependencies at
    submission (`--packages`)."""
    repositories: list[Repository] = Field(default=[], max_length=OTHER_FILES_MAX)
    """Maven repositories searched for packages besides Maven Central (`--repositories`)."""
    exclude_packages: list[Exclusion] = Field(default=[], max_length=EXCLUDES_MAX)
    """`groupId:artifactId` left out when resolving packages (`--exclude-packages`)."""
    files: list[Location] = Field(default=[], max_length=OTHER_FILES_MAX)
    """Files placed in the working directory of the driver and each executor (`--files`)."""
    archives: list[Location] = Field(default=[], max_length=OTHER_FILES_MAX)
    """Archives (.zip, .tar.gz, .tgz, .jar) extracted into the working directory of each executor
    (`--archives`); `#name` picks the directory."""

    @model_validator(mode="after")
    def _packages_for_their_options(self) -> Dependencies:
        for field, value in (("excludePackages", self.exclude_packages), ("repositories", self.repositories)):
            if value and not self.packages:
                raise ValueError(_NEEDS_PACKAGES_MESSAGE.format(field=field))
        return self

    def rendered(self) -> dict[str, list[str]]:
        """The fields that are set, by their v1beta2 names (the JobConfig's ``deps``)."""
        return {k: list(v) for k, v in self.model_dump(by_alias=True).items() if v}

    def submitted(self) -> dict[str, list[str]]:
        """The SparkApplication's ``spec.deps``: what spark-submit applies, without the pyFiles
        the driver fetches (``fetched_by_driver``)."""
        out = self.rendered()
        kept = [f for f in out.pop("pyFiles", []) if not fetched_by_driver(f)]
        return {**out, "pyFiles": kept} if kept else out

    def driver_fetched(self) -> list[str]:
        """The pyFiles the driver fetches itself (``fetched_by_driver``), in their order."""
        return [f for f in self.py_files if fetched_by_driver(f)]


class ConfigMapRef(CRModel):
    """A ConfigMap in the job's namespace."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)


class PipelineFrom(CRModel):
    """Where the pipeline's modules come from besides the image and ``deps.pyFiles``."""

    config_map: ConfigMapRef
    """A ConfigMap of the pipeline's files (`kubectl create configmap NAME --from-file=pipeline.py`;
    a package as one .zip key, `--from-file=pkg.zip`), mounted into the driver at
    /opt/kappa/pipelines/NAME: that directory and each .zip/.egg in it go on the driver's
    sys.path, and the driver ships them to the executors (UDFs unpickle there). A ConfigMap
    holds at most 1 MiB; a new version under a new name restarts the job as any spec change."""
