#!/usr/bin/env bash
# The real Python clients the tests run against a served model (the official
# openai SDK and guidellm, crates/vllm-sim/tests/clients): a venv made once per
# machine from PyPI with the exact versions pinned in hack/tools/py-clients/
# requirements.txt (the two clients and everything they pull in), in the cache
# shared with the local control plane (hack/cluster/lib.sh), keyed by those
# pins and the Python version (not by this script: a 3 GB install is not redone
# for an edited comment).
#
#   hack/tools/py-clients.sh [--build]     make the venv when needed, print its path (last line)
#   hack/tools/py-clients.sh PROGRAM ARGS  make it when needed, then exec the venv's PROGRAM
#                                          (python, guidellm, ...)
#
# Measured on the 2-core test machine (openai 3.63.0, guidellm 0.8.1, Python 3.11.7,
# 101 packages):
#   download  3.1 GB of wheels (torch 539 MB, nvidia-cudnn 519 MB, nvidia-cublas
#             405 MB, triton 286 MB, ...: guidellm requires torch, and torch from
#             PyPI does not import without its CUDA libraries, even on a CPU)
#   cold      2 min 36 s and 5 min 16 s, two installs beside a cluster test run
#             (load up to 11); pip keeps no cache here: each cold install downloads
#   warm      0.2 s (the venv exists: only this check)
#   disk      6.0 GB (nvidia-* 3.0 GB, torch 1.2 GB, triton 1.0 GB)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"

reqs=$here/py-clients/requirements.txt
python=${PYTHON:-python3}
command -v "$python" >/dev/null 2>&1 || die "$python not found on PATH: the clients need Python 3.11"
pyver=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
# The pins were resolved on 3.11: other versions may lack some of these wheels.
case $pyver in 3.11.*) ;; *) die "$python is Python $pyver; $reqs was resolved on Python 3.11" ;; esac

key=$( (cat "$reqs"; echo "$pyver") | sha256sum | cut -c1-16)
venv="$(cluster_cache_root)/py-clients/$key"

# A venv's scripts hold its absolute path, so it is made in place; the marker
# written last tells a finished install from an interrupted one (redone).
done_marker=$venv/.installed
if [ ! -f "$done_marker" ]; then
  mkdir -p "$(dirname "$venv")"
  exec 8>"$venv.lock"
  flock -w 1800 8 || die "another install holds $venv.lock"
  if [ ! -f "$done_marker" ]; then
    log=$venv.log
    echo "installing openai and guidellm from PyPI into $venv (once per machine, ~3 GB; log: $log) ..." >&2
    rm -rf "$venv"
    if ! { "$python" -m venv "$venv" &&
           "$venv/bin/pip" install --disable-pip-version-check --no-input --no-deps -r "$reqs" &&
           "$venv/bin/pip" check &&
           "$venv/bin/python" -c 'import openai, guidellm, torch, transformers'; } >"$log" 2>&1; then
      die "installing the Python clients failed ($(grep -m1 -E '^ERROR|Error' "$log" || tail -n1 "$log")); full log: $log"
    fi
    touch "$done_marker"
  fi
  exec 8>&-
fi

if [ $# -eq 0 ] || [ "$1" = "--build" ]; then
  echo "$venv"
  exit 0
fi
program=$1
shift
[ -x "$venv/bin/$program" ] || die "no $program in $venv/bin"
exec "$venv/bin/$program" "$@"
