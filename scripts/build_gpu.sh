#!/usr/bin/env bash
# Builds vinci on the GPU machine (Ubuntu 24.04, CUDA 13, PyTorch with CUDA, no network) into
# build-gpu/ and runs the smoke checks. The Debian bookworm packages come from .deps/ (filled by
# scripts/fetch_gpu_deps.sh on a development machine and sent along with the run) and are unpacked
# into /tmp/deps. docs/gpu_machine.md has the exact command.
#
# Extra arguments go to cmake's configure step, e.g. scripts/build_gpu.sh -DVINCI_BUILD_BENCH=OFF.
# Environment:
#   VINCI_GPU_DEPS_DIR    where the .debs are (default .deps)
#   VINCI_GPU_PREFIX      where they are unpacked (default /tmp/deps)
#   VINCI_GPU_BUILD_DIR   build directory (default build-gpu)
#   VINCI_TORCH_PREFIX    CMAKE_PREFIX_PATH for find_package(Torch) (default: asked of python3's torch)
#   VINCI_GPU_CTEST=0     skip `ctest -L unit` after the smoke checks
#   VINCI_GPU_NO_GPU=1    allow a machine without nvidia-smi (to try the script on a CPU machine)
# Everything printed also goes to $VINCI_GPU_BUILD_DIR/build_gpu.log.
# Exit status: 0 only if configure, build and every smoke check passed.
set -euo pipefail
cd "$(dirname "$0")/.."

deps_dir=${VINCI_GPU_DEPS_DIR:-.deps}
prefix=${VINCI_GPU_PREFIX:-/tmp/deps}
build_dir=${VINCI_GPU_BUILD_DIR:-build-gpu}
arch=x86_64-linux-gnu
libdir=$prefix/usr/lib/$arch

mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
log=$build_dir/build_gpu.log
exec > >(tee "$log") 2>&1

die() {
  echo "build_gpu: ERROR: $*" >&2
  exit 1
}
say() { echo "build_gpu: $*"; }
step() { echo; echo "=== build_gpu: $* ==="; }

# ---------------------------------------------------------------------------------------------
step "tools"
for t in g++ gcc cmake dpkg; do
  command -v "$t" >/dev/null || die "$t not found on PATH"
done
if [ -d /usr/local/cuda/bin ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); else say "ninja not found; using make"; fi
say "g++: $(g++ --version | head -n1)"
say "cmake: $(cmake --version | head -n1)"
if command -v ninja >/dev/null; then say "ninja: $(ninja --version)"; fi
if command -v nvcc >/dev/null; then
  say "nvcc: $(nvcc --version | grep -i release)"
else
  say "nvcc not found (CUDAToolkit must still provide NVRTC and the driver API)"
fi
say "os: $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -n1 | awk '{print $NF}')"

# Torch first, before LD_LIBRARY_PATH points at the unpacked Debian libraries.
if [ -n "${VINCI_TORCH_PREFIX:-}" ]; then
  torch_prefix=$VINCI_TORCH_PREFIX
  say "torch: CMAKE_PREFIX_PATH from VINCI_TORCH_PREFIX: $torch_prefix"
