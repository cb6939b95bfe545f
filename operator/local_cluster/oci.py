"""OCI image archives written here, for containerd to import (`ctr images import`): no registry
serves this machine, and an image of a few static files needs no builder. Each image is one
layer (an uncompressed tar), its config and its manifest, in an OCI image layout tar whose
index names the image (``io.containerd.image.name``)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ImageFile:
    path: str
    """Where it goes in the image, without the leading slash."""
    data: bytes = b""
    mode: int = 0o755
    link: str | None = None
    """A symbolic link to this target instead of a file."""


@dataclass(frozen=True)
class Image:
    name: str
    """The full reference pods name, e.g. ``kappa.dev/pause:1``."""
    files: tuple[ImageFile, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = field(default=("PATH=/bin:/usr/bin",))


def _layer(files: tuple[ImageFile, ...]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({"/".join(f.path.split("/")[:i]) for f in files for i in range(1, f.path.count("/") + 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for f in files:
            info = tarfile.TarInfo(f.path)
            if f.link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, f.link, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(f.data), f.mode
                tar.addfile(info, io.BytesIO(f.data))
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest.split(':')[1]}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return digest


def write_archive(image: Image, path: Path) -> str:
    """The image as an OCI layout tar at ``path``; returns the manifest's digest (a content
    hash: the same files give the same image, so a cache can key on it)."""
    return write_layer(image.name, _layer(image.files), path, image.entrypoint, image.cmd, image.env)


def write_layer(
    name: str,
    layer: bytes,
    path: Path,
    entrypoint: tuple[str, ...] = (),
    cmd: tuple[str, ...] = (),
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
) -> str:
    """An image of one layer (a tar's bytes: a root file system, say) as an OCI layout tar."""
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": list(entrypoint), "Cmd": list(cmd), "Env": list(env)},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
            # one entry per layer: builders (buildah) check that history and layers agree
            "history": [{"created_by": f"kappa: {name}", "empty_layer": False}],
        },
        sort_keys=True,
    ).encode()
    with tarfile.open(path, mode="w") as tar:
        layer_digest, config_digest = _blob(tar, layer), _blob(tar, config)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config),
                },
                "layers": [
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": len(layer)}
                ],
            },
            sort_keys=True,
        ).encode()
        manifest_digest = _blob(tar, manifest)
        index = json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "annotations": {
                            "io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                        },
                    }
                ],
            }
        ).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return manifest_digest
