#!/usr/bin/env python3
"""A stand-in for the Hugging Face Hub, enough for the real `hf download` (huggingface_hub 0.36
to 2.x) pointed at it with HF_ENDPOINT: the real Hub cannot be reached from the test machines.

It serves a fixture tree, <root>/<org>/<name>/<revision>/<files> (crates/vllm-sim/hub, the same
tree the `hf` simulator copies from), with a `.gated` file beside the revisions of a gated repo
listing the tokens that may read its files. Routes, as the clients call them:

  GET  /api/models/<org>/<name>/revision/<rev>   the repo's info (sha, siblings, gated)
  GET  /api/models/<org>/<name>/tree/<rev>       the file list (1.x and 2.x)
  HEAD/GET /<org>/<name>/resolve/<rev>/<file>    a file, with X-Repo-Commit and ETag

(datasets/ and spaces/ prefixes likewise). Failures answer as the Hub does: the same status
codes and the X-Error-Code / X-Error-Message / X-Request-Id headers that huggingface_hub turns
into its error texts (huggingface_hub/utils/_http.py, hf_raise_for_status), with the Hub's
messages as they appear in public logs: "Invalid username or password." (401, no token, unknown
repo), "Invalid rev id: <rev>", "Access to model <repo> is restricted. You must have access to it
and be authenticated to access it. Please log in." (401) and "... is restricted and you are not
in the authorized list. Visit https://huggingface.co/<repo> to ask for access." (403). Gated
repos' metadata is public on the Hub; their files are not. Anything else is a 404 (1.x and 2.x
ask /api/agent-harnesses at start-up; a mirror without it answers 404 and they go on).

A revision is a directory name (main, v2) or the commit id computed from its files.

  stand_in_hub.py --root DIR [--host 127.0.0.1] [--port 8080]

Prints `stand-in-hub: listening on http://HOST:PORT` on stderr once it accepts connections
(--port 0 picks a free port: read it there), then one line per request; exits 0 on SIGTERM or
SIGINT. Standard library only, so that it runs in any image with a Python 3.
"""

import argparse
import hashlib
import http.server
import json
import os
import secrets
import signal
import sys
import time
import urllib.parse


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub:
    """The fixture tree: <root>/<org>/<name>/<revision>/<files>, .gated beside the revisions."""

    def __init__(self, root):
        self.root = root

    def repo_dir(self, repo_type, repo_id):
        base = self.root if repo_type == "model" else os.path.join(self.root, repo_type + "s")
        parts = repo_id.split("/")
        if len(parts) != 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            return None
        d = os.path.join(base, *parts)
        return d if os.path.isdir(d) else None

    def files(self, rev_dir):
        out = []
        for dirpath, _, names in os.walk(rev_dir):
            for n in names:
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, rev_dir).replace(os.sep, "/")
                out.append(rel)
        return sorted(out, key=lambda p: p.encode())

    def commit(self, repo_type, repo_id, rev_dir):
        # The simulator's commit id (crates/vllm-sim/src/bin/hf/hub.rs): a SHA-1 over the file list.
        text = f"vllm-sim hub commit\nrepo {repo_type}s/{repo_id}\n"
        for p in self.files(rev_dir):
            with open(os.path.join(rev_dir, p), "rb") as f:
                text += f"{git_blob_sha1(f.read())} {p}\n"
        return hashlib.sha1(text.encode()).hexdigest()

    def revision(self, repo_type, repo_id, repo_dir, rev):
        if "/" in rev or rev.startswith("."):
            return None
        d = os.path.join(repo_dir, rev)
        if os.path.isdir(d):
            return d
        for name in sorted(os.listdir(repo_dir)):
            d = os.path.join(repo_dir, name)
            if not name.startswith(".") and os.path.isdir(d) and self.commit(repo_type, repo_id, d) == rev:
                return d
        return None

    def tokens(self, repo_dir):
        path = os.path.join(repo_dir, ".gated")
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            return {line.strip() for line in f if line.strip()}


def request_id():
    return f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};{secrets.token_hex(4)}-{secrets.token_hex(2)}-" \
           f"{secrets.token_hex(2)}-{secrets.token_hex(2)}-{secrets.token_hex(6)}"