else
  command -v python3 >/dev/null || die "python3 not found; set VINCI_TORCH_PREFIX to libtorch's CMake prefix"
  torch_info=$(python3 -c 'import torch
print(torch.utils.cmake_prefix_path)
print(torch.__version__, "cuda", torch.version.cuda, "cuda_available", torch.cuda.is_available())') ||
    die "python3 cannot import torch; set VINCI_TORCH_PREFIX to libtorch's CMake prefix"
  torch_prefix=$(sed -n 1p <<<"$torch_info")
  say "torch: $(sed -n 2p <<<"$torch_info")"
  say "torch: CMAKE_PREFIX_PATH $torch_prefix"
fi
[ -d "$torch_prefix" ] || die "torch CMake prefix $torch_prefix does not exist"

# ---------------------------------------------------------------------------------------------
step "Debian packages: $deps_dir -> $prefix"
[ -d "$deps_dir" ] || die "$deps_dir/ not found: run scripts/fetch_gpu_deps.sh on a development machine and pass carry=[\"$deps_dir\"] to the run"
manifest=$deps_dir/manifest.txt
[ -f "$manifest" ] || die "$manifest not found: run scripts/fetch_gpu_deps.sh again"
debs=()
while read -r kind pkg; do
  f=$(ls "$deps_dir/${pkg}_"*.deb 2>/dev/null | head -n1 || true)
  [ -n "$f" ] || die "$deps_dir has no .deb for $pkg: run scripts/fetch_gpu_deps.sh again"
  if [ "$kind" = fallback ]; then
    case "$pkg" in
      libssl*)
        # CapnProtoConfig.cmake does find_dependency(OpenSSL): headers and libssl.so needed.
        if [ -f /usr/include/openssl/ssl.h ] && [ -e /usr/lib/$arch/libssl.so ]; then continue; fi ;;
      pkgconf* | libpkgconf*)
        if pkg-config --version >/dev/null 2>&1; then continue; fi ;;
      libcurl4)
        if ls /usr/lib/$arch/libcurl.so.4* >/dev/null 2>&1; then continue; fi ;;
      zlib1g-dev)
        if [ -f /usr/include/zlib.h ]; then continue; fi ;;
      libbrotli*)
        if [ -f /usr/include/brotli/decode.h ]; then continue; fi ;;
      libcap2)
        if ls /usr/lib/$arch/libcap.so.2 /lib/$arch/libcap.so.2 >/dev/null 2>&1; then continue; fi ;;
      libselinux1)
        if ls /usr/lib/$arch/libselinux.so.1 /lib/$arch/libselinux.so.1 >/dev/null 2>&1; then continue; fi ;;
    esac
    say "this machine lacks what $pkg provides; using bookworm's"
  fi
  debs+=("$f")
done <"$manifest"

stamp_want=$(for f in "${debs[@]}"; do basename "$f"; done | sort | sha256sum | cut -c1-16)
stamp_file=$prefix/.vinci-deps-stamp
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_want" ]; then
  say "already unpacked (${#debs[@]} packages, stamp $stamp_want)"
else
  if [ -e "$prefix" ]; then
    if [ -f "$stamp_file" ] || [ -z "$(ls -A "$prefix")" ]; then
      rm -rf "$prefix"
    else
      die "$prefix exists and was not made by this script; remove it or set VINCI_GPU_PREFIX"
    fi
  fi
  mkdir -p "$prefix"
  for f in "${debs[@]}"; do dpkg -x "$f" "$prefix" || die "dpkg -x $f failed"; done
  say "unpacked ${#debs[@]} packages"

  # The Debian files name /usr; point them at $prefix/usr. Only the copies in $prefix change.
  # pkg-config files: prefix=, libdir=, includedir=, -I and -L.
  for pc in "$libdir"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] || continue
    sed -i -e "s#=/usr\\b#=$prefix/usr#g" -e "s#-I/usr/#-I$prefix/usr/#g" -e "s#-L/usr/#-L$prefix/usr/#g" \
      -e "s#^libdir=\\\${exec_prefix}/lib\$#libdir=\${exec_prefix}/lib/$arch#" "$pc"
  done
  # hiredis.pc names libdir=/usr/lib, but Debian installs the library under lib/$arch.
  if [ -f "$libdir/pkgconfig/hiredis.pc" ]; then
    sed -i -e "s#^libdir=$prefix/usr/lib\$#libdir=$prefix/usr/lib/$arch#" "$libdir/pkgconfig/hiredis.pc"
  fi
  # Cap'n Proto's config hard-codes the compiler and the schema include directory (the latter as
  # a plain variable, which a -D on the command line cannot override).
  capnp_cfg=$libdir/cmake/CapnProto/CapnProtoConfig.cmake
  [ -f "$capnp_cfg" ] || die "$capnp_cfg missing after unpacking"
  sed -i -e "s# /usr/bin/capnp# $prefix/usr/bin/capnp#g" \
    -e "s#set(CAPNP_INCLUDE_DIRECTORY /usr/include)#set(CAPNP_INCLUDE_DIRECTORY $prefix/usr/include)#" "$capnp_cfg"
  if grep -rn --include='*.pc' -e '=/usr\b' -e '-I/usr/' -e '-L/usr/' "$libdir/pkgconfig" "$prefix/usr/share/pkgconfig" 2>/dev/null; then
    die "some .pc files above still name /usr"
  fi
  grep -q "$prefix/usr/include" "$capnp_cfg" || die "could not rewrite $capnp_cfg"
  echo "$stamp_want" >"$stamp_file"
fi

