"""Our images, built here from the same Dockerfiles a user builds (``images/*/Dockerfile``),
with no registry: the Dockerfiles take their base as ``ARG BASE``; here it is a Debian bookworm
root file system made from Debian's packages (debootstrap, minbase, slimmed as Docker's
debian:bookworm-slim is), and buildah (Debian's, daemonless, chroot isolation) builds each
image on it. Each image is kept as an OCI archive (zstd layers) under the machine's cache, named
by the hash of everything that goes into it (the Dockerfile, the files it copies, the base), so
a second run imports it without building; containerd imports the archive
(``Node.load_archive``).

Every image the cluster needs, built at once (in parallel where they do not depend on each
other), from the command line; this is what CI starts in the background early::

    .venv/bin/python -m kappa_operator.local_cluster.images [--only spark,operator,spark-operator]
        [--spark-operator-binary PATH] [--serial]

Two processes asking for the same image (that command and a test fixture's ``LocalCluster.up``)
never both build it: each image is built under its own file lock in the cache, and the second
finds the archive the first wrote."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kappa_operator.local_cluster.control_plane import ROOT
from kappa_operator.local_cluster.oci import write_layer

CACHE = Path(os.environ.get("KAPPA_CLUSTER_CACHE", Path.home() / ".cache" / "kappa-cluster")) / "images"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
BASE_RECIPE = "slim-1"
"""Which root file system ``base()`` makes: a new value when the recipe changes, so a machine
that has the older base builds the new one (and every image on it) instead of reusing it."""
BASE = f"kappa.dev/debian:{SUITE}-{BASE_RECIPE}"
CONTEXT = {
    "operator": ("pyproject.toml", "README.md", "operator", "spark_app", ".dockerignore"),
    "spark": ("spark_app", ".dockerignore"),
}
"""What each Dockerfile copies (the build context is the repository root, less .dockerignore):
an image is rebuilt when these change, and only then."""
COMPONENTS = ("spark", "operator", "spark-operator")
SPARK_IMAGE = "kappa.dev/kappa-spark:0.1.0"
OPERATOR_IMAGE = "kappa.dev/kappa-operator:0.1.0"
SPARK_OPERATOR_IMAGE = "kappa.dev/spark-operator:2.3.0"
"""The images' names in the nodes' containerd (``pullPolicy: Never``: loaded, never pulled)."""


class ImageError(RuntimeError):
    pass


def run(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise ImageError(f"{' '.join(argv[:4])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def _digest_of(paths: list[Path]) -> str:
    h = hashlib.sha256(f"{BASE} {EXPORT_COMPRESSION}".encode())  # a new base or format: new archives
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.suffix in (".pyc", ".pyo"):
                continue
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(name: str, shared: bool = False, wait: bool = True) -> Iterator[bool]:
    """A file lock in the cache, held for the block: one process at a time builds a given
    image (the others wait, then find its archive), as cluster/build.sh does for its parts.
    Yields whether it was taken (always, unless ``wait`` is false and another holds it)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(lock, mode)
        except BlockingIOError:
            yield False
            return
        yield True


def in_buildah(name: str) -> bool:
    return subprocess.run(["buildah", "inspect", "--type", "image", name], capture_output=True).returncode == 0


SLIM_DPKG = """\
# as Docker's debian:*-slim images (debuerreotype --slimify): no docs, man pages or translations
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
"""
SLIM_APT = {
    # as Docker's debian images: apt keeps no .deb files nor its binary caches in a layer
    "docker-clean": (
        'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
        '/var/cache/apt/*.bin || true"; };\n'
        'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
        '/var/cache/apt/*.bin || true"; };\n'
        'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n'
    ),
    "docker-no-languages": 'Acquire::Languages "none";\n',
}


