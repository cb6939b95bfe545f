"""Read the manifests `kappa run` is given and find the StreamingJob a Backfill or Rewind needs.

The models refuse a manifest the way the API server (its CRD schema and CEL rules) would, so a
mistake shows up here, with the file and the field, before anything runs. A Backfill or Rewind
is resolved to its job (``spec.jobRef.name``, same namespace) from, in order: ``--job FILE``,
the same file (a multi-document YAML), then the other ``*.yaml``/``*.yml`` files next to it (as
the examples directory is laid out). Two candidates are an error, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import manifest_fields
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.contract.errors import KappaError

Resource = StreamingJob | Backfill | Rewind
KINDS: dict[str, type[StreamingJob] | type[Backfill] | type[Rewind]] = {
    "StreamingJob": StreamingJob,
    "Backfill": Backfill,
    "Rewind": Rewind,
}


class ManifestError(KappaError):
    """A manifest `kappa run` cannot use; the message names the file and the field."""


@dataclass(frozen=True)
class Doc:
    """One YAML document of a file, before validation."""

    path: Path
    index: int
    body: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.path}" if self.index == 0 else f"{self.path} (document {self.index + 1})"

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str((self.body.get("metadata") or {}).get("namespace") or "default")


@dataclass(frozen=True)
class Manifests:
    """What one `kappa run` works on."""

    target: Resource
    """The object to run."""
    job: StreamingJob
    """Its StreamingJob (the target itself when it is one)."""
    job_from: str
    """Where the job was found (for people)."""
    others: tuple[StreamingJob, ...] = ()
    """The other StreamingJobs seen in the target's namespace (a Rewind's downstream candidates)."""


def read_docs(path: Path) -> list[Doc]:
    """The non-empty documents of a YAML file; each must be a mapping."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        bodies = [b for b in yaml.safe_load_all(text) if b is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from None
    docs = []
    for i, body in enumerate(bodies):
        if not isinstance(body, dict):
            raise ManifestError(
                f"{path} (document {i + 1}): expected a manifest (a mapping), got {type(body).__name__}"
            )
        docs.append(Doc(path, i, body))
    return docs


def describe_errors(exc: ValidationError) -> list[str]:
    """One line per problem: the field path as written in YAML (camelCase) and what is wrong."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; fields are camelCase)"
        elif err["type"] == "missing":
            msg = "required field missing"
        lines.append(f"  {loc or '<root>'}: {msg}")
    return lines


def parse(doc: Doc) -> Resource:
    """The document as its model, or a ManifestError naming every bad field."""
    model = KINDS.get(doc.kind)
    if model is None:
        known = ", ".join(KINDS)
        raise ManifestError(f"{doc.where}: kind {doc.kind or '(missing)'!r} is not one kappa runs ({known})")
    try:
        return model.model_validate(manifest_fields(doc.body))
    except ValidationError as exc:
        head = f"{doc.where}: invalid {doc.kind} {doc.name or '(unnamed)'}:"
        raise ManifestError("\n".join([head, *describe_errors(exc)])) from None


def _runnable(docs: list[Doc], path: Path) -> Doc:
    """The document to run: the one Backfill or Rewind, else the one StreamingJob."""
    ops = [d for d in docs if d.kind in ("Backfill", "Rewind")]
    jobs = [d for d in docs if d.kind == "StreamingJob"]
    pick = ops or jobs
    if not docs:
        raise ManifestError(f"{path} holds no manifest")
    if not pick:
        return docs[0]  # parse() names the unknown kind
    if len(pick) > 1:
        names = ", ".join(f"{d.kind} {d.name}" for d in pick)
        raise ManifestError(f"{path} holds {len(pick)} manifests to run ({names}): kappa run takes one per file")
    return pick[0]


def _siblings(path: Path, skip: set[Path]) -> list[Doc]:
    """Documents of the other YAML files next to ``path``; files that do not parse are skipped
    (they may be anything), a matching job that does not validate is reported by the caller."""
    out = []
    for p in sorted({*path.parent.glob("*.yaml"), *path.parent.glob("*.yml")}):
        if p.resolve() in skip:
            continue
        try:
            out += read_docs(p)
        except ManifestError:
            continue
    return out


def _jobs_named(docs: list[Doc], name: str, namespace: str) -> list[Doc]:
    return [d for d in docs if d.kind == "StreamingJob" and d.name == name and d.namespace == namespace]


def _valid_jobs(docs: list[Doc]) -> list[StreamingJob]:
    out = []
    for d in docs:
        if d.kind != "StreamingJob":
            continue
        try:
            job = parse(d)
        except ManifestError:
            continue
        assert isinstance(job, StreamingJob)
        out.append(job)
    return out


def load(path: Path, job_file: Path | None = None) -> Manifests:
    """The object ``path`` holds and the StreamingJob it needs."""
    docs = read_docs(path)
    target = parse(_runnable(docs, path))
    job_docs = read_docs(job_file) if job_file is not None else []
    for d in job_docs:  # the user named this file: every document in it must be right
        parse(d)
    if isinstance(target, StreamingJob):
        if job_file is not None:
            raise ManifestError(f"--job is for a Backfill or Rewind; {path} holds StreamingJob {target.metadata.name}")
        return Manifests(target, target, str(path))
    ref, ns = target.spec.job_ref.name, target.metadata.namespace
    wanted = f"StreamingJob {ref} in namespace {ns} (spec.jobRef.name of {target.kind} {target.metadata.name})"
    skip = {path.resolve(), *([job_file.resolve()] if job_file else [])}
    siblings = _siblings(path, skip)
    if job_file is not None:
        found = _jobs_named(job_docs, ref, ns)
        if not found:
            held = ", ".join(f"{d.kind} {d.namespace}/{d.name}" for d in job_docs) or "nothing"
            raise ManifestError(f"--job {job_file} holds no {wanted}; it holds {held}")
    elif not (found := _jobs_named(docs, ref, ns)):
        found = _jobs_named(siblings, ref, ns)
        if not found:
            raise ManifestError(
                f"{target.kind} {target.metadata.name} needs its {wanted}: it is not in {path} and no manifest next "
                f"to it ({path.parent}/*.yaml) is one. Pass it with --job JOB.yaml, or put both in one file "
                "(documents separated by ---)"
            )
    if len(found) > 1:
        places = ", ".join(d.where for d in found)
        raise ManifestError(f"{wanted} is defined {len(found)} times ({places}): keep one, or pass --job")
    job = parse(found[0])
    assert isinstance(job, StreamingJob)
    seen = _valid_jobs(docs) + _valid_jobs(job_docs) + _valid_jobs(siblings)
    others = tuple(j for j in seen if j.metadata.namespace == ns and j.metadata.name != ref)  # as the operator lists
    return Manifests(target, job, found[0].where, others)