# libcurl: the bookworm headers, this machine's libcurl.so.4 (ABI-stable). Without the runtime
# package unpacked, the -dev package's libcurl.so points nowhere and CMake would take the static
# archive, whose dependencies (libssh2, libpsl, ...) this machine may lack.
rm -f "$libdir/libcurl.a"
if [ ! -e "$libdir/libcurl.so" ]; then
  sys_curl=$(ls /usr/lib/$arch/libcurl.so.4 /lib/$arch/libcurl.so.4 2>/dev/null | head -n1 || true)
  [ -n "$sys_curl" ] || die "no libcurl.so.4 on this machine and none unpacked"
  ln -sf "$sys_curl" "$libdir/libcurl.so"
  say "libcurl: headers from bookworm, library $sys_curl"
fi

for f in "$prefix/usr/bin/capnp" "$prefix/usr/bin/capnpc-c++" "$prefix/usr/include/capnp/c++.capnp" \
  "$libdir/libcapnp-0.9.2.so" "$libdir/libxxhash.so" "$libdir/libzstd.so"; do
  [ -e "$f" ] || die "$f missing: the .debs in $deps_dir are incomplete"
done

# The loader path gets only the libraries this machine lacks (Cap'n Proto and KJ, xxHash, toml++,
# Boost.Program_options, benchmark, pkgconf's if unpacked): Ubuntu's own libzstd, libssl and the
# rest stay in use by the compiler and the system tools. Built programs find them through this path too (a RUNPATH does not
# cover libcapnp's own dependency on libkj).
ld_dir=$prefix/ld
rm -rf "$ld_dir"
mkdir -p "$ld_dir"
for so in "$libdir"/lib*.so*; do
  case "$(basename "$so")" in
    libzstd* | libssl* | libcrypto*) ;;
    *) ln -s "$so" "$ld_dir/" ;;
  esac
done
export LD_LIBRARY_PATH=$ld_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$libdir/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PATH=$PATH:$prefix/usr/bin
if ! pkg-config --version >/dev/null 2>&1; then
  [ -x "$prefix/usr/bin/pkgconf" ] || die "no working pkg-config here and none unpacked"
  export PKG_CONFIG=$prefix/usr/bin/pkgconf
fi
"$prefix/usr/bin/capnp" --version >/dev/null || die "the unpacked capnp does not run (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
say "capnp: $("$prefix/usr/bin/capnp" --version)"
# The Triton compile sandbox: this machine's bwrap if it has one, else the unpacked one (on PATH
# after the system's folders, here and in env.sh). `harness env` below says what a compile runs in.
if command -v bwrap >/dev/null; then
  say "bwrap: $(command -v bwrap) ($(bwrap --version))"
else
  say "bwrap: not found, not even in $prefix/usr/bin: Triton compiles will run without their sandbox"
fi
say "pkg-config: ${PKG_CONFIG:-$(command -v pkg-config)} $("${PKG_CONFIG:-pkg-config}" --version)"
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# For running the built programs later: source $build_dir/env.sh
cat >"$build_dir/env.sh" <<ENV
# Written by scripts/build_gpu.sh: the loader path vinci's programs need on this machine, and the
# unpacked programs (redis-server for the evaluation queue, bwrap for the Triton compile sandbox).
export LD_LIBRARY_PATH=$ld_dir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=\$PATH:$prefix/usr/bin
ENV
say "wrote $build_dir/env.sh (source it before running $build_dir/bin/* by hand)"