class Handler(http.server.BaseHTTPRequestHandler):
    """The Hub's routes over `hub`; `delay` staggers file downloads (seconds per file index)."""

    hub = None
    delay = 0.0
    quiet = False

    def log_message(self, fmt, *args):
        # One line per request on stderr (BaseHTTPRequestHandler's default format, own prefix),
        # flushed: a pod's log or a test reading the pipe sees it at once.
        if not self.quiet:
            sys.stderr.write(f"stand-in-hub: {self.address_string()} {fmt % args}\n")
            sys.stderr.flush()

    def error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("X-Request-Id", request_id())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def json(self, value):
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("X-Request-Id", request_id())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def token(self):
        auth = self.headers.get("Authorization", "")
        return auth[len("Bearer "):] if auth.startswith("Bearer ") else None

    def route(self):
        path = urllib.parse.urlparse(self.path).path
        parts = [urllib.parse.unquote(p) for p in path.split("/")[1:]]
        if parts[:1] == ["api"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            kind = parts[1][:-1]
            return ("info" if parts[4] == "revision" else "tree"), kind, f"{parts[2]}/{parts[3]}", parts[5], None
        kind = "model"
        if parts[:1] in (["datasets"], ["spaces"]):
            kind, parts = parts[0][:-1], parts[1:]
        if len(parts) >= 5 and parts[2] == "resolve":
            return "file", kind, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
        return None, None, None, None, None

    def handle_any(self):
        what, kind, repo_id, rev, filename = self.route()
        if what is None:
            return self.error(404, None, "Not Found")
        token = self.token()
        repo = self.hub.repo_dir(kind, repo_id)
        if repo is None:
            if token is None:
                return self.error(401, "RepoNotFound", "Invalid username or password.")
            return self.error(404, "RepoNotFound", "Repository not found")
        rev_dir = self.hub.revision(kind, repo_id, repo, rev)
        if rev_dir is None:
            return self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        commit = self.hub.commit(kind, repo_id, rev_dir)
        files = self.hub.files(rev_dir)
        if what == "tree":
            entries = []
            for f in files:
                with open(os.path.join(rev_dir, f), "rb") as fh:
                    data = fh.read()
                entries.append({"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": f})
            return self.json(entries)
        if what == "info":
            accepted = self.hub.tokens(repo)
            body = json.dumps({
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
                "sha": commit, "private": False, "disabled": False,
                "gated": "manual" if accepted is not None else False,
                "siblings": [{"rfilename": f} for f in files], "tags": [], "downloads": 0, "likes": 0,
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("X-Request-Id", request_id())
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        accepted = self.hub.tokens(repo)
        if accepted is not None and token not in accepted:
            if token is None:
                return self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                                  "to it and be authenticated to access it. Please log in.")
            return self.error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the "
                              f"authorized list. Visit https://huggingface.co/{repo_id} to ask for access.")
        if filename not in files:
            return self.error(404, "EntryNotFound", "Entry not found")
        with open(os.path.join(rev_dir, filename), "rb") as f:
            data = f.read()
        if self.command == "GET" and self.delay:
            # Staggered, so that a mid-download log shows some files done and others not.
            time.sleep(self.delay * (1 + files.index(filename)))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{git_blob_sha1(data)}"')
        self.send_header("X-Request-Id", request_id())
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "GET":
            try:
                self.wfile.write(data)
            except BrokenPipeError:  # the client was killed mid-download (progress.log)
                pass

    do_GET = handle_any
    do_HEAD = handle_any


def serve(root, host, port):
    """A threading server over `root`, bound (not yet serving): its server_address has the port."""
    if not os.path.isdir(root):
        sys.exit(f"stand-in-hub: --root {root} is not a directory")
    handler = type("RootHandler", (Handler,), {"hub": Hub(root)})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="the fixture tree, e.g. crates/vllm-sim/hub")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (a pod: 0.0.0.0)")
    p.add_argument("--port", type=int, default=8080, help="0: any free port")
    a = p.parse_args()
    server = serve(a.root, a.host, a.port)

    # SIGTERM (a pod being deleted; PID 1 has no default action for it) ends serve_forever
    # through SystemExit, so the exit code is 0.
    def stop(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    sys.stderr.write(f"stand-in-hub: listening on http://{host}:{port} (root {a.root})\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