def slim(rootfs: Path) -> None:
    """A debootstrap root file system made as small as Docker's debian:bookworm-slim, which
    the Dockerfiles default to (so they see the same base either way): debootstrap leaves the
    ~150 MB of .deb files it installed and apt's caches behind, and docs, man pages and
    translations nothing here reads; and apt and dpkg are told not to add them back."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(SLIM_DPKG)
    for name, text in SLIM_APT.items():
        (rootfs / "etc/apt/apt.conf.d" / name).write_text(text)
    doomed = [*(rootfs / "var/cache/apt/archives").glob("*.deb"), *(rootfs / "var/cache/apt").glob("*.bin")]
    doomed += [p for p in (rootfs / "var/lib/apt/lists").iterdir() if p.is_file() and p.name != "lock"]
    for folder in ("man", "info", "locale", "groff", "linda", "lintian/overrides"):
        doomed += list((rootfs / "usr/share" / folder).glob("*"))
    doomed += [p for p in (rootfs / "usr/share/doc").rglob("*") if p.is_file() and p.name != "copyright"]
    doomed += list((rootfs / "var/log").glob("*.log"))
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def base() -> str:
    """The Debian base in buildah's storage (made once per machine: ~1 min, ~75 MB)."""
    with _locked("base"):
        if in_buildah(BASE):
            return BASE
        CACHE.mkdir(parents=True, exist_ok=True)
        archive = CACHE / f"debian-{SUITE}-{BASE_RECIPE}.oci.tar"
        if not archive.exists():
            rootfs = CACHE / f"debian-{SUITE}.rootfs"
            shutil.rmtree(rootfs, ignore_errors=True)
            run("debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE, str(rootfs), MIRROR)
            slim(rootfs)
            layer = CACHE / f"debian-{SUITE}.layer.tar"
            with tarfile.open(layer, "w") as tar:
                tar.add(rootfs, arcname=".")
            write_layer(BASE, layer.read_bytes(), archive.with_suffix(".tmp"), cmd=("/bin/bash",))
            archive.with_suffix(".tmp").rename(archive)
            layer.unlink()
            shutil.rmtree(rootfs)
            for older in CACHE.glob(f"debian-{SUITE}*.oci.tar"):  # an older recipe's
                if older != archive:
                    older.unlink()
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


JVM = ("images/spark/Dockerfile", "images/spark/prune.py")
"""What the Spark image's ``jvm`` stage (the JRE, Spark's launch scripts and the jars of its
submission client: no Python, no spark_app, no poms) is made of: the spark-operator's image is
rebuilt when these change, not with each spark_app."""


def build_spark_operator(name: str, binary: Path) -> Path:
    """``images/spark-operator/Dockerfile`` on the Spark image's ``jvm`` stage, with the
    spark-operator ``binary`` built by cluster/build.sh."""
    folder = ROOT / "images" / "spark-operator"
    jvm = _digest_of([ROOT / p for p in JVM])
    h = hashlib.sha256(_digest_of([folder]).encode() + jvm.encode() + binary.read_bytes())
    key = h.hexdigest()[:16]

    def spark_jvm() -> str:
        """The stage's image ID, built now (its layers are the Spark image's, cached by buildah
        when that image was just built): a tag in buildah's storage may be an older build."""
        with tempfile.TemporaryDirectory() as tmp:
            iid = Path(tmp) / "iid"
            dockerfile = str(ROOT / "images" / "spark" / "Dockerfile")
            buildah_bud(
                "--build-arg", f"BASE={base()}", "--target", "jvm", "--iidfile", str(iid), "-f", dockerfile, str(ROOT)
            )
            return iid.read_text().strip().removeprefix("sha256:")

    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        shutil.copy2(folder / "entrypoint.sh", context / "entrypoint.sh")
        shutil.copy2(binary, context / "spark-operator")
        return _bud("spark-operator", key, name, folder / "Dockerfile", context, {"SPARK_JVM": spark_jvm})


def buildah_bud(*args: str) -> None:
    """``buildah bud`` as every image here is built: chroot isolation (no daemon, no user
    namespaces), the host's network, each step's layer kept for the next build, the host's CA
    trust mounted (``trust_mounts``)."""
    with _locked("layers", shared=True):  # no pruning of the layer cache under a build
        run("buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers", "-q", *trust_mounts(), *args)


def _bud(
    component: str, key: str, name: str, dockerfile: Path, context: Path, args: dict[str, Callable[[], str]]
) -> Path:
    archive = CACHE / f"{component}-{key}.oci.tar"
    with _locked(component):
        if archive.exists():
            return archive
        build_args = [a for k, value in args.items() for a in ("--build-arg", f"{k}={value()}")]
        buildah_bud(*build_args, "-f", str(dockerfile), "-t", name, str(context))
        export(name, archive)
        for older in CACHE.glob(f"{component}-" + "?" * len(key) + ".oci.tar"):  # one per image: the current
            if older != archive:
                older.unlink()
    prune_layer_cache()
    return archive


EXPORT_COMPRESSION = "zstd"
"""How the archives' layers are compressed. Measured on this machine (2 cores, containerd 1.6,
issue 58), importing the Spark image after the spark-operator's: gzip (buildah's default) 11.8
s, uncompressed 14.1 s (twice the bytes through containerd's content store, which is bound by
the disk here, not by gunzip), zstd 10.0 s, and the smallest archives (470 MB for the Spark
image). containerd unpacks zstd layers since 1.5."""


def export(name: str, archive: Path) -> None:
    """The image ``name`` from buildah's storage as an OCI archive (zstd layers, see
    ``EXPORT_COMPRESSION``) whose index names it ``name``, written whole or not at all."""
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    run("buildah", "push", "-q", "--compression-format", EXPORT_COMPRESSION, name, f"oci-archive:{partial}:{name}")
    partial.rename(archive)


LAYER_CACHE_LIMIT = int(os.environ.get("KAPPA_LAYER_CACHE_GB", "12")) << 30
"""buildah's storage keeps every build's intermediate layers (its cache for the next build, which
saves the pip and Maven steps when only spark_app changes); without a bound a working day of
rebuilds left 15 GB there, and the CI run on the same disk found none free."""


def prune_layer_cache(storage: Path = Path("/var/lib/containers/storage")) -> None:
    """The layer cache dropped (the tagged images stay) once it grows past the bound; not while
    another build uses it (it would lose the layers it is building on): then the next build's
    end prunes."""
    if not storage.exists() or _size_of(storage) <= LAYER_CACHE_LIMIT:
        return
    with _locked("layers", wait=False) as alone:
        if alone:
            subprocess.run(["buildah", "rmi", "--prune"], capture_output=True)


def _size_of(folder: Path) -> int:
    done = subprocess.run(["du", "-sb", str(folder)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout else 0


def build_all(
    spark_operator_binary: Callable[[], Path], only: tuple[str, ...] = COMPONENTS, parallel: bool = True
) -> dict[str, Path]:
    """The archives of every image the cluster needs (``only`` those named), built where
    missing: the Spark image and the kappa operator's side by side (independent builds: one
    waits on the network while the other uses a core), the spark-operator's after the Spark
    image (it is that image's ``jvm`` stage, cached by then, plus one layer) and after its
    binary is known (``spark_operator_binary``, e.g. cluster/build.sh's, which waits for a
    build.sh already running). Raises the first failure, after the others ended."""

    def timed(component: str, make: Callable[[], Path]) -> dict[str, Path]:
        started = time.monotonic()
        archive = make()
        print(f"images: {component} ready in {time.monotonic() - started:.0f} s: {archive}", file=sys.stderr)
        return {component: archive}

    def spark_side() -> dict[str, Path]:
        out = timed("spark", lambda: build("spark", SPARK_IMAGE)) if "spark" in only else {}
        if "spark-operator" in only:
            binary = spark_operator_binary()
            out |= timed("spark-operator", lambda: build_spark_operator(SPARK_OPERATOR_IMAGE, binary))
        return out

    def operator_side() -> dict[str, Path]:
        return timed("operator", lambda: build("operator", OPERATOR_IMAGE)) if "operator" in only else {}

    with ThreadPoolExecutor(max_workers=2 if parallel else 1) as pool:
        sides = [pool.submit(spark_side), pool.submit(operator_side)]
    failed = [side.exception() for side in sides if side.exception() is not None]
    if failed:
        raise failed[0]
    return {name: path for side in sides for name, path in side.result().items()}


def main(argv: list[str] | None = None) -> int:
    """Exit 0 with one line per image (component, archive) once every archive exists; 1 with
    the error when a build failed (the archives already built stay); 2 on bad arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m kappa_operator.local_cluster.images",
        description="Build every image the local cluster needs into the image cache (once: cached by inputs).",
    )
    parser.add_argument(
        "--only",
        default=",".join(COMPONENTS),
        help=f"comma-separated images to build (default: all of {', '.join(COMPONENTS)})",
    )
    parser.add_argument(
        "--spark-operator-binary",
        type=Path,
        help="the spark-operator binary (default: cluster/build.sh's, waiting for a build.sh in progress)",
    )
    parser.add_argument("--serial", action="store_true", help="one build at a time (default: two side by side)")
    args = parser.parse_args(argv)
    only = tuple(c.strip() for c in args.only.split(",") if c.strip())
    unknown = sorted(set(only) - set(COMPONENTS))
    if unknown:
        parser.error(f"unknown image(s) {', '.join(unknown)}: choose from {', '.join(COMPONENTS)}")

    def binary() -> Path:
        if args.spark_operator_binary is not None:
            return args.spark_operator_binary
        from kappa_operator.local_cluster.control_plane import binaries

        return binaries().spark_operator

    started = time.monotonic()
    try:
        archives = build_all(binary, only, parallel=not args.serial)
    except Exception as e:  # the message is the report; the exit code says it failed
        print(f"images: {e}", file=sys.stderr)
        return 1
    for component, archive in archives.items():
        print(f"{component} {archive}")
    print(f"images: {len(archives)} ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
