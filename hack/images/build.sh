#!/usr/bin/env bash
# Builds the local cluster's container images as OCI image layout archives,
# without Docker (hack/images/oci.py), into target/images/:
#
#   localhost/pause:dev                 hack/images/pause.c, static; containerd's sandbox_image
#   localhost/vllm-sim:dev              target/<profile>/vllm-sim   (entrypoint /usr/local/bin/vllm-sim, user 65532, port 8000),
#                                       plus /bin/busybox (static) so that tests can `kubectl exec` into
#                                       the simulator's container (df /dev/shm, /proc/mounts, a write to
#                                       the read-only model mount, env); vLLM's real image has a shell too.
#                                       No `hf`: the download tests set downloaderImage to the real one below
#   localhost/busybox:dev               Debian's busybox-static (/bin/busybox): sh, httpd, nc, wget for
#                                       tests and debugging; entrypoint /bin/busybox, user 65532
#   localhost/vllmservice-operator:dev  $VLLM_OPERATOR_BINARY if set (hack/test.sh sets it to the binary
#                                       users run, from hack/images/shipped.sh: static, musl, dist), else
#                                       target/<profile>/vllmservice-operator
#                                       (as the Dockerfile: entrypoint /usr/local/bin/vllmservice-operator,
#                                        cmd [run], user 65532:65532, ports 8443 and 8081)
#   localhost/hf:0.36                   the REAL `hf` of huggingface_hub 0.36.2 (vLLM 0.18-0.19's), archive ~69 MiB
#   localhost/hf:2                      the REAL `hf` of huggingface_hub 2.4.0 (vLLM 0.34's generation), archive ~73 MiB
#                                       Each: Debian's CPython 3.11 (/usr/bin/python3, its standard library,
#                                       the libraries its extension modules load), the pinned packages of
#                                       hack/images/hf/<tag>.txt from PyPI in /usr/local/lib/python3.11/dist-packages,
#                                       /usr/local/bin/hf (entrypoint), and the stand-in Hub:
#                                       /usr/local/bin/stand-in-hub (crates/vllm-sim/tools/stand_in_hub.py)
#                                       serving /srv/hub (crates/vllm-sim/hub) with
#                                       `stand-in-hub --root /srv/hub --host 0.0.0.0 --port 8080`;
#                                       user 65532:65532, runs on a read-only root file system (precompiled
#                                       .pycs). Laid out by hack/images/python-root.sh (pip's downloads kept
#                                       in ~/.cache/vllm-operator/pip-wheels; the first build needs PyPI)
#
#   build.sh [--profile debug|release] [--cargo] [pause|busybox|vllm-sim|operator|hf-0.36|hf-2 ...]
#
# Default: all six, profile $VLLM_IMAGE_PROFILE or debug. --cargo first builds
# the Rust binaries (cargo build -p ...); without it a missing binary is an error
# that names the cargo command. Prints one line per image: NAME ARCHIVE DIGEST.
# An archive whose inputs did not change is not rebuilt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${VLLM_IMAGE_DIR:-$repo/target/images}
profile=${VLLM_IMAGE_PROFILE:-debug}
cargo=0
want=()
die() { echo "images: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --cargo) cargo=1; shift ;;
    pause|busybox|vllm-sim|operator|hf-0.36|hf-2) want+=("$1"); shift ;;
    *) die "unknown argument $1 (usage: build.sh [--profile debug|release] [--cargo] [pause|busybox|vllm-sim|operator|hf-0.36|hf-2 ...])" ;;
  esac
