"""Container images from a rootfs dir, without a registry: a plain rootfs tar (for `podman
import`) and an OCI image layout tar (for `ctr image import`)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

IMAGE_NAME = "docker.io/library/nct-cdi-test:latest"


def rootfs_tar(rootfs: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w") as tf:
        for child in sorted(rootfs.iterdir()):
            tf.add(child, arcname=child.name)
    return dest


def _blob(tf: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def _file(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def oci_archive(layer_tar: Path, dest: Path, name: str = IMAGE_NAME) -> Path:
    """An OCI image layout tar with one uncompressed layer, tagged `name`."""
    layer = layer_tar.read_bytes()
    with tarfile.open(dest, "w") as tf:
        layer_digest = _blob(tf, layer)
        config = json.dumps({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }).encode()
        config_digest = _blob(tf, config)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                       "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                        "size": len(layer)}],
        }).encode()
        manifest_digest = _blob(tf, manifest)
        _file(tf, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _file(tf, "index.json", json.dumps({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
                "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "latest"},
            }],
        }).encode())
    return dest
