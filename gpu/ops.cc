#include "gpu/ops.h"

#include <unordered_map>

namespace vinci {
namespace {

const OpInfo kOps[] = {
    // elementwise, one input
    {OpCode::kRelu, "relu", OpKind::kUnary, 1, ""},
    {OpCode::kLeakyRelu, "leaky_relu", OpKind::kUnary, 1, ""},  // negative_slope = 0.01
    {OpCode::kSigmoid, "sigmoid", OpKind::kUnary, 1, ""},
    {OpCode::kTanh, "tanh", OpKind::kUnary, 1, ""},
    {OpCode::kGelu, "gelu", OpKind::kUnary, 1, ""},  // exact (erf) form, PyTorch's default
    {OpCode::kSilu, "silu", OpKind::kUnary, 1, ""},
    {OpCode::kElu, "elu", OpKind::kUnary, 1, ""},  // alpha = 1
    {OpCode::kSelu, "selu", OpKind::kUnary, 1, ""},
    {OpCode::kSoftplus, "softplus", OpKind::kUnary, 1, ""},  // beta 1, threshold 20 as PyTorch
    {OpCode::kSoftsign, "softsign", OpKind::kUnary, 1, ""},
    {OpCode::kHardsigmoid, "hardsigmoid", OpKind::kUnary, 1, ""},
    {OpCode::kHardswish, "hardswish", OpKind::kUnary, 1, ""},
    {OpCode::kHardtanh, "hardtanh", OpKind::kUnary, 1, ""},  // min = -1, max = 1
    {OpCode::kMish, "mish", OpKind::kUnary, 1, ""},
    {OpCode::kExp, "exp", OpKind::kUnary, 1, ""},
    {OpCode::kLog, "log", OpKind::kUnary, 1, ""},
    {OpCode::kAbs, "abs", OpKind::kUnary, 1, ""},
    {OpCode::kSquare, "square", OpKind::kUnary, 1, ""},
    {OpCode::kSqrt, "sqrt", OpKind::kUnary, 1, ""},
    {OpCode::kClamp, "clamp", OpKind::kUnary, 1, ""},           // min, max
    {OpCode::kMulScalar, "mul_scalar", OpKind::kUnary, 1, ""},  // value
    {OpCode::kAddScalar, "add_scalar", OpKind::kUnary, 1, ""},  // value
    {OpCode::kDivScalar, "div_scalar", OpKind::kUnary, 1, ""},  // value
    // elementwise, two inputs
    {OpCode::kAdd, "add", OpKind::kBinary, 2, ""},
    {OpCode::kSub, "sub", OpKind::kBinary, 2, ""},
    {OpCode::kMul, "mul", OpKind::kBinary, 2, ""},
    {OpCode::kDiv, "div", OpKind::kBinary, 2, ""},
    // matrix products
    {OpCode::kMatmul, "matmul", OpKind::kGemm, 2, ""},  // transpose_a, transpose_b; batched when rank 3
    {OpCode::kLinear, "linear", OpKind::kGemm, 1, "linear"},
    // reductions of one dim
    {OpCode::kSum, "sum", OpKind::kReduce, 1, ""},
    {OpCode::kMean, "mean", OpKind::kReduce, 1, ""},
    {OpCode::kAmax, "amax", OpKind::kReduce, 1, ""},
    {OpCode::kAmin, "amin", OpKind::kReduce, 1, ""},
    {OpCode::kLogsumexp, "logsumexp", OpKind::kReduce, 1, ""},
    {OpCode::kNormL2, "norm_l2", OpKind::kReduce, 1, ""},
    // normalisations along one dim (or the trailing dims for layer_norm)
    {OpCode::kSoftmax, "softmax", OpKind::kRowNorm, 1, ""},
    {OpCode::kLogSoftmax, "log_softmax", OpKind::kRowNorm, 1, ""},
    {OpCode::kRmsNorm, "rms_norm", OpKind::kRowNorm, 1, ""},  // dim, eps
    {OpCode::kLayerNorm, "layer_norm", OpKind::kRowNorm, 1, "layer_norm"},
    // library only
    {OpCode::kBatchNorm, "batch_norm", OpKind::kLibrary, 1, "batch_norm"},
    {OpCode::kGroupNorm, "group_norm", OpKind::kLibrary, 1, "group_norm"},
    {OpCode::kConv1d, "conv1d", OpKind::kLibrary, 1, "conv1d"},
    {OpCode::kConv2d, "conv2d", OpKind::kLibrary, 1, "conv2d"},
    {OpCode::kConv3d, "conv3d", OpKind::kLibrary, 1, "conv3d"},
    {OpCode::kConvTranspose1d, "conv_transpose1d", OpKind::kLibrary, 1, "conv_transpose1d"},
    {OpCode::kConvTranspose2d, "conv_transpose2d", OpKind::kLibrary, 1, "conv_transpose2d"},
    {OpCode::kConvTranspose3d, "conv_transpose3d", OpKind::kLibrary, 1, "conv_transpose3d"},
    {OpCode::kMaxPool1d, "max_pool1d", OpKind::kLibrary, 1, ""},
    {OpCode::kMaxPool2d, "max_pool2d", OpKind::kLibrary, 1, ""},
    {OpCode::kMaxPool3d, "max_pool3d", OpKind::kLibrary, 1, ""},
    {OpCode::kAvgPool2d, "avg_pool2d", OpKind::kLibrary, 1, ""},
    {OpCode::kAdaptiveAvgPool2d, "adaptive_avg_pool2d", OpKind::kLibrary, 1, ""},
    {OpCode::kCumsum, "cumsum", OpKind::kLibrary, 1, ""},
    {OpCode::kCumprod, "cumprod", OpKind::kLibrary, 1, ""},
    {OpCode::kReshape, "reshape", OpKind::kLibrary, 1, ""},
    {OpCode::kFlatten, "flatten", OpKind::kLibrary, 1, ""},
    {OpCode::kPermute, "permute", OpKind::kLibrary, 1, ""},
    {OpCode::kTranspose, "transpose", OpKind::kLibrary, 1, ""},
    {OpCode::kSplit, "split", OpKind::kLibrary, 1, ""},
    {OpCode::kCausalMask, "causal_mask", OpKind::kLibrary, 1, ""},
    {OpCode::kSelfAttention, "self_attention", OpKind::kLibrary, 1, "mha"},
    {OpCode::kMseLoss, "mse_loss", OpKind::kLibrary, 2, ""},
    {OpCode::kCrossEntropy, "cross_entropy", OpKind::kLibrary, 2, ""},
    {OpCode::kSmoothL1Loss, "smooth_l1_loss", OpKind::kLibrary, 2, ""},
    {OpCode::kKlDiv, "kl_div", OpKind::kLibrary, 2, ""},
    {OpCode::kHingeLoss, "hinge_loss", OpKind::kLibrary, 2, ""},
    {OpCode::kCosineSimilarityLoss, "cosine_similarity_loss", OpKind::kLibrary, 2, ""},
    // library only: pooling and normalisation of KernelBench level 2 (63-100)
    {OpCode::kAvgPool1d, "avg_pool1d", OpKind::kLibrary, 1, ""},                   // kernel, stride = kernel, padding 0
    {OpCode::kAvgPool3d, "avg_pool3d", OpKind::kLibrary, 1, ""},                   // kernel, stride = kernel, padding 0
    {OpCode::kAdaptiveAvgPool3d, "adaptive_avg_pool3d", OpKind::kLibrary, 1, ""},  // output
    {OpCode::kInstanceNorm, "instance_norm", OpKind::kLibrary, 1,
     ""},  // eps; nn.InstanceNorm*d's default: no weights, batch statistics
    // level-3 networks
    {OpCode::kConcat, "concat", OpKind::kLibrary, -1, ""},  // dim; any number of inputs (torch.cat)
    // sequence models and slicing (KernelBench level 3: RNNs, NetVLAD, Mamba-2)
    {OpCode::kSlice, "slice", OpKind::kLibrary, 1, ""},     // dim, start = 0, end = size (negative: from the end)
    {OpCode::kSelect, "select", OpKind::kLibrary, 1, ""},   // dim, index (negative: from the end); drops dim
    {OpCode::kEinsum, "einsum", OpKind::kLibrary, -1, ""},  // equation; one or more inputs, contracted left to right
    {OpCode::kLstm, "lstm", OpKind::kLibrary, 3, "lstm"},   // x, h0, c0 -> out, h_n, c_n (nn.LSTM)
    {OpCode::kGru, "gru", OpKind::kLibrary, 2, "gru"},      // x, h0 -> out, h_n (nn.GRU)
    {OpCode::kElmanRnn, "elman_rnn", OpKind::kLibrary, 2, "linear"},  // x [T, B, In], h0 [B, H] -> every h_t [T, B, H]
    {OpCode::kExpand, "expand", OpKind::kLibrary, 1, ""},  // shape: x.expand(...), a broadcast view (size-1 dims grow)
    // Ops that KernelBench level 1's problems need (docs/tasks.md)
    {OpCode::kTriu, "triu", OpKind::kLibrary, 1, ""},  // diagonal = 0: zero below the diagonal of the last two dims
    {OpCode::kTril, "tril", OpKind::kLibrary, 1, ""},  // diagonal = 0
    {OpCode::kFrobeniusNorm, "frobenius_norm", OpKind::kLibrary, 1,
     ""},                                                  // torch.norm(x, p='fro') over every element: a scalar
    {OpCode::kArgmax, "argmax", OpKind::kLibrary, 1, ""},  // dim, keepdim; int64 output
    {OpCode::kArgmin, "argmin", OpKind::kLibrary, 1, ""},
    {OpCode::kCumsumReverse, "cumsum_reverse", OpKind::kLibrary, 1, ""},  // dim: x.flip(dim).cumsum(dim).flip(dim)
    {OpCode::kCumsumExclusive, "cumsum_exclusive", OpKind::kLibrary, 1,
     ""},  // dim: 0, x0, x0 + x1, ... (KernelBench's narrow + cat)
    {OpCode::kScaledDotProductAttention, "scaled_dot_product_attention", OpKind::kLibrary, 3,
     ""},  // softmax(Q K^T / sqrt(E)) V, no mask
    {OpCode::kTripletMarginLoss, "triplet_margin_loss", OpKind::kLibrary, 3, ""},  // margin; p = 2, eps 1e-6, mean
    // KernelBench level 3 (Swin MLP)
    {OpCode::kPad, "pad", OpKind::kLibrary, 1,
     ""},  // pad: F.pad(x, pad) with zeros; (left, right) pairs from the last dim back
    // KernelBench level 3 (Swin Transformer V2)
    {OpCode::kRoll, "roll", OpKind::kLibrary, 1, ""},            // shifts, dims: torch.roll
    {OpCode::kNormalize, "normalize", OpKind::kLibrary, 1, ""},  // dim = -1, eps = 1e-12: F.normalize(x, p=2)
    {OpCode::kRelativePositionBias, "relative_position_bias", OpKind::kLibrary, 1,
     ""},  // window: table [(2W-1)^2, H] -> [H, W*W, W*W]
};

}  // namespace

static_assert(sizeof(kOps) / sizeof(kOps[0]) == kOpCount, "gpu/ops.h's OpCode lists every op of the table");

const OpInfo* find_op(const std::string& name) {
  // Priced many times a prediction: an index of the table, built once (the first op of a name).
  static const std::unordered_map<std::string, const OpInfo*> kIndex = [] {
    std::unordered_map<std::string, const OpInfo*> m;
    for (const auto& op : kOps) m.emplace(op.name, &op);
    return m;
  }();
  auto it = kIndex.find(name);
  return it == kIndex.end() ? nullptr : it->second;
}

OpCode op_code(const std::string& name) {
  const OpInfo* info = find_op(name);
  return info == nullptr ? OpCode::kUnknown : info->code;
}

const char* op_name(OpCode code) { return code == OpCode::kUnknown ? "?" : kOps[static_cast<size_t>(code)].name; }

bool op_is_conv(OpCode code) {
  switch (code) {
    case OpCode::kConv1d:
    case OpCode::kConv2d:
    case OpCode::kConv3d: return true;
    default: return op_is_transposed_conv(code);
  }
}

bool op_is_transposed_conv(OpCode code) {
  return code == OpCode::kConvTranspose1d || code == OpCode::kConvTranspose2d || code == OpCode::kConvTranspose3d;
}

bool op_is_pool(OpCode code) {
  switch (code) {
    case OpCode::kMaxPool1d:
    case OpCode::kMaxPool2d:
    case OpCode::kMaxPool3d:
    case OpCode::kAvgPool1d:
    case OpCode::kAvgPool2d:
    case OpCode::kAvgPool3d:
    case OpCode::kAdaptiveAvgPool2d:
    case OpCode::kAdaptiveAvgPool3d: return true;
    default: return false;
  }
}

int op_spatial_rank(OpCode code) {
  switch (code) {
    case OpCode::kConv1d:
    case OpCode::kConvTranspose1d:
    case OpCode::kMaxPool1d:
    case OpCode::kAvgPool1d: return 1;
    case OpCode::kConv2d:
    case OpCode::kConvTranspose2d:
    case OpCode::kMaxPool2d:
    case OpCode::kAvgPool2d: return 2;
    case OpCode::kConv3d:
    case OpCode::kConvTranspose3d:
    case OpCode::kMaxPool3d:
    case OpCode::kAvgPool3d: return 3;
    default: return 0;
  }
}

bool op_outputs_indices(const std::string& name) { return name == "argmax" || name == "argmin"; }

std::string known_op_names() {
  std::string s;
  for (const auto& op : kOps) {
    if (!s.empty()) s += ", ";
    s += op.name;
  }
  return s;
}

}  // namespace vinci
