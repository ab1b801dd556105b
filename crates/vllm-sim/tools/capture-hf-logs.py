#!/usr/bin/env python3
"""Captures what the REAL `hf download` (huggingface_hub 0.36.2, the version in vLLM 0.18's
image) prints, for crates/operator/tests/fixtures/hf-logs/.

The real Hub cannot be reached from the test machines, so the real client is pointed
(HF_ENDPOINT) at a small stand-in for the Hub served from 127.0.0.1. The stand-in serves
crates/vllm-sim/hub (the same fixture tree the `hf` simulator copies from) and answers as the
Hub does: the same status codes and the X-Error-Code / X-Error-Message / X-Request-Id headers
that huggingface_hub turns into its error texts (see huggingface_hub/utils/_http.py,
hf_raise_for_status). The server messages are the Hub's as they appear in public logs:
"Invalid username or password." (401, no token, unknown repo), "Invalid rev id: <rev>",
"Access to model <repo> is restricted. You must have access to it and be authenticated to
access it. Please log in." (401) and "... is restricted and you are not in the authorized
list. Visit https://huggingface.co/<repo> to ask for access." (403). Gated repos' metadata
(api/models/...) is public on the Hub; their files are not.

Then the output is normalised: the stand-in's URL becomes https://huggingface.co, the venv's
paths become those of vLLM's image (/usr/local/lib/python3.12/dist-packages, /usr/lib/python3.12,
/usr/local/bin/hf installed by uv, whose entry script calls main() on line 10), and the
temporary download directory becomes /data/model. stdout and stderr go to one pipe, as a
container's log interleaves them; tqdm's carriage returns and cursor-up sequences are kept.

huggingface_hub 1.x and 2.x list a revision's files with /api/models/<repo>/tree/<rev>; the
stand-in serves that too. They also ask /api/agent-harnesses at start-up, which the stand-in
does not serve (404, as a mirror without it): the client logs that at debug level and goes on.

--job-env runs the client with the environment of the operator's download Job (HF_DEBUG=1: the
per-file lines that carry the progress bar into a container log, and full tracebacks).

Usage (needs python3, network access to PyPI once, and root for the tmpfs of disk-full):
  python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install huggingface_hub==0.36.2
  python3 crates/vllm-sim/tools/capture-hf-logs.py /tmp/hfvenv crates/operator/tests/fixtures/hf-logs
  python3 -m venv /tmp/hf2 && /tmp/hf2/bin/pip install huggingface_hub==2.4.0
  python3 crates/vllm-sim/tools/capture-hf-logs.py --job-env /tmp/hf2 crates/operator/tests/fixtures/hf-logs/2.4.0
"""

import hashlib
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
HUB = os.path.join(os.path.dirname(HERE), "hub")
LOCAL_DIR = "/data/model"


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
        # The simulator's commit id (crates/vllm-sim/src/hf/hub.rs): a SHA-1 over the file list.
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
    hub = Hub(HUB)
    delay = 0.0

    def log_message(self, *args):
        pass

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


def normalise(text, venv, endpoint, local_dir):
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    stdlib = subprocess.run([python, "-c", "import os; print(os.path.dirname(os.__file__))"],
                            capture_output=True, text=True).stdout.strip()
    # Request ids and trace ids differ per run.
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "00000000-0000-0000-0000-000000000000", text)
    text = text.replace(endpoint, "https://huggingface.co")
    text = text.replace(site, "/usr/local/lib/python3.12/dist-packages")
    if stdlib:
        text = text.replace(stdlib, "/usr/lib/python3.12")
    text = re.sub(r'File "[^"]*/bin/hf", line \d+, in <module>', 'File "/usr/local/bin/hf", line 10, in <module>', text)
    text = text.replace(os.path.realpath(local_dir), LOCAL_DIR).replace(local_dir, LOCAL_DIR)
    return text


JOB_ENV = {}


def run(venv, endpoint, args, env_extra, local_dir, stop_after=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.pop("PYTHONUNBUFFERED", None)
    home = os.path.join(os.path.dirname(local_dir), "hf-home")
    # HF_HUB_DISABLE_UPDATE_CHECK: 1.x and 2.x would ask PyPI for a newer release.
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": home, "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_UPDATE_CHECK": "1"})
    env.update(JOB_ENV)
    env.update(env_extra)
    p = subprocess.Popen([os.path.join(venv, "bin", "hf"), "download", *args, "--local-dir", local_dir],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    if stop_after is None:
        out, _ = p.communicate(timeout=120)
        return out.decode(), p.returncode
    # Mid-download: what a container log shows then, i.e. every line up to the last newline
    # (the runtime writes a line to the log when its newline arrives).
    buf = b""
    os.set_blocking(p.stdout.fileno(), False)
    deadline = time.time() + stop_after
    while time.time() < deadline:
        try:
            chunk = p.stdout.read()
        except BlockingIOError:
            chunk = None
        if chunk:
            buf += chunk
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    return buf[: buf.rfind(b"\n") + 1].decode(), None


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--job-env"]:
        JOB_ENV["HF_DEBUG"] = "1"
        argv = argv[1:]
    venv, out_dir = argv[0], argv[1]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp(prefix="hf-capture-")
    qwen = ["Qwen/Qwen2.5-0.5B-Instruct", "--revision", "main"]
    llama = ["meta-llama/Llama-3.1-8B-Instruct", "--revision", "main"]
    cases = [
        ("ok.log", qwen, {}, None),
        ("gated.log", llama, {}, None),
        ("gated-wrong-token.log", llama, {"HF_TOKEN": "hf_not_the_accepted_token_0000000000"}, None),
        ("repo-not-found.log", ["org/does-not-exist", "--revision", "main"], {}, None),
        ("revision-not-found.log", ["Qwen/Qwen2.5-0.5B-Instruct", "--revision", "no-such-revision"], {}, None),
        ("progress.log", qwen, {}, 3.7),
    ]
    os.makedirs(out_dir, exist_ok=True)
    for name, args, env, stop in cases:
        local = os.path.join(work, name.replace(".log", ""), "model")
        Handler.delay = 1.5 if stop else 0.0
        text, code = run(venv, endpoint, args, env, local, stop)
        with open(os.path.join(out_dir, name), "w") as f:
            f.write(normalise(text, venv, endpoint, local))
        print(f"{name}: exit {code}")
    Handler.delay = 0.0
    # disk-full: the local dir on a 4 KiB tmpfs.
    tiny = os.path.join(work, "disk-full", "tinyfs")
    os.makedirs(tiny)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", tiny], check=True)
    try:
        local = os.path.join(tiny, "model")
        text, code = run(venv, endpoint, ["org/sql-lora", "--revision", "main"], {}, local)
        with open(os.path.join(out_dir, "disk-full.log"), "w") as f:
            f.write(normalise(text, venv, endpoint, local))
        print(f"disk-full.log: exit {code}")
    finally:
        subprocess.run(["umount", tiny], check=False)
    shutil.rmtree(work, ignore_errors=True)
    server.shutdown()


if __name__ == "__main__":
    main()
