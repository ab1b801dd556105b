#!/usr/bin/env python3
"""Captures what the REAL `hf download` (huggingface_hub 0.36.2, the version in vLLM 0.18's
image) prints, for crates/operator/tests/fixtures/hf-logs/.

The real Hub cannot be reached from the test machines, so the real client is pointed
(HF_ENDPOINT) at the stand-in for the Hub, stand_in_hub.py beside this script, served from
127.0.0.1 in this process. It serves crates/vllm-sim/hub (the same fixture tree the `hf`
simulator copies from) and answers as the Hub does (status codes, X-Error-Code /
X-Error-Message headers, the Hub's messages): see its docstring.

Then the output is normalised: the stand-in's URL becomes https://huggingface.co, the venv's
paths become those of vLLM's image (/usr/local/lib/python3.12/dist-packages, /usr/lib/python3.12,
/usr/local/bin/hf installed by uv, whose entry script calls main() on line 10), and the
temporary download directory becomes /data/model. stdout and stderr go to one pipe, as a
container's log interleaves them; tqdm's carriage returns and cursor-up sequences are kept.

huggingface_hub 1.x and 2.x list a revision's files with /api/models/<repo>/tree/<rev>; the
stand-in serves that too. They also ask /api/agent-harnesses at start-up, which the stand-in
does not serve (404, as a mirror without it): the client logs that at debug level and goes on.
The stand-in's own request lines are not printed here (Handler.quiet).

--job-env runs the client with the environment of the operator's download Job (HF_DEBUG=1: the
per-file lines that carry the progress bar into a container log, and full tracebacks).

Usage (needs python3, network access to PyPI once, and root for the tmpfs of disk-full):
  python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install huggingface_hub==0.36.2
  python3 crates/vllm-sim/tools/capture-hf-logs.py /tmp/hfvenv crates/operator/tests/fixtures/hf-logs
  python3 -m venv /tmp/hf2 && /tmp/hf2/bin/pip install huggingface_hub==2.4.0
  python3 crates/vllm-sim/tools/capture-hf-logs.py --job-env /tmp/hf2 crates/operator/tests/fixtures/hf-logs/2.4.0
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# The stand-in Hub is its own program (also served in the cluster's tests); this directory is on
# sys.path as the script's own.
from stand_in_hub import Handler, serve

HERE = os.path.dirname(os.path.abspath(__file__))
HUB = os.path.join(os.path.dirname(HERE), "hub")
LOCAL_DIR = "/data/model"


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
    Handler.quiet = True
    server = serve(HUB, "127.0.0.1", 0)
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