# ---------------------------------------------------------------------------------------------
step "configure $build_dir"
extra_args=()
if [ -x /usr/local/cuda/bin/nvcc ]; then
  extra_args+=(-DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# H200 is compute capability 9.0; naming it spares Torch's config from probing the GPU. Torch's
# config enables the CUDA language itself and then warns that it ignores CMAKE_CUDA_ARCHITECTURES
# (which enabling CUDA sets); vinci compiles no .cu files, so that warning is harmless.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
# CMake >= 3.30 warns that its FindBoost module is going away (CMP0167); the unpacked Boost has a
# BoostConfig.cmake, which NEW uses directly.
cmake_version=$(cmake --version | awk 'NR == 1 {print $3}')
if printf '%s\n3.30\n' "$cmake_version" | sort -V -C -r; then
  extra_args+=(-DCMAKE_POLICY_DEFAULT_CMP0167=NEW)
fi
configure=(cmake -S . -B "$build_dir" "${generator[@]}"
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_PREFIX_PATH=$prefix/usr;$torch_prefix"
  -DBoost_DIR="$libdir/cmake/Boost-1.74.0"
  -DCAPNP_EXECUTABLE="$prefix/usr/bin/capnp"
  -DCAPNPC_CXX_EXECUTABLE="$prefix/usr/bin/capnpc-c++"
  -DCAPNP_INCLUDE_DIRECTORY="$prefix/usr/include"
  "${extra_args[@]}"
  "$@")
if [ ! -f /usr/include/openssl/ssl.h ] && [ -f "$prefix/usr/include/openssl/ssl.h" ]; then
  configure+=(-DOPENSSL_ROOT_DIR="$prefix/usr")
fi
# A cache made without the unpacked packages (or with another prefix) keeps the paths it found;
# start it afresh then. The object files stay, so ninja rebuilds only what changed.
cache=$build_dir/CMakeCache.txt
if [ -f "$cache" ] && ! grep -q "^CapnProto_DIR:PATH=$prefix/" "$cache"; then
  say "$cache was not made by this script with $prefix; configuring afresh"
  rm -rf "$cache" "$build_dir/CMakeFiles"
fi
echo "+ ${configure[*]}"
"${configure[@]}" || die "cmake configure failed (see above; full log in $log)"

for var in CMAKE_CXX_COMPILER CMAKE_CUDA_COMPILER Torch_DIR Boost_DIR CapnProto_DIR GTest_DIR \
  pkgcfg_lib_XXHASH_xxhash pkgcfg_lib_ZSTD_zstd; do
  say "$(grep -m1 "^$var:" "$cache" || echo "$var: (not in cache)")"
done
grep -q "^CapnProto_DIR:PATH=$prefix/" "$cache" || die "cmake did not pick Cap'n Proto from $prefix"

# ---------------------------------------------------------------------------------------------
step "build"
build_ok=1
start=$(date +%s)
build_log=$build_dir/build_output.log
# -k 0: keep going, so one folder that does not compile still shows every error and the rest of
# vinci gets built and checked.
keep_going=(-k 0)
if ((${#generator[@]} == 0)); then keep_going=(-k); fi
cmake --build "$build_dir" --parallel "$(nproc)" -- "${keep_going[@]}" 2>&1 | tee "$build_log" ||
  build_ok=0
say "build took $(($(date +%s) - start)) s"
if ((!build_ok)); then
  say "BUILD FAILED; each failed step with its messages (from $build_log, at most 120 lines):"
  # A ninja step's output runs from its FAILED: line to the next [n/N] progress line; the long
  # command line after FAILED: is cut short.
  awk '/^FAILED:/ {on=1; print substr($0, 1, 200); getline; print substr($0, 1, 200); next}
       /^\[[0-9]+\/[0-9]+\]/ {on=0} on' "$build_log" | head -n 120
fi

# ---------------------------------------------------------------------------------------------
step "smoke checks"
declare -a results=()
check() { # check NAME CMD...: runs CMD, records pass/fail
  local name=$1
  shift
  echo "+ $*"
  if "$@"; then results+=("PASS  $name"); else results+=("FAIL  $name (exit $?)"); fi
}
bin=$build_dir/bin
if command -v nvidia-smi >/dev/null; then
  check "nvidia-smi" nvidia-smi --query-gpu=name,driver_version --format=csv
elif [ "${VINCI_GPU_NO_GPU:-0}" = 1 ]; then
  results+=("SKIP  nvidia-smi (VINCI_GPU_NO_GPU=1)")
else
  results+=("FAIL  nvidia-smi not found: this is not the GPU machine (VINCI_GPU_NO_GPU=1 allows that)")
fi
if [ -x "$bin/core_tests" ]; then
  check "core_tests" "$bin/core_tests" --gtest_brief=1
else
  results+=("FAIL  core_tests was not built")
fi
if [ -x "$bin/harness" ]; then check "harness env" "$bin/harness" env; else results+=("FAIL  harness was not built"); fi
if [ "${VINCI_GPU_CTEST:-1}" != 0 ]; then
  check "ctest -L unit" ctest --test-dir "$build_dir" -L unit --output-on-failure --parallel "$(nproc)" --timeout 300
fi

# ---------------------------------------------------------------------------------------------
step "summary"
if ((build_ok)); then echo "PASS  build ($build_dir)"; else echo "FAIL  build ($build_dir): see the errors above"; fi
printf '%s\n' "${results[@]}"
echo "full log: $log"
failed=$((!build_ok))
for r in "${results[@]}"; do
  if [[ $r == FAIL* ]]; then failed=1; fi
done
if ((failed)); then
  echo "build_gpu: FAILED" >&2
  exit 1
fi
echo "build_gpu: ok"
