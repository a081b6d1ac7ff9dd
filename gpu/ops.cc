#include "gpu/ops.h"

#include <unordered_map>

namespace vinci {
namespace {

const OpInfo kOps[] = {
    // elementwise, one input
    {"relu", OpKind::kUnary, 1, ""},
    {"leaky_relu", OpKind::kUnary, 1, ""},  // negative_slope = 0.01
    {"sigmoid", OpKind::kUnary, 1, ""},
    {"tanh", OpKind::kUnary, 1, ""},
    {"gelu", OpKind::kUnary, 1, ""},  // exact (erf) form, PyTorch's default
    {"silu", OpKind::kUnary, 1, ""},
    {"elu", OpKind::kUnary, 1, ""},  // alpha = 1
    {"selu", OpKind::kUnary, 1, ""},
    {"softplus", OpKind::kUnary, 1, ""},  // beta 1, threshold 20 as PyTorch
    {"softsign", OpKind::kUnary, 1, ""},
    {"hardsigmoid", OpKind::kUnary, 1, ""},
    {"hardswish", OpKind::kUnary, 1, ""},
    {"hardtanh", OpKind::kUnary, 1, ""},  // min = -1, max = 1
    {"mish", OpKind::kUnary, 1, ""},
    {"exp", OpKind::kUnary, 1, ""},
    {"log", OpKind::kUnary, 1, ""},
    {"abs", OpKind::kUnary, 1, ""},
    {"square", OpKind::kUnary, 1, ""},
    {"sqrt", OpKind::kUnary, 1, ""},
    {"clamp", OpKind::kUnary, 1, ""},       // min, max
    {"mul_scalar", OpKind::kUnary, 1, ""},  // value
    {"add_scalar", OpKind::kUnary, 1, ""},  // value
    {"div_scalar", OpKind::kUnary, 1, ""},  // value
    // elementwise, two inputs
    {"add", OpKind::kBinary, 2, ""},
    {"sub", OpKind::kBinary, 2, ""},
    {"mul", OpKind::kBinary, 2, ""},
    {"div", OpKind::kBinary, 2, ""},
    // matrix products
    {"matmul", OpKind::kGemm, 2, ""},  // transpose_a, transpose_b; batched when rank 3
    {"linear", OpKind::kGemm, 1, "linear"},
    // reductions of one dim
    {"sum", OpKind::kReduce, 1, ""},
    {"mean", OpKind::kReduce, 1, ""},
    {"amax", OpKind::kReduce, 1, ""},
    {"amin", OpKind::kReduce, 1, ""},
    {"logsumexp", OpKind::kReduce, 1, ""},
    {"norm_l2", OpKind::kReduce, 1, ""},
    // normalisations along one dim (or the trailing dims for layer_norm)
    {"softmax", OpKind::kRowNorm, 1, ""},
    {"log_softmax", OpKind::kRowNorm, 1, ""},
    {"rms_norm", OpKind::kRowNorm, 1, ""},  // dim, eps
    {"layer_norm", OpKind::kRowNorm, 1, "layer_norm"},
    // library only
    {"batch_norm", OpKind::kLibrary, 1, "batch_norm"},
    {"group_norm", OpKind::kLibrary, 1, "group_norm"},
    {"conv1d", OpKind::kLibrary, 1, "conv1d"},
    {"conv2d", OpKind::kLibrary, 1, "conv2d"},
    {"conv3d", OpKind::kLibrary, 1, "conv3d"},
    {"conv_transpose1d", OpKind::kLibrary, 1, "conv_transpose1d"},
    {"conv_transpose2d", OpKind::kLibrary, 1, "conv_transpose2d"},
    {"conv_transpose3d", OpKind::kLibrary, 1, "conv_transpose3d"},
    {"max_pool1d", OpKind::kLibrary, 1, ""},
    {"max_pool2d", OpKind::kLibrary, 1, ""},
    {"max_pool3d", OpKind::kLibrary, 1, ""},
    {"avg_pool2d", OpKind::kLibrary, 1, ""},
    {"adaptive_avg_pool2d", OpKind::kLibrary, 1, ""},
    {"cumsum", OpKind::kLibrary, 1, ""},
    {"cumprod", OpKind::kLibrary, 1, ""},
    {"reshape", OpKind::kLibrary, 1, ""},
    {"flatten", OpKind::kLibrary, 1, ""},
    {"permute", OpKind::kLibrary, 1, ""},
    {"transpose", OpKind::kLibrary, 1, ""},
    {"split", OpKind::kLibrary, 1, ""},
    {"causal_mask", OpKind::kLibrary, 1, ""},
    {"self_attention", OpKind::kLibrary, 1, "mha"},
    {"mse_loss", OpKind::kLibrary, 2, ""},
    {"cross_entropy", OpKind::kLibrary, 2, ""},
    {"smooth_l1_loss", OpKind::kLibrary, 2, ""},
    {"kl_div", OpKind::kLibrary, 2, ""},
    {"hinge_loss", OpKind::kLibrary, 2, ""},
    {"cosine_similarity_loss", OpKind::kLibrary, 2, ""},
    // library only: pooling and normalisation of KernelBench level 2 (63-100)
    {"avg_pool1d", OpKind::kLibrary, 1, ""},           // kernel, stride = kernel, padding 0
    {"avg_pool3d", OpKind::kLibrary, 1, ""},           // kernel, stride = kernel, padding 0
    {"adaptive_avg_pool3d", OpKind::kLibrary, 1, ""},  // output
    {"instance_norm", OpKind::kLibrary, 1, ""},        // eps; nn.InstanceNorm*d's default: no weights, batch statistics
    // level-3 networks
    {"concat", OpKind::kLibrary, -1, ""},  // dim; any number of inputs (torch.cat)
    // sequence models and slicing (KernelBench level 3: RNNs, NetVLAD, Mamba-2)
    {"slice", OpKind::kLibrary, 1, ""},            // dim, start = 0, end = size (negative: from the end)
    {"select", OpKind::kLibrary, 1, ""},           // dim, index (negative: from the end); drops dim
    {"einsum", OpKind::kLibrary, -1, ""},          // equation; one or more inputs, contracted left to right
    {"lstm", OpKind::kLibrary, 3, "lstm"},         // x, h0, c0 -> out, h_n, c_n (nn.LSTM)
    {"gru", OpKind::kLibrary, 2, "gru"},           // x, h0 -> out, h_n (nn.GRU)
    {"elman_rnn", OpKind::kLibrary, 2, "linear"},  // x [T, B, In], h0 [B, H] -> every h_t [T, B, H]
    {"expand", OpKind::kLibrary, 1, ""},           // shape: x.expand(...), a broadcast view (size-1 dims grow)
    // Ops that KernelBench level 1's problems need (docs/tasks.md)
    {"triu", OpKind::kLibrary, 1, ""},            // diagonal = 0: zero below the diagonal of the last two dims
    {"tril", OpKind::kLibrary, 1, ""},            // diagonal = 0
    {"frobenius_norm", OpKind::kLibrary, 1, ""},  // torch.norm(x, p='fro') over every element: a scalar
    {"argmax", OpKind::kLibrary, 1, ""},          // dim, keepdim; int64 output
    {"argmin", OpKind::kLibrary, 1, ""},
    {"cumsum_reverse", OpKind::kLibrary, 1, ""},                // dim: x.flip(dim).cumsum(dim).flip(dim)
    {"cumsum_exclusive", OpKind::kLibrary, 1, ""},              // dim: 0, x0, x0 + x1, ... (KernelBench's narrow + cat)
    {"scaled_dot_product_attention", OpKind::kLibrary, 3, ""},  // softmax(Q K^T / sqrt(E)) V, no mask
    {"triplet_margin_loss", OpKind::kLibrary, 3, ""},           // margin; p = 2, eps 1e-6, mean
    // KernelBench level 3 (Swin MLP)
    {"pad", OpKind::kLibrary, 1, ""},  // pad: F.pad(x, pad) with zeros; (left, right) pairs from the last dim back
    // KernelBench level 3 (Swin Transformer V2)
    {"roll", OpKind::kLibrary, 1, ""},                    // shifts, dims: torch.roll
    {"normalize", OpKind::kLibrary, 1, ""},               // dim = -1, eps = 1e-12: F.normalize(x, p=2)
    {"relative_position_bias", OpKind::kLibrary, 1, ""},  // window: table [(2W-1)^2, H] -> [H, W*W, W*W]
};

}  // namespace

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
