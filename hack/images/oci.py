#!/usr/bin/env python3
"""Builds a single-layer OCI image layout archive from a binary, without Docker.

The layer holds the binary, the shared libraries `ldd` says it loads (none for
a static binary), /etc/passwd and /etc/group naming the image's user, and /tmp;
plus any --extra executables (and the libraries they load) and --tree
directories of plain files (mode 0644, directories 0755: readable by any user;
a shared object in a tree, such as a Python extension module, brings the
libraries it loads, as an --extra does).
The archive (oci-layout, index.json, blobs/sha256/...) imports with
`ctr -n k8s.io images import`: index.json carries the image's name in the
`io.containerd.image.name` annotation.

The output is reproducible: the same inputs give byte-identical archives, so
the same manifest digest, so the importer can skip an unchanged image.

  oci.py --name localhost/vllm-sim:dev --binary target/debug/vllm-sim \
         --dest /usr/local/bin/vllm-sim --entrypoint '["/usr/local/bin/vllm-sim"]' \
         --cmd '[]' --user 65532:65532 --port 8000/tcp --env K=V \
         [--extra /bin/busybox:/bin/busybox] \
         [--tree crates/vllm-sim/hub:/srv/hub] --out image.tar

Prints the manifest digest.
"""

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def shared_libraries(binary):
    """The files the dynamic loader maps for `binary` (empty when static)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    text = out.stdout + out.stderr
    if "not a dynamic executable" in text or "statically linked" in text:
        return []
    if out.returncode != 0:
        sys.exit(f"oci.py: ldd {binary} failed: {text.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        line = line.strip()
        if "=> not found" in line:
            sys.exit(f"oci.py: {binary} needs a library ldd cannot find: {line}")
        m = re.match(r"^\S+ => (/\S+) \(0x[0-9a-f]+\)$", line) or re.match(
            r"^(/\S+) \(0x[0-9a-f]+\)$", line
        )
        if m:
            libs.append(m.group(1))
    return sorted(set(libs))


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def add_dir(tar, path, mode=0o755):
    info = tarfile.TarInfo(path.lstrip("/"))
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = EPOCH
    tar.addfile(info)


def add_bytes(tar, path, data, mode=0o644):
    info = tarfile.TarInfo(path.lstrip("/"))
    info.size = len(data)
    info.mode = mode
    info.mtime = EPOCH
    tar.addfile(info, io.BytesIO(data))


def layer_bytes(files, user):
    """files: {image path: (host path, mode)}. Returns the uncompressed layer tar."""
    buf = io.BytesIO()
    uid, _, gid = user.partition(":")
    gid = gid or uid
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = {"/etc", "/tmp"}
        for dest in files:
            d = os.path.dirname(dest)
            while d not in ("", "/"):
                dirs.add(d)
                d = os.path.dirname(d)
        for d in sorted(dirs):
            add_dir(tar, d, 0o1777 if d == "/tmp" else 0o755)
        name = "nonroot" if uid != "0" else "root"
        passwd = f"root:x:0:0:root:/root:/sbin/nologin\n"
        group = "root:x:0:\n"
        if uid.isdigit() and uid != "0":
            passwd += f"{name}:x:{uid}:{gid}:{name}:/tmp:/sbin/nologin\n"
            group += f"{name}:x:{gid}:\n"
        entries = {
            "/etc/passwd": (passwd.encode(), 0o644),
            "/etc/group": (group.encode(), 0o644),
            # No cluster DNS: names resolve from /etc/hosts only, unless the
            # pod's resolv.conf (written by the kubelet) says otherwise.
            "/etc/nsswitch.conf": (b"hosts: files dns\n", 0o644),
        }
        for dest, (src, mode) in files.items():
            with open(src, "rb") as f:
                entries[dest] = (f.read(), mode)
        for dest in sorted(entries):
            data, mode = entries[dest]
            add_bytes(tar, dest, data, mode)
    return buf.getvalue()


def blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return f"sha256:{digest}", len(data)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="image name, e.g. localhost/vllm-sim:dev")
    p.add_argument("--binary", required=True)
    p.add_argument("--dest", required=True, help="path of the binary in the image")
    p.add_argument("--entrypoint", default=None, help="JSON list (default: [dest])")
    p.add_argument("--cmd", default="[]", help="JSON list")
    p.add_argument("--user", default="0:0")
    p.add_argument("--port", action="append", default=[], help="e.g. 8080/tcp (repeatable)")
    p.add_argument("--env", action="append", default=[], help="K=V (repeatable)")
    p.add_argument("--label", action="append", default=[], help="K=V (repeatable)")
    p.add_argument("--workdir", default="/")
    p.add_argument("--extra", action="append", default=[],
                   help="SRC:DEST, another executable in the image, with the libraries it loads (repeatable)")
    p.add_argument("--tree", action="append", default=[],
                   help="SRCDIR:DEST, a directory of plain files copied to DEST (repeatable)")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    if not os.access(a.binary, os.X_OK):
        sys.exit(f"oci.py: {a.binary} is not an executable file")
    files = {a.dest: (a.binary, 0o755)}
    for lib in shared_libraries(a.binary):
        files[lib] = (os.path.realpath(lib), 0o755)
    for extra in a.extra:
        src, _, dest = extra.partition(":")
        if not dest.startswith("/") or not os.access(src, os.X_OK):
            sys.exit(f"oci.py: --extra {extra}: want SRC:DEST with an executable SRC and an absolute DEST")
        files[dest] = (src, 0o755)
        # A dynamically linked extra brings its libraries, as the main binary does.
        for lib in shared_libraries(src):
            files[lib] = (os.path.realpath(lib), 0o755)
    for tree in a.tree:
        src, _, dest = tree.partition(":")
        if not dest.startswith("/") or not os.path.isdir(src):
            sys.exit(f"oci.py: --tree {tree}: want SRCDIR:DEST with a directory SRCDIR and an absolute DEST")
        for root, dirs, names in os.walk(src):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                if not os.path.isfile(path):
                    sys.exit(f"oci.py: --tree {tree}: {path} is not a plain file")
                rel = os.path.relpath(path, src)
                files[os.path.join(dest, rel)] = (path, 0o644)
                if is_elf(path):
                    # Libraries the tree carries itself (a wheel's bundled ones) are in it already.
                    inside = os.path.realpath(src) + os.sep
                    for lib in shared_libraries(path):
                        if not os.path.realpath(lib).startswith(inside):
                            files[lib] = (os.path.realpath(lib), 0o755)
    layer = layer_bytes(files, a.user)

    blobs = {}
    layer_digest, layer_size = blob(blobs, layer)
    env = ["PATH=/usr/local/bin:/usr/bin:/bin"] + a.env
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "User": a.user,
            "Env": env,
            "Entrypoint": json.loads(a.entrypoint) if a.entrypoint else [a.dest],
            "Cmd": json.loads(a.cmd),
            "WorkingDir": a.workdir,
            "ExposedPorts": {port if "/" in port else f"{port}/tcp": {} for port in a.port},
            "Labels": dict(kv.split("=", 1) for kv in a.label),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "hack/images/oci.py"}],
    }
    cfg_digest, cfg_size = blob(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
    }
    man_digest, man_size = blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": man_digest,
            "size": man_size,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": a.name, "org.opencontainers.image.ref.name": tag},
        }],
    }
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_dir(tar, "blobs")
        add_dir(tar, "blobs/sha256")
        for digest in sorted(blobs):
            add_bytes(tar, f"blobs/sha256/{digest}", blobs[digest])
        add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
    os.replace(tmp, a.out)
    print(man_digest)


if __name__ == "__main__":
    main()
