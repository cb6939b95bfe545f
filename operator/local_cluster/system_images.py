"""The cluster's own small images, written here without a registry or a build (``oci.py``):
the pod sandbox's pause process (``images/pause/pause.c``, built static with gcc), Debian's
busybox for test pods, and CoreDNS from its module (``cluster/build.sh``). Every node imports
them before its kubelet starts.
"""

from __future__ import annotations

from pathlib import Path

from kappa_operator.local_cluster.control_plane import ROOT
from kappa_operator.local_cluster.network import run
from kappa_operator.local_cluster.oci import Image, ImageFile, write_archive

PAUSE = "kappa.dev/pause:1"
COREDNS = "kappa.dev/coredns:1.12.4"
BUSYBOX = "kappa.dev/busybox:1"


def pause_image(workdir: Path) -> Image:
    binary = workdir / "pause"
    source = ROOT / "images" / "pause" / "pause.c"
    run("gcc", "-static", "-O2", "-o", str(binary), str(source))
    return Image(PAUSE, (ImageFile("pause", binary.read_bytes()),), entrypoint=("/pause",))


def busybox_image() -> Image:
    """Debian's static busybox and the applets a test shell needs."""
    data = Path("/bin/busybox").read_bytes()
    applets = ("sh", "echo", "cat", "sleep", "hostname", "wget", "nslookup", "ls", "env", "ip", "mkdir", "nc")
    files = (ImageFile("bin/busybox", data), *(ImageFile(f"bin/{a}", link="busybox") for a in applets))
    return Image(BUSYBOX, files, entrypoint=("/bin/sh",))


def coredns_image(binary: Path) -> Image:
    return Image(COREDNS, (ImageFile("coredns", binary.read_bytes()),), entrypoint=("/coredns",))


def small_archive(image: Image, workdir: Path) -> Path:
    """``image`` as an OCI archive in ``workdir``, for every node to import."""
    archive = workdir / f"{image.name.replace('/', '_').replace(':', '_')}.tar"
    write_archive(image, archive)
    return archive
