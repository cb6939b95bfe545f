"""Our images, built here from the same Dockerfiles a user builds (``images/*/Dockerfile``),
with no registry: the Dockerfiles take their base as ``ARG BASE``; here it is a Debian bookworm
root file system made from Debian's packages (debootstrap, minbase), and buildah (Debian's,
daemonless, chroot isolation) builds each image on it. Each image is kept as an OCI archive
under the machine's cache, named by the hash of everything that goes into it (the Dockerfile,
the files it copies, the base), so a second run imports it without building; containerd
imports the archive (``Node.load_archive``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from kappa_operator.local_cluster.control_plane import ROOT
from kappa_operator.local_cluster.oci import write_layer

CACHE = Path(os.environ.get("KAPPA_CLUSTER_CACHE", Path.home() / ".cache" / "kappa-cluster")) / "images"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
BASE = f"kappa.dev/debian:{SUITE}"
CONTEXT = {
    "operator": ("pyproject.toml", "README.md", "operator", "spark_app", ".dockerignore"),
    "spark": ("spark_app", ".dockerignore"),
}
"""What each Dockerfile copies (the build context is the repository root, less .dockerignore):
an image is rebuilt when these change, and only then."""


class ImageError(RuntimeError):
    pass


def run(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise ImageError(f"{' '.join(argv[:4])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def _digest_of(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.suffix in (".pyc", ".pyo"):
                continue
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def in_buildah(name: str) -> bool:
    return subprocess.run(["buildah", "inspect", "--type", "image", name], capture_output=True).returncode == 0


def base() -> str:
    """The Debian base in buildah's storage (made once per machine: ~30 s, 220 MB)."""
    if in_buildah(BASE):
        return BASE
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / f"debian-{SUITE}.oci.tar"
    if not archive.exists():
        rootfs = CACHE / f"debian-{SUITE}.rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        run("debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE, str(rootfs), MIRROR)
        layer = CACHE / f"debian-{SUITE}.layer.tar"
        with tarfile.open(layer, "w") as tar:
            tar.add(rootfs, arcname=".")
        write_layer(BASE, layer.read_bytes(), archive.with_suffix(".tmp"), cmd=("/bin/bash",))
        archive.with_suffix(".tmp").rename(archive)
        layer.unlink()
        shutil.rmtree(rootfs)
    image = run("buildah", "pull", "-q", f"oci-archive:{archive}").strip()
    run("buildah", "tag", image, BASE)
    return BASE


HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_JAVA_CA = Path("/etc/ssl/certs/java/cacerts")


def trust_mounts() -> list[str]:
    """The RUN steps' pip trusts what this machine trusts: where its egress re-signs TLS with a
    CA of its own, PyPI answers with that CA, which a fresh Debian base does not know. Mounted
    for the build only (a pip.conf naming the host's bundle): nothing of it enters the image,
    and the Dockerfile stays the one a user builds anywhere."""
    if not HOST_CA.exists():
        return []
    CACHE.mkdir(parents=True, exist_ok=True)
    conf = CACHE / "pip.conf"
    conf.write_text("[global]\ncert = /run/kappa-host-ca.crt\n")
    mounts = ["--volume", f"{HOST_CA}:/run/kappa-host-ca.crt:ro", "--volume", f"{conf}:/etc/pip.conf:ro"]
    if HOST_JAVA_CA.exists():  # Maven, in a Java stage: Debian's mvn reads /etc/mavenrc
        rc = CACHE / "mavenrc"
        rc.write_text('MAVEN_OPTS="$MAVEN_OPTS -Djavax.net.ssl.trustStore=/run/kappa-host-cacerts"\n')
        mounts += ["--volume", f"{HOST_JAVA_CA}:/run/kappa-host-cacerts:ro", "--volume", f"{rc}:/etc/mavenrc:ro"]
    return mounts