done
[ ${#want[@]} -gt 0 ] || want=(pause busybox vllm-sim operator hf-0.36 hf-2)
mkdir -p "$out"
command -v python3 >/dev/null || die "python3 not found"

need_gcc() {
  if ! command -v gcc >/dev/null || [ ! -f /usr/lib/x86_64-linux-gnu/libc.a ]; then
    echo "images: installing gcc and libc6-dev (apt-get) for the static pause program ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev >/dev/null \
      || die "apt-get install gcc libc6-dev failed"
  fi
}

# image NAME BINARY OCI.PY-ARGS...: (re)builds target/images/<base>.tar unless its stamp matches
# (<base>: the name without localhost/ and :dev, other tags after a dash: hf-0.36).
image() {
  local name=$1 binary=$2; shift 2
  local base=${name#localhost/}; base=${base%:dev}; base=${base//:/-}
  local tar=$out/$base.tar stamp=$out/$base.stamp key
  [ -x "$binary" ] || die "$binary not found"
  # Inputs: the binary and the --extra files (size, mtime, inode), the libraries ldd lists for them
  # and for the trees' shared objects, the contents of every file of the --tree directories, the
  # recipe and its arguments.
  local a prev= extras=() trees=() t
  for a in "$@"; do
    case $prev:$a in
      --tree:/*:/*) trees+=("${a%%:*}") ;;
      *:/*:/*) extras+=("${a%%:*}") ;;
    esac
    prev=$a
  done
  for t in "${trees[@]}"; do [ -d "$t" ] || die "$t is not a directory"; done
  key=$( { stat -c '%s %Y %i' "$binary" "${extras[@]}"
           { for a in "$binary" "${extras[@]}"; do ldd "$a" 2>/dev/null; done
             for t in "${trees[@]}"; do
               find -L "$t" -type f \( -name '*.so' -o -name '*.so.*' \) -print0 | xargs -0 -r ldd 2>/dev/null
             done; } | awk '/=>/ {print $3} /^\t\// {print $1}' \
             | sort -u | xargs -r stat -L -c '%n %s %Y'
           for t in "${trees[@]}"; do
             (cd "$t" && find -L . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
           done
           cat "$here/oci.py"; echo "$name $*"; } | sha256sum | cut -c1-32)
  if [ -f "$tar" ] && [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$key" ]; then
    echo "$name $tar $(sed -n 2p "$stamp")"
    return 0
  fi
  local digest
  digest=$(python3 "$here/oci.py" --name "$name" --binary "$binary" --out "$tar" "$@") \
    || die "building $name from $binary failed"
  printf '%s\n%s\n' "$key" "$digest" >"$stamp"
  echo "$name $tar $digest"
}

need_busybox() {
  if [ ! -x /bin/busybox ] || ! /bin/busybox httpd --help >/dev/null 2>&1; then
    echo "images: installing busybox-static (apt-get) ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends busybox-static >/dev/null \
      || die "apt-get install busybox-static failed"
  fi
  ldd /bin/busybox >/dev/null 2>&1 && die "/bin/busybox is not static (Debian's busybox-static is)"
  return 0
}

cargo_bin() { # package binary [more binaries of the package]: prints the first one's path
  local pkg=$1; shift
  local b bins=() flag=()
  for b in "$@"; do bins+=(--bin "$b"); done
  if [ $cargo = 1 ]; then
    [ "$profile" = release ] && flag=(--release)
    [ "$profile" = debug ] || [ "$profile" = release ] || die "--cargo knows the debug and release profiles only"
    echo "images: cargo build ${flag[*]} -p $pkg ${bins[*]} ..." >&2
    (cd "$repo" && cargo build "${flag[@]}" -p "$pkg" "${bins[@]}" >&2) || die "cargo build -p $pkg failed"
  fi
  local hint="cargo build -p $pkg"; [ "$profile" = release ] && hint+=" --release"
  for b in "$@"; do
    [ -x "$repo/target/$profile/$b" ] || die "$repo/target/$profile/$b is not built: run \`$hint\` (or hack/images/build.sh --cargo)"
  done
  echo "$repo/target/$profile/$1"
}

for w in "${want[@]}"; do
  case $w in
    pause)
      need_gcc
      pbin=$out/pause
      if [ ! -x "$pbin" ] || [ "$here/pause.c" -nt "$pbin" ]; then
        gcc -static -O2 -Wall -Wextra -o "$pbin.tmp" "$here/pause.c" || die "compiling pause.c failed"
        mv "$pbin.tmp" "$pbin"
      fi
      image localhost/pause:dev "$pbin" --dest /pause --entrypoint '["/pause"]' --user 65535:65535 ;;
    busybox)
      need_busybox
      image localhost/busybox:dev /bin/busybox --dest /bin/busybox --entrypoint '["/bin/busybox"]' \
        --cmd '["sh"]' --user 65532:65532 ;;
    vllm-sim)
      b=$(cargo_bin vllm-sim vllm-sim) || exit 1
      need_busybox
      image localhost/vllm-sim:dev "$b" --dest /usr/local/bin/vllm-sim \
        --entrypoint '["/usr/local/bin/vllm-sim"]' --user 65532:65532 --port 8000/tcp \
        --extra /bin/busybox:/bin/busybox ;;
    operator)
      # Entrypoint, cmd, user and ports are read from the Dockerfile's last stage,
      # so both builds give the same image configuration.
      df=$repo/Dockerfile
      last() { awk -v k="$1" '$1==k {sub(/^[A-Z]+[ \t]+/, ""); v=$0} END {print v}' "$df"; }
      d_entry=$(last ENTRYPOINT); d_cmd=$(last CMD); d_user=$(last USER); d_ports=$(last EXPOSE)
      [ -n "$d_entry" ] && [ -n "$d_user" ] || die "no ENTRYPOINT/USER in $df"
      d_dest=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0])' "$d_entry") \
        || die "ENTRYPOINT in $df is not in JSON form"
      port_args=(); for p in $d_ports; do port_args+=(--port "$p"); done
      if [ -n "${VLLM_OPERATOR_BINARY:-}" ]; then
        b=$VLLM_OPERATOR_BINARY
      else
        b=$(cargo_bin vllmservice-operator vllmservice-operator) || exit 1
      fi
      image localhost/vllmservice-operator:dev "$b" \
        --dest "$d_dest" --entrypoint "$d_entry" --cmd "${d_cmd:-[]}" --user "$d_user" "${port_args[@]}" \
        --label org.opencontainers.image.title=vllmservice-operator ;;
    hf-0.36|hf-2)
      # The same interpreter and recipe for both; only the requirements differ.
      root=$("$here/python-root.sh" "$here/hf/${w#hf-}.txt" "$out/$w.root") || die "laying out $w failed"
      image "localhost/hf:${w#hf-}" /usr/bin/python3.11 --dest /usr/bin/python3 \
        --entrypoint '["/usr/local/bin/hf"]' --user 65532:65532 --port 8080/tcp \
        --extra "$root/usr/local/bin/hf:/usr/local/bin/hf" \
        --extra "$root/usr/local/bin/stand-in-hub:/usr/local/bin/stand-in-hub" \
        --tree "$root/usr/lib/python3.11:/usr/lib/python3.11" \
        --tree "$root/usr/local/lib/python3.11:/usr/local/lib/python3.11" \
        --tree "$repo/crates/vllm-sim/hub:/srv/hub" ;;
  esac
done
