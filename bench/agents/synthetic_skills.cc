#include "bench/agents/synthetic_skills.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "core/rng.h"

namespace vinci {
namespace {

// Kernel-optimization words, most frequent first (rank order sets the Zipf weight 1/r).
constexpr std::string_view kKernelWords[] = {
    "kernel",      "memory",      "thread",    "block",        "shared",        "warp",        "load",
    "global",      "reduction",   "tile",      "tiling",       "fusion",        "bandwidth",   "float4",
    "vectorized",  "coalesced",   "softmax",   "gemm",         "register",      "occupancy",   "latency",
    "tensor",      "cores",       "bank",      "conflicts",    "shuffle",       "elementwise", "store",
    "launch",      "grid",        "matmul",    "accumulate",   "online",        "epilogue",    "fused",
    "pass",        "rows",        "columns",   "stride",       "unroll",        "loop",        "sync",
    "barrier",     "atomic",      "layernorm", "rmsnorm",      "normalization", "mean",        "variance",
    "welford",     "exp",         "max",       "sum",          "relu",          "gelu",        "sigmoid",
    "bias",        "scale",       "residual",  "attention",    "causal",        "mask",        "conv",
    "convolution", "im2col",      "implicit",  "pooling",      "transpose",     "half",        "bf16",
    "fp16",        "fp32",        "precision", "wmma",         "mma",           "fragment",    "pipeline",
    "double",      "buffer",      "async",     "cp",           "prefetch",      "l2",          "cache",
    "l1",          "texture",     "constant",  "divergence",   "predication",   "persistent",  "split",
    "k",           "swizzle",     "padding",   "alignment",    "aligned",       "bytes",       "throughput",
    "roofline",    "compute",     "bound",     "arithmetic",   "intensity",     "flops",       "instruction",
    "issue",       "pressure",    "spill",     "bounds",       "blockdim",      "griddim",     "threadidx",
    "blockidx",    "lane",        "mask",      "ballot",       "cooperative",   "groups",      "cluster",
    "hopper",      "tma",         "wgmma",     "descriptor",   "multicast",     "dsmem",       "stage",
    "producer",    "consumer",    "mbarrier",  "quantization", "int8",          "dequantize",  "gather",
    "scatter",     "index",       "embedding", "cumsum",       "scan",          "prefix",      "argmax",
    "topk",        "sort",        "histogram", "dropout",      "philox",        "random",      "batched",
    "strided",     "broadcast",   "reshape",   "contiguous",   "layout",        "nchw",        "nhwc",
    "channels",    "last",        "depthwise", "pointwise",    "winograd",      "fft",         "triton",
    "cuda",        "ptx",         "sass",      "nvcc",         "nvrtc",         "occupancy",   "calculator",
    "regcount",    "maxrregcount"};

constexpr std::string_view kFunctionWords[] = {
    "the",     "a",    "to",   "of",   "and",     "in",      "for",    "each",  "is",   "with",   "by",   "on",
    "per",     "this", "that", "so",   "when",    "instead", "one",    "all",   "into", "from",   "it",   "at",
    "as",      "are",  "be",   "only", "then",    "than",    "avoid",  "use",   "keep", "reduce", "read", "write",
    "compute", "over", "once", "two",  "without", "which",   "before", "after", "can",  "not",    "more", "fewer"};

constexpr std::string_view kTailPrefixes[] = {"tile",  "blk", "smem", "buf", "acc",  "frag",
                                              "stage", "vec", "row",  "col", "lane", "reg"};

constexpr std::string_view kScopes[] = {"general",
                                        "task_specific/softmax",
                                        "task_specific/gemm",
                                        "task_specific/conv",
                                        "task_specific/normalization",
                                        "task_specific/elementwise",
                                        "task_specific/attention",
                                        "task_specific/reduction"};

// Cumulative Zipf weights 1/r over n ranks.
template <size_t N>
std::vector<double> zipf_cdf(const std::string_view (&)[N]) {
  std::vector<double> cdf(N);
  double sum = 0;
  for (size_t r = 0; r < N; ++r) cdf[r] = (sum += 1.0 / static_cast<double>(r + 1));
  return cdf;
}

template <size_t N>
std::string_view zipf_pick(const std::string_view (&words)[N], const std::vector<double>& cdf, Stream& s) {
  double u = s.uniform() * cdf.back();
  size_t r = static_cast<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  return words[std::min(r, N - 1)];
}

// An identifier from the long tail: index j with P(j) ~ 1/j on [1, 2^22) (log-uniform), so new
// identifiers keep appearing as the library grows.
std::string tail_token(Stream& s) {
  uint64_t j = static_cast<uint64_t>(std::exp(s.uniform() * std::log(4194304.0)));
  return std::string(kTailPrefixes[j % std::size(kTailPrefixes)]) + std::to_string(j);
}

class Writer {
 public:
  explicit Writer(Stream& s) : s_(s), kernel_cdf_(zipf_cdf(kKernelWords)), function_cdf_(zipf_cdf(kFunctionWords)) {}

  std::string kernel_word() { return std::string(zipf_pick(kKernelWords, kernel_cdf_, s_)); }

  std::string word() {
    double u = s_.uniform();
    if (u < 0.42) return std::string(zipf_pick(kFunctionWords, function_cdf_, s_));
    if (u < 0.95) return kernel_word();
    return tail_token(s_);
  }

