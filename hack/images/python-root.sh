#!/usr/bin/env bash
# Lays out the root of a small Python image for hack/images/build.sh: Debian's CPython 3.11 (the
# machine's; its packages are installed with apt-get when missing) with the pinned packages of a
# requirements file from PyPI, the real `hf` of huggingface_hub, and the stand-in Hub:
#
#   OUT/usr/lib/python3.11/                    the standard library of libpython3.11-minimal and
#                                              libpython3.11-stdlib (dpkg's file lists, so the same on
#                                              every machine), less test modules and the extensions
#                                              that would drag in curses, readline, Berkeley DB, NIS
#   OUT/usr/local/lib/python3.11/dist-packages/  `pip install --no-deps --target` of REQUIREMENTS (the
#                                              path Debian's site.py reads, as in vLLM's image)
#   OUT/usr/local/bin/hf                       huggingface_hub's console script (`hf = huggingface_hub.cli.hf:main`)
#   OUT/usr/local/bin/stand-in-hub             crates/vllm-sim/tools/stand_in_hub.py
#
# Every .py is compiled with the image's interpreter to an unchecked-hash .pyc: the image's
# files carry mtime 0 (oci.py) so timestamp .pycs would never match, and a read-only root file
# system could not take new ones; without them each `hf` start would compile every module it imports.
# The interpreter itself (/usr/bin/python3.11) and the libraries of the extension modules are
# not copied here: build.sh gives the binary to oci.py, which adds what ldd lists.
#
#   python-root.sh REQUIREMENTS OUT     prints OUT; does nothing when OUT/.key matches the inputs
#
# pip's downloads are kept per machine in ~/.cache/vllm-operator/pip-wheels (a warm run needs no network).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() { echo "python-root: error: $*" >&2; exit 1; }
[ $# = 2 ] || die "usage: python-root.sh REQUIREMENTS OUT"
req=$1 out=$2
[ -f "$req" ] || die "$req not found"
py=/usr/bin/python3.11
pkgs=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib)
hub=$repo/crates/vllm-sim/tools/stand_in_hub.py
wheels=${VLLM_CACHE_DIR:-$HOME/.cache/vllm-operator}/pip-wheels

if [ ! -x "$py" ] || ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
  echo "python-root: installing ${pkgs[*]} (apt-get) ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null \
    || die "apt-get install ${pkgs[*]} failed"
fi
key=$( { cat "$req" "$0" "$hub"; dpkg-query -W "${pkgs[@]}"; } | sha256sum | cut -c1-32)
if [ -f "$out/.key" ] && [ "$(cat "$out/.key")" = "$key" ]; then
  echo "$out"
  exit 0
fi

# pip runs in a 3.11 that has it (Debian's has none); the wheels it picks are for CPython 3.11 on
# x86_64 glibc, which the image's interpreter is.
pip_py=${VLLM_PIP_PYTHON:-python3}
"$pip_py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
  || die "$pip_py is not a CPython 3.11 (set VLLM_PIP_PYTHON to one with pip)"
"$pip_py" -m pip --version >/dev/null 2>&1 || die "$pip_py has no pip"

tmp=$out.tmp
rm -rf "$tmp"
mkdir -p "$tmp/usr/local/bin" "$tmp/usr/local/lib/python3.11/dist-packages"

# The standard library: dpkg's lists, not the directory, which other packages add to
# (python3-distutils, python3-lib2to3, a -dev's config dir). -L: sitecustomize.py is a link to
# /etc/python3.11/.
skip='/(test|tests|idlelib|tkinter|turtledemo|ensurepip|lib2to3)/|/lib-dynload/(_test|_xx|xxlimited|_ctypes_test|nis\.|_dbm\.|_curses|readline\.|ossaudiodev\.)'
dpkg -L libpython3.11-minimal libpython3.11-stdlib | grep '^/usr/lib/python3.11/' | grep -Ev "$skip" \
  | while read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done | LC_ALL=C sort -u \
  | xargs -r -d '\n' cp -L --parents -t "$tmp"

# The wheels are kept per machine as files: the registry's answers may say not to cache them, so
# pip's HTTP cache would keep nothing. Offline first; PyPI only for what is not there yet.
site=$tmp/usr/local/lib/python3.11/dist-packages
pip_args=(--disable-pip-version-check --no-deps --only-binary=:all: -r "$req")
mkdir -p "$wheels"
if ! "$pip_py" -m pip install --quiet --root-user-action=ignore --no-compile --no-index --find-links "$wheels" \
       --target "$site" "${pip_args[@]}" >/dev/null 2>&1; then
  echo "python-root: pip download -r $req into $wheels ..." >&2
  "$pip_py" -m pip download --quiet -d "$wheels" "${pip_args[@]}" >&2 || die "pip download -r $req failed"
  rm -rf "$site" && mkdir -p "$site"
  "$pip_py" -m pip install --quiet --root-user-action=ignore --no-compile --no-index --find-links "$wheels" \
    --target "$site" "${pip_args[@]}" >&2 || die "pip install -r $req failed"
fi
# pip's own console scripts name the interpreter that ran pip; the image's are written below.
rm -rf "$tmp/usr/local/lib/python3.11/dist-packages/bin"

# The console script pip would write for the image's interpreter.
cat >"$tmp/usr/local/bin/hf" <<'EOF'
#!/usr/bin/python3
# -*- coding: utf-8 -*-
import re
import sys
from huggingface_hub.cli.hf import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\.pyw|\.exe)?$', '', sys.argv[0])
    sys.exit(main())
EOF
# The image has no /usr/bin/env.
sed '1s|.*|#!/usr/bin/python3|' "$hub" >"$tmp/usr/local/bin/stand-in-hub"
chmod 0755 "$tmp/usr/local/bin/hf" "$tmp/usr/local/bin/stand-in-hub"

# -s/-p: the paths inside the .pycs are the image's, not this staging directory's.
"$py" -m compileall -q -j0 --invalidation-mode unchecked-hash -s "$tmp" -p / \
  "$tmp/usr/lib/python3.11" "$tmp/usr/local/lib/python3.11/dist-packages" >/dev/null \
  || die "compileall failed"

echo "$key" >"$tmp/.key"
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
