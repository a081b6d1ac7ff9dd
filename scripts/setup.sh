#!/usr/bin/env bash
# Installs what vinci needs on a Debian bookworm machine, idempotently: only missing packages are
# installed, and a machine that has them all is left untouched (no apt-get update either).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3 python3-pip
  libtorch-dev libblas3 liblapack3
  libcapnp-dev capnproto
  libxxhash-dev
  libboost-program-options-dev
  libtomlplusplus-dev
  nlohmann-json3-dev
  libzstd-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libcurl4-openssl-dev libcpp-httplib-dev
  libhiredis-dev redis-server  # the evaluation queue (docs/distributed.md) and its tests
  python3-torch python3-numpy
  python3-dev pybind11-dev  # Python.h, pybind11: torch's load_inline builds of KernelBench modules (docs/kernelbench_format.md)
  clang-format  # scripts/format.sh: the C++ layout of .clang-format
  strace  # the kill tests: a SIGKILL injected at a chosen system call of a run (docs/testing.md)
  bubblewrap  # the Triton compile sandbox (docs/live_evaluator.md, "Compile sandbox")
  clang libclang-rt-dev  # the fuzz targets and sanitized tests (scripts/fuzz.sh): libFuzzer, ASan, UBSan
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && [ ! -e /usr/local/cuda/lib64/libnvrtc.so ]; then
  echo "setup: CUDA 13 is expected at /usr/local/cuda (NVRTC and the driver API)" >&2
  exit 1
fi

# Python: pycapnp and xxhash read runs independently of vinci's C++ reader
# (tests/recorder/read_run.py); vinci's Python package (python/, docs/python.md) also needs
# zstandard, pandas and pyarrow, and its tests tensorboardX, matplotlib, pytest, and tensorboard to
# read the event files back (tensorboard only: no TensorFlow). The tests import the package from
# python/, so only its dependencies are installed here; `pip install ./python` installs the
# package itself.
python_deps=(pycapnp xxhash zstandard pandas pyarrow tensorboardX matplotlib pytest tensorboard)
if ! python3 -c 'import capnp, xxhash, zstandard, pandas, pyarrow, tensorboardX, matplotlib, pytest, tensorboard' 2>/dev/null; then
  echo "setup: installing ${python_deps[*]} for Python"
  python3 -m pip install -q "${python_deps[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${python_deps[@]}"
fi
# Triton compiles plans whose kernels are Triton (gpu/compile/triton.h, gpu/compile/triton_compile.py) to sm_90
# cubins; no GPU is needed for that, and gpu_triton_test compiles a few. About 40 s and 1 GB
# installed; without it those tests skip, saying so.
if ! python3 -c 'import triton' 2>/dev/null; then
  echo "setup: installing triton for Python"
  python3 -m pip install -q triton 2>/dev/null ||
    python3 -m pip install -q --break-system-packages triton ||
    echo "setup: triton did not install; the Triton compile tests will skip" >&2
fi
echo "setup: ok"