  std::string sentence(size_t min_words, size_t max_words) {
    size_t n = min_words + s_.below(max_words - min_words + 1);
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      std::string w = word();
      if (i == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
      if (i) out += (s_.below(12) == 0) ? ", " : " ";
      out += w;
    }
    return out + ".";
  }

  std::string code_line() {
    std::string a = tail_token(s_), b = tail_token(s_);
    switch (s_.below(8)) {
      case 0: return "float4 " + a + " = reinterpret_cast<const float4*>(" + b + ")[i];";
      case 1: return "__shared__ float " + a + "[32][33];";
      case 2: return "for (int k = 0; k < K; k += " + std::to_string(16 << s_.below(4)) + ") {";
      case 3: return a + " += __shfl_down_sync(0xffffffff, " + a + ", offset);";
      case 4: return "float m = fmaxf(" + a + ", " + b + "); s = s * __expf(" + a + " - m);";
      case 5: return "__syncthreads();";
      case 6: return "int i = blockIdx.x * blockDim.x + threadIdx.x;";
      default: return "out[i] = fmaxf(" + a + " + bias[col], 0.f);  // " + kernel_word();
    }
  }

 private:
  Stream& s_;
  std::vector<double> kernel_cdf_, function_cdf_;
};

}  // namespace

Skill synthetic_skill(uint64_t seed, uint64_t i) {
  Stream s(RngKey::root(seed).with("purpose", "synthetic_skill").with("skill", static_cast<int64_t>(i)));
  Writer w(s);
  Skill skill;
  size_t name_words = 2 + s.below(3);
  for (size_t k = 0; k < name_words; ++k) {
    if (k) skill.name += '_';
    skill.name += w.kernel_word();
  }
  skill.description = w.sentence(8, 20);
  skill.scope = std::string(kScopes[s.below(std::size(kScopes))]);
  // 3-6 distinct tags; a repeated draw is dropped, so a few skills get fewer than drawn (>= 1).
  size_t tags = 3 + s.below(4);
  for (size_t k = 0; k < tags; ++k) {
    std::string t = w.kernel_word();
    if (std::find(skill.tags.begin(), skill.tags.end(), t) == skill.tags.end()) {
      skill.tags.push_back(std::move(t));
    }
  }
  std::string c = "## Motivation\n" + w.sentence(20, 45) + " " + w.sentence(10, 30) + "\n\n## Key Idea\n" +
                  w.sentence(25, 60) + " " + w.sentence(15, 40) + "\n\n## Example\n```cuda\n";
  size_t lines = 6 + s.below(12);
  for (size_t k = 0; k < lines; ++k) c += w.code_line() + "\n";
  c += "```\n";
  skill.content = std::move(c);
  skill.verify_speedup = 1.2 + s.uniform() * 2.0;
  return skill;
}

std::string synthetic_task_prompt(uint64_t i) {
  static const char* const kModels[] = {
      "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
      "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n\n"
      "batch_size = 128\ndim = 16384\n",
      "class Model(nn.Module):\n    def __init__(self, in_features, out_features):\n"
      "        super().__init__()\n        self.linear = nn.Linear(in_features, out_features)\n\n"
      "    def forward(self, x):\n        return torch.relu(self.linear(x))\n\n"
      "batch_size = 128\nin_features = 4096\nout_features = 4096\n",
      "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
      "        self.conv = nn.Conv2d(64, 128, kernel_size=3, padding=1)\n\n"
      "    def forward(self, x):\n        return self.conv(x)\n\nbatch_size = 16\n",
      "class Model(nn.Module):\n    def __init__(self, normalized_shape):\n"
      "        super().__init__()\n        self.ln = nn.LayerNorm(normalized_shape)\n\n"
      "    def forward(self, x):\n        return self.ln(x)\n\nbatch_size = 16\nfeatures = 64\n",
      "class Model(nn.Module):\n    def forward(self, q, k, v):\n"
      "        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))\n"
      "        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))\n"
      "        return F.softmax(att, dim=-1) @ v\n\nbatch_size = 128\nseq_len = 512\n",
      "class Model(nn.Module):\n    def forward(self, x):\n        return torch.sum(x, dim=1)\n\n"
      "batch_size = 16\ndim1 = 256\ndim2 = 256\n",
      "class Model(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n\n"
      "M = 1024\nK = 4096\nN = 2048\n",
      "class Model(nn.Module):\n    def forward(self, x):\n"
      "        return torch.nn.functional.gelu(x) * torch.sigmoid(x)\n\nbatch_size = 16\n"
      "dim = 16384\n"};
  std::string prompt =
      "You are given the following PyTorch reference architecture. Replace the operators with "
      "custom CUDA kernels to get a speedup. You may fuse operators, use shared memory, tensor "
      "cores or any other optimization, but the output must stay correct. Name the optimized "
      "architecture ModelNew and output the complete code.\n\n```python\nimport torch\n"
      "import torch.nn as nn\nimport torch.nn.functional as F\n\n";
  prompt += kModels[i % std::size(kModels)];
  prompt += "\ndef get_inputs():\n    return [torch.randn(batch_size, dim)]\n```\n";
  return prompt;
}

}  // namespace vinci