def build(component: str, name: str) -> Path:
    """``images/<component>/Dockerfile`` built on the Debian base as ``name``; the OCI archive
    (cached by the hash of what goes into it)."""
    dockerfile = ROOT / "images" / component / "Dockerfile"
    key = _digest_of([dockerfile.parent, *(ROOT / c for c in CONTEXT[component])])
    return _bud(component, key, name, dockerfile, ROOT, {"BASE": base})


RUNTIME = ("images/spark/Dockerfile", "images/spark/entrypoint.sh", "spark_app/jars")
"""What the Spark image's ``runtime`` stage (Python, Java, pyspark, the jars: no spark_app) is
made of: the spark-operator's image is rebuilt when these change, not with each spark_app."""


def build_spark_operator(name: str, binary: Path) -> Path:
    """``images/spark-operator/Dockerfile`` on the Spark image's ``runtime`` stage (spark-submit
    and Spark's jars, without our code), with the spark-operator ``binary`` built by
    cluster/build.sh."""
    folder = ROOT / "images" / "spark-operator"
    runtime = _digest_of([ROOT / p for p in RUNTIME])
    h = hashlib.sha256(_digest_of([folder]).encode() + runtime.encode() + binary.read_bytes())
    key = h.hexdigest()[:16]

    def spark_runtime() -> str:
        """The stage's image ID, built now (its layers are the Spark image's, cached by buildah
        when that image was just built): a tag in buildah's storage may be an older build."""
        with tempfile.TemporaryDirectory() as tmp:
            iid = Path(tmp) / "iid"
            dockerfile = str(ROOT / "images" / "spark" / "Dockerfile")
            buildah_bud(
                "--build-arg",
                f"BASE={base()}",
                "--target",
                "runtime",
                "--iidfile",
                str(iid),
                "-f",
                dockerfile,
                str(ROOT),
            )
            return iid.read_text().strip().removeprefix("sha256:")

    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        shutil.copy2(folder / "entrypoint.sh", context / "entrypoint.sh")
        shutil.copy2(binary, context / "spark-operator")
        return _bud("spark-operator", key, name, folder / "Dockerfile", context, {"SPARK_IMAGE": spark_runtime})


def buildah_bud(*args: str) -> None:
    """``buildah bud`` as every image here is built: chroot isolation (no daemon, no user
    namespaces), the host's network, each step's layer kept for the next build, the host's CA
    trust mounted (``trust_mounts``)."""
    run("buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers", "-q", *trust_mounts(), *args)


def _bud(
    component: str, key: str, name: str, dockerfile: Path, context: Path, args: dict[str, Callable[[], str]]
) -> Path:
    archive = CACHE / f"{component}-{key}.oci.tar"
    if archive.exists():
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    build_args = [a for k, value in args.items() for a in ("--build-arg", f"{k}={value()}")]
    buildah_bud(*build_args, "-f", str(dockerfile), "-t", name, str(context))
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    run("buildah", "push", "-q", name, f"oci-archive:{tmp}:{name}")
    tmp.rename(archive)
    for older in CACHE.glob(f"{component}-" + "?" * len(key) + ".oci.tar"):  # one per image: the current
        if older != archive:
            older.unlink()
    prune_layer_cache()
    return archive


LAYER_CACHE_LIMIT = int(os.environ.get("KAPPA_LAYER_CACHE_GB", "12")) << 30
"""buildah's storage keeps every build's intermediate layers (its cache for the next build, which
saves the pip and Maven steps when only spark_app changes); without a bound a working day of
rebuilds left 15 GB there, and the CI run on the same disk found none free."""


def prune_layer_cache(storage: Path = Path("/var/lib/containers/storage")) -> None:
    """The layer cache dropped (the tagged images stay) once it grows past the bound."""
    if not storage.exists() or _size_of(storage) <= LAYER_CACHE_LIMIT:
        return
    subprocess.run(["buildah", "rmi", "--prune"], capture_output=True)


def _size_of(folder: Path) -> int:
    done = subprocess.run(["du", "-sb", str(folder)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout else 0
