#!/usr/bin/env bash
# Downloads the Debian bookworm packages vinci needs on the GPU machine into .deps/ (git-ignored),
# for scripts/build_gpu.sh to unpack there. Run it on a Debian bookworm machine (a development
# machine); the GPU machine has no network. Idempotent: a .deps/ that already holds the current
# version of every package is left alone, stale versions and packages no longer listed are removed.
# Prints the total size: everything in .deps/ travels with the working tree, which is capped.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "fetch_gpu_deps: ERROR: $*" >&2; exit 1; }
say() { echo "fetch_gpu_deps: $*"; }

# What CMakeLists.txt finds, as bookworm packages (headers + CMake/pkg-config files + shared libs).
packages=(
  libcapnp-dev libcapnp-0.9.2 capnproto
  libxxhash-dev libxxhash0
  libboost-program-options-dev libboost-program-options1.74-dev libboost-program-options1.74.0
  libboost1.74-dev
  libtomlplusplus-dev libtomlplusplus3
  nlohmann-json3-dev
  libzstd-dev libzstd1
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev libbenchmark1debian
  libcurl4-openssl-dev
  libcpp-httplib-dev libcpp-httplib0.11
  libhiredis-dev libhiredis0.14
  # The evaluation queue's server (docs/distributed.md) and its tests: redis-server is a link to
  # redis-tools' redis-check-rdb, which needs jemalloc and lzf.
  redis-server redis-tools libjemalloc2 liblzf1
  # The Triton compile sandbox (docs/live_evaluator.md, "Compile sandbox"): build_gpu.sh puts its
  # bin/ on PATH, where TritonCompiler finds bwrap.
  bubblewrap
)
# Unpacked on the GPU machine only if it lacks them: CapnProtoConfig.cmake requires OpenSSL's
# headers and libssl.so (nothing in vinci links it), and find_package(PkgConfig) needs pkg-config.
# The same for libcurl's runtime library, for the headers cpp-httplib's header includes (it was
# built with OpenSSL, zlib and Brotli support), and for the libraries bwrap links (libcap2,
# libselinux1; Ubuntu has both).
fallback_packages=(libssl-dev libssl3 pkgconf pkgconf-bin libpkgconf3 libcurl4 zlib1g-dev libbrotli-dev libbrotli1
  libcap2 libselinux1)
all=("${packages[@]}" "${fallback_packages[@]}")

# The GPU machine's copy of the working tree is capped at 64 MiB in all; keep room for the sources.
max_bytes=$((48 * 1024 * 1024))
dir=.deps

command -v apt-get >/dev/null || die "apt-get not found: run this on a Debian bookworm machine"
if [ -r /etc/os-release ] && ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
  say "warning: this is not Debian bookworm; the packages must be bookworm's (glibc <= 2.39)"
fi

# Candidate version of each package, as apt-get download would fetch it (file names encode ':' as %3a).
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
need_update=0
for p in "${all[@]}"; do
  v=$(candidate "$p")
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then need_update=1; fi
done
if ((need_update)); then
  say "apt-get update (some package has no candidate version yet)"
  apt-get update -q >/dev/null || die "apt-get update failed"
fi

mkdir -p "$dir"
wanted=()
missing=()
for p in "${all[@]}"; do
  v=$(candidate "$p")
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then die "no such package in the apt sources: $p"; fi
  f=$(ls "$dir/${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
  if [ -n "$f" ]; then
    wanted+=("$(basename "$f")")
  else
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  say "downloading ${missing[*]}"
  # apt-get download writes into the current directory.
  (cd "$dir" && apt-get download -q "${missing[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed') ||
    die "apt-get download failed for: ${missing[*]}"
  for p in "${missing[@]}"; do
    v=$(candidate "$p")
    f=$(ls "$dir/${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
    [ -n "$f" ] || die "download of $p $v left no .deb in $dir"
    wanted+=("$(basename "$f")")
  done
else
  say "all ${#all[@]} packages already in $dir"
fi

# Remove stale versions and packages no longer listed, so the GPU machine unpacks exactly these.
for f in "$dir"/*.deb; do
  b=$(basename "$f")
  keep=0
  for w in "${wanted[@]}"; do
    if [ "$w" = "$b" ]; then keep=1; break; fi
  done
  if ((!keep)); then say "removing stale $b"; rm -f "$f"; fi
done

# The list build_gpu.sh checks against: required packages, then the fallbacks.
{
  for p in "${packages[@]}"; do echo "required $p"; done
  for p in "${fallback_packages[@]}"; do echo "fallback $p"; done
} >"$dir/manifest.txt"

bytes=$(cat "$dir"/*.deb | wc -c)
say "$(ls "$dir"/*.deb | wc -l) packages, $((bytes / 1024 / 1024)) MiB in $dir/"
((bytes <= max_bytes)) || die "$dir/ holds $bytes bytes, over the $max_bytes budget for the GPU machine"
