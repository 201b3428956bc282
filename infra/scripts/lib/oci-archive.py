#!/usr/bin/env python3
"""Writes a one-layer OCI image archive (the tar `ctr images import` reads)
from a root filesystem directory.

Why by hand: an OCI image is a layer tar, a config and a manifest addressed
by their sha256, and an index naming the image; Python's tarfile, hashlib and
json write that exactly, where buildah or umoci would bring a container
storage set-up of their own for one `import`.

usage: oci-archive.py ROOTFS OUT.tar IMAGE_REF [--cmd ARG]... [--variant OUT=REF=PATH[,PATH]]...
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile


def layer_tar(rootfs: str, excludes: set[str]) -> bytes:
    """The root filesystem as one layer: owners, modes and links kept, times zeroed (a reproducible digest)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, rootfs)
            for name in sorted(dirnames) + sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.normpath(os.path.join(rel_dir, name))
                # /dev, /proc and /sys are the runtime's; a layer carries no device nodes.
                if rel.split("/")[0] in ("dev", "proc", "sys") and rel not in ("dev", "proc", "sys"):
                    continue
                if rel in excludes:
                    continue
                info = tar.gettarinfo(path, arcname=rel)
                info.mtime = 0
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                elif info.isdir() or info.issym() or info.islnk():
                    tar.addfile(info)
    return buf.getvalue()


def whiteout_tar(paths: list[str]) -> bytes:
    """A layer that deletes each path from the layers below it (OCI whiteout files)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(paths):
            d, name = os.path.split(os.path.normpath(p.lstrip("/")))
            info = tarfile.TarInfo(os.path.join(d, ".wh." + name))
            info.mtime = 0
            tar.addfile(info, io.BytesIO(b""))
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def desc(media: str, data: bytes) -> dict:
    return {"mediaType": media, "digest": sha(data), "size": len(data)}


def write_archive(out_path: str, ref: str, layers_raw: list[bytes], layers_gz: list[bytes], cmd: list[str]) -> None:
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                **({"Cmd": cmd} if cmd else {}),
            },
            "rootfs": {"type": "layers", "diff_ids": [sha(raw) for raw in layers_raw]},
        },
        sort_keys=True,
    ).encode()
    layer_descs = [desc("application/vnd.oci.image.layer.v1.tar+gzip", gz) for gz in layers_gz]
    config_desc = desc("application/vnd.oci.image.config.v1+json", config)
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config_desc, "layers": layer_descs},
        sort_keys=True,
    ).encode()
    manifest_desc = desc("application/vnd.oci.image.manifest.v1+json", manifest)
    manifest_desc["annotations"] = {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_desc]}).encode()

    tmp = out_path + ".tmp"
    with tarfile.open(tmp, "w") as out:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        blobs = list(zip(layer_descs, layers_gz)) + [(config_desc, config), (manifest_desc, manifest)]
        for d, data in blobs:
            add("blobs/sha256/" + d["digest"].split(":")[1], data)
    os.replace(tmp, out_path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rootfs")
    ap.add_argument("out")
    ap.add_argument("ref")
    ap.add_argument("--cmd", action="append", default=[])
    # OUT=REF=PATH[,PATH...]: a second image of the same root with those paths
    # deleted by a whiteout layer on top; the root's layer is shared, so
    # importing both costs one unpack of it.
    ap.add_argument("--variant", action="append", default=[])
    a = ap.parse_args()

    raw = layer_tar(a.rootfs, set())
    gz = gzip.compress(raw, compresslevel=1, mtime=0)
    write_archive(a.out, a.ref, [raw], [gz], a.cmd)
    for v in a.variant:
        out, ref, paths = v.split("=", 2)
        wraw = whiteout_tar(paths.split(","))
        write_archive(out, ref, [raw, wraw], [gz, gzip.compress(wraw, mtime=0)], a.cmd)


if __name__ == "__main__":
    main()
