#!/usr/bin/env bash
# The benchmarks' plotting environment: target/bench-venv with matplotlib from
# PyPI, made on first use. Prints its python.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$repo/target/bench-venv
if ! "$venv/bin/python" -c 'import matplotlib' >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'matplotlib>=3.8,<4' >&2
fi
echo "$venv/bin/python"
