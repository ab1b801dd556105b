#!/usr/bin/env bash
# Builds the operator binary the way the Dockerfile's build stage does, without
# Docker: the `dist` profile, for $(uname -m)-unknown-linux-musl, fully static,
# jemalloc linked in (built by tikv-jemalloc-sys with musl-gcc). hack/test.sh
# makes the local operator image (hack/images/build.sh) from it, so the chart
# and in-cluster tests run what users run. Prints the binary's path.
#
#   shipped.sh            build (cargo rebuilds only what changed) and check
#
# Its own target directory (target/shipped), so that it can build beside the
# dev build without waiting for cargo's lock on target/.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "shipped: error: $*" >&2; exit 1; }

target="$(uname -m)-unknown-linux-musl"
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "shipped: rustup target add $target ..." >&2
  rustup target add "$target" >&2 || die "rustup target add $target failed"
fi
if ! command -v musl-gcc >/dev/null; then
  echo "shipped: installing musl-tools (apt-get) for jemalloc's C build ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl-tools >/dev/null \
    || die "apt-get install musl-tools failed"
fi
dir="$repo/target/shipped"
(cd "$repo" && cargo build --profile dist --locked --target "$target" --target-dir "$dir" \
  -p vllmservice-operator >&2) || die "cargo build --profile dist --target $target failed"
bin="$dir/$target/dist/vllmservice-operator"
# As the Dockerfile: no library to load, or the image (which has none) could not run it.
if ldd "$bin" 2>&1 | grep -q '=>'; then
  die "$bin is not static: $(ldd "$bin" 2>&1 | head -n3 | tr '\n' ' ')"
fi
echo "$bin"
