#include "lm/model.h"

#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/bytes.h"
#include "lm/tokenizer.h"

namespace vinci {
namespace lm {
namespace {

// torch.optim.Adam's defaults, as the sim backbone uses them.
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.999;
constexpr double kAdamEps = 1e-8;
// Added to the gradient norm before dividing, as torch.nn.utils.clip_grad_norm_ does.
constexpr double kClipEps = 1e-6;
constexpr double kLayerNormEps = 1e-5;
// Standard deviation of the initial weights and embeddings; the residual projections get
// kInitStd / sqrt(2 * layers) so the residual stream's variance does not grow with depth.
constexpr double kInitStd = 0.02;
constexpr char kMagic[] = "vinci-lm-state/1";

// OpenMP keeps the thread count per calling thread (the server's workers differ), so pin it on
// every entry.
void pin_threads() {
  if (at::get_num_threads() != 1) at::set_num_threads(1);
}

// Runs a libtorch call on one thread; an exception becomes an internal error naming `what`.
template <class F>
Status torch_call(const char* what, F&& body) {
  try {
    pin_threads();
    body();
    return Status();
  } catch (const std::exception& e) {
    return internal_error(std::string("language model ") + what + ": " + e.what());
  }
}

torch::Tensor ids_tensor(const std::vector<int32_t>& ids, size_t begin, size_t end, const torch::Device& device) {
  std::vector<int64_t> v(ids.begin() + static_cast<ptrdiff_t>(begin), ids.begin() + static_cast<ptrdiff_t>(end));
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kInt64).to(device, false, true);
}

template <class T>
torch::Tensor host_tensor(std::vector<T>& v, torch::Dtype dtype, const torch::Device& device) {
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, dtype).to(device, false, true);
}

// Whether this libtorch carries its CUDA library (the CPU-only build's hooks throw here).
bool libtorch_has_cuda() {
  try {
    (void)at::detail::getCUDAHooks().versionCUDART();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

Result<std::string> prepare_device(const std::string& spec) {
  if (spec == "cpu") return std::string("cpu");
  int64_t index = -1;
  if (spec == "cuda") {
    index = 0;
  } else if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5 && spec.size() <= 8 &&
             spec.find_first_not_of("0123456789", 5) == std::string::npos) {
    index = std::stoll(spec.substr(5));
  } else {
    return invalid_argument("--device: expected cpu, cuda or cuda:N, found '" + spec + "'");
  }
  if (!libtorch_has_cuda()) {
    return failed_precondition("--device " + spec +
                               ": this vinci's libtorch has no CUDA (it was built for the CPU only); build vinci "
                               "against a libtorch with CUDA (docs/lm.md, \"Devices\"), or use --device cpu");
  }
  // cuBLAS is deterministic only with a fixed workspace configuration, read when its handle is
  // made: set it before the first CUDA call unless the environment chose one.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    return failed_precondition("--device " + spec + ": this vinci's libtorch has CUDA but sees no GPU");
  }
  if (index >= count) {
    return failed_precondition("--device " + spec + ": this machine has " + std::to_string(count) + " GPU" +
                               (count == 1 ? "" : "s") + " (cuda:0..cuda:" + std::to_string(count - 1) + ")");
  }
  // Deterministic kernels where libtorch has them (warn, not fail, where it has none), and full
  // float32 matrix products (no TF32), so a GPU's numbers stay close to the CPU's.
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  return "cuda:" + std::to_string(index);
}

std::string Shape::text() const {
  return "layers " + std::to_string(layers) + ", d_model " + std::to_string(d_model) + ", heads " +
         std::to_string(heads) + ", context " + std::to_string(context);
}

Status check_shape(const Shape& s) {
  auto range = [](const char* flag, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return invalid_argument(std::string(flag) + ": expected " + std::to_string(lo) + ".." + std::to_string(hi) +
                              ", found " + std::to_string(v));
    }
    return Status();
  };
  VINCI_RETURN_IF_ERROR(range("--layers", s.layers, 1, 64));
  VINCI_RETURN_IF_ERROR(range("--heads", s.heads, 1, 64));
  VINCI_RETURN_IF_ERROR(range("--d-model", s.d_model, 8, 4096));
  VINCI_RETURN_IF_ERROR(range("--context", s.context, 8, 65536));
  if (s.d_model % s.heads != 0) {
    return invalid_argument("--d-model: expected a multiple of --heads (" + std::to_string(s.heads) + "), found " +
                            std::to_string(s.d_model));
  }
  return Status();
}

int32_t fit_to_context(int32_t context, std::vector<int32_t>* prompt, int32_t reply_budget) {
  const int32_t p = static_cast<int32_t>(prompt->size());
  const int32_t promised = std::min(p, context / 2);
  const int32_t reply = std::max(0, std::min(reply_budget, context - promised));
  const int32_t keep = std::min(p, context - reply);
  if (keep < p) prompt->erase(prompt->begin(), prompt->begin() + (p - keep));
  return reply;
}

struct Model::Net {
  struct Param {
    std::string name;
    torch::Tensor value, exp_avg, exp_avg_sq;
  };
  struct Layer {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  // Per layer: keys and values of the positions seen so far, [heads, t, d_head].
  struct Cache {
    std::vector<torch::Tensor> k, v;
  };

  Shape shape;
  torch::Device device = torch::kCPU;
  std::vector<Param> params;  // the layout order: digests and state files follow it
  int64_t step = 0;           // Adam steps taken
  torch::Tensor tok, pos, lnf_w, lnf_b;
  std::vector<Layer> layers;

  enum class Init { kNormal, kResidual, kZeros, kOnes };
  struct Spec {
    std::string name;
    std::vector<int64_t> sizes;
    Init init;
  };

  static std::vector<Spec> specs(const Shape& s) {
    const int64_t d = s.d_model, v = s.vocab;
    std::vector<Spec> out = {{"tok_emb", {v, d}, Init::kNormal}, {"pos_emb", {s.context, d}, Init::kNormal}};
    for (int32_t l = 0; l < s.layers; ++l) {
      const std::string p = "layer" + std::to_string(l) + ".";
      out.push_back({p + "ln1.w", {d}, Init::kOnes});
      out.push_back({p + "ln1.b", {d}, Init::kZeros});
      out.push_back({p + "qkv.w", {3 * d, d}, Init::kNormal});
      out.push_back({p + "qkv.b", {3 * d}, Init::kZeros});
      out.push_back({p + "proj.w", {d, d}, Init::kResidual});
      out.push_back({p + "proj.b", {d}, Init::kZeros});
      out.push_back({p + "ln2.w", {d}, Init::kOnes});
      out.push_back({p + "ln2.b", {d}, Init::kZeros});
      out.push_back({p + "fc1.w", {4 * d, d}, Init::kNormal});
      out.push_back({p + "fc1.b", {4 * d}, Init::kZeros});
      out.push_back({p + "fc2.w", {d, 4 * d}, Init::kResidual});
      out.push_back({p + "fc2.b", {d}, Init::kZeros});
    }
    out.push_back({"lnf.w", {d}, Init::kOnes});
    out.push_back({"lnf.b", {d}, Init::kZeros});
    return out;
  }

  // Parameters in layout order from `values` (one float vector each), Adam state from `avg`/`sq`
  // when given, else zero.
  void assemble(const std::vector<Spec>& sp, std::vector<std::vector<float>>& values,
                std::vector<std::vector<float>>* avg, std::vector<std::vector<float>>* sq) {
    params.clear();
    for (size_t i = 0; i < sp.size(); ++i) {
      Param p;
      p.name = sp[i].name;
      // Made on the CPU from the host's floats, then moved: the values are the same on any device.
      auto load = [&](std::vector<float>& v) {
        return torch::from_blob(v.data(), sp[i].sizes, torch::kFloat32).to(device, false, true);
      };
      auto zeros = [&] { return torch::zeros(sp[i].sizes, torch::TensorOptions(torch::kFloat32).device(device)); };
      p.value = load(values[i]).set_requires_grad(true);
      p.exp_avg = avg ? load((*avg)[i]) : zeros();
      p.exp_avg_sq = sq ? load((*sq)[i]) : zeros();
      params.push_back(std::move(p));
    }
    size_t i = 0;
    tok = params[i++].value;
    pos = params[i++].value;
    layers.clear();
    for (int32_t l = 0; l < shape.layers; ++l) {
      Layer L;
      for (torch::Tensor* t : {&L.ln1_w, &L.ln1_b, &L.qkv_w, &L.qkv_b, &L.proj_w, &L.proj_b, &L.ln2_w, &L.ln2_b,
                               &L.fc1_w, &L.fc1_b, &L.fc2_w, &L.fc2_b}) {
        *t = params[i++].value;
      }
      layers.push_back(L);
    }
    lnf_w = params[i++].value;
    lnf_b = params[i++].value;
  }

  // The final hidden states [n, d] of tokens ids[begin, end) at positions pos0.. . With a cache,
  // the keys and values of the earlier positions come from it and this call's are appended;
  // without one, pos0 is 0.
  torch::Tensor forward(const torch::Tensor& ids, int64_t pos0, Cache* cache) const {
    const int64_t n = ids.size(0), d = shape.d_model, h = shape.heads, dh = d / h;
    torch::Tensor x = embed(ids) + pos.narrow(0, pos0, n);
    for (size_t l = 0; l < layers.size(); ++l) {
      const Layer& L = layers[l];
      torch::Tensor a = torch::layer_norm(x, {d}, L.ln1_w, L.ln1_b, kLayerNormEps);
      torch::Tensor qkv = torch::addmm(L.qkv_b, a, L.qkv_w.t());
      torch::Tensor q = qkv.narrow(1, 0, d).view({n, h, dh}).transpose(0, 1);
      torch::Tensor k = qkv.narrow(1, d, d).view({n, h, dh}).transpose(0, 1);
      torch::Tensor v = qkv.narrow(1, 2 * d, d).view({n, h, dh}).transpose(0, 1);
      if (cache != nullptr) {
        if (cache->k[l].defined()) {
          k = torch::cat({cache->k[l], k}, 1);
          v = torch::cat({cache->v[l], v}, 1);
        }
        cache->k[l] = k;
        cache->v[l] = v;
      }
      const int64_t total = k.size(1);
      torch::Tensor att = torch::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(dh)));
      if (n > 1) {
        // Query i sits at position total - n + i and sees keys up to it.
        torch::Tensor future = torch::ones({n, total}, bool_options()).triu(total - n + 1);
        att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
      }
      att = torch::softmax(att, -1);
      torch::Tensor y = torch::matmul(att, v).transpose(0, 1).contiguous().view({n, d});
      x = x + torch::addmm(L.proj_b, y, L.proj_w.t());
      torch::Tensor b = torch::layer_norm(x, {d}, L.ln2_w, L.ln2_b, kLayerNormEps);
      x = x + torch::addmm(L.fc2_b, torch::gelu(torch::addmm(L.fc1_b, b, L.fc1_w.t())), L.fc2_w.t());
    }
    return torch::layer_norm(x, {d}, lnf_w, lnf_b, kLayerNormEps);
  }

  torch::TensorOptions bool_options() const { return torch::TensorOptions(torch::kBool).device(device); }

  // The token embeddings of ids [n]. On the CPU an index_select (as before devices existed, so CPU
  // digests did not move); on a GPU a one-hot matrix product, whose backward is a matrix product
  // too, where index_select's backward adds with atomics in no fixed order.
  torch::Tensor embed(const torch::Tensor& ids) const {
    if (device.is_cpu()) return tok.index_select(0, ids);
    return torch::matmul(torch::one_hot(ids, shape.vocab).to(torch::kFloat32), tok);
  }

  // logp[i, targets[i]] for log-probabilities [n, vocab]: a gather on the CPU, a one-hot product
  // on a GPU (gather's backward is a scatter-add with atomics there).
  torch::Tensor pick(const torch::Tensor& logp, const torch::Tensor& targets) const {
    if (device.is_cpu()) return logp.gather(1, targets.unsqueeze(1)).squeeze(1);
    return (logp * torch::one_hot(targets, shape.vocab).to(logp.scalar_type())).sum(1);
  }

  // log pi of each reply token after the prompt, [reply.size()] (float32, with gradients unless
  // under a NoGradGuard).
  torch::Tensor reply_logprobs(const std::vector<int32_t>& prompt, const std::vector<int32_t>& reply) const {
    std::vector<int32_t> all(prompt);
    all.insert(all.end(), reply.begin(), reply.end());
    torch::Tensor hidden = forward(ids_tensor(all, 0, all.size() - 1, device), 0, nullptr);
    const int64_t p = static_cast<int64_t>(prompt.size()), r = static_cast<int64_t>(reply.size());
    torch::Tensor logits = torch::matmul(hidden.narrow(0, p - 1, r), tok.t());
    return pick(torch::log_softmax(logits, -1), ids_tensor(reply, 0, reply.size(), device));
  }

  // reply_logprobs of several sequences in one padded pass: [sum of the replies' lengths], the
  // sequences' tokens one after the other. Each sequence sits at positions 0.. of its row, padded
  // on the right; the attention mask is causal and hides padded keys, and only reply positions are
  // read, so padding changes no result (only the summation order of the matrix products).
  torch::Tensor batch_logprobs(const std::vector<const Sequence*>& seqs) const {
    if (seqs.size() == 1) return reply_logprobs(seqs[0]->prompt, seqs[0]->reply);
    const int64_t b = static_cast<int64_t>(seqs.size()), d = shape.d_model, h = shape.heads, dh = d / h;
    int64_t t = 0;
    for (const Sequence* s : seqs)
      t = std::max<int64_t>(t, static_cast<int64_t>(s->prompt.size() + s->reply.size()) - 1);
    std::vector<int64_t> ids(static_cast<size_t>(b * t), 0), rows, targets;
    std::vector<uint8_t> pad(static_cast<size_t>(b * t), 1);
    for (int64_t i = 0; i < b; ++i) {
      const Sequence& s = *seqs[static_cast<size_t>(i)];
      const int64_t p = static_cast<int64_t>(s.prompt.size()), r = static_cast<int64_t>(s.reply.size());
      for (int64_t j = 0; j < p + r - 1; ++j) {
        ids[static_cast<size_t>(i * t + j)] =
            j < p ? s.prompt[static_cast<size_t>(j)] : s.reply[static_cast<size_t>(j - p)];
        pad[static_cast<size_t>(i * t + j)] = 0;
      }
      for (int64_t j = 0; j < r; ++j) {
        rows.push_back(i * t + p - 1 + j);
        targets.push_back(s.reply[static_cast<size_t>(j)]);
      }
    }
    torch::Tensor id = host_tensor(ids, torch::kInt64, device);
    torch::Tensor padded = host_tensor(pad, torch::kUInt8, device).to(torch::kBool).view({b, t});
    // [b, 1, t, t]: query i of a row must not see key j > i nor a padded key.
    torch::Tensor blocked =
        (torch::ones({t, t}, bool_options()).triu(1).unsqueeze(0) | padded.unsqueeze(1)).unsqueeze(1);
    torch::Tensor x = (embed(id).view({b, t, d}) + pos.narrow(0, 0, t)).view({b * t, d});
    for (const Layer& L : layers) {
      torch::Tensor a = torch::layer_norm(x, {d}, L.ln1_w, L.ln1_b, kLayerNormEps);
      torch::Tensor qkv = torch::addmm(L.qkv_b, a, L.qkv_w.t());
      torch::Tensor q = qkv.narrow(1, 0, d).view({b, t, h, dh}).transpose(1, 2);
      torch::Tensor k = qkv.narrow(1, d, d).view({b, t, h, dh}).transpose(1, 2);
      torch::Tensor v = qkv.narrow(1, 2 * d, d).view({b, t, h, dh}).transpose(1, 2);
      torch::Tensor att = torch::matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(dh)));
      att = torch::softmax(att.masked_fill(blocked, -std::numeric_limits<float>::infinity()), -1);
      torch::Tensor y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b * t, d});
      x = x + torch::addmm(L.proj_b, y, L.proj_w.t());
      torch::Tensor c = torch::layer_norm(x, {d}, L.ln2_w, L.ln2_b, kLayerNormEps);
      x = x + torch::addmm(L.fc2_b, torch::gelu(torch::addmm(L.fc1_b, c, L.fc1_w.t())), L.fc2_w.t());
    }
    torch::Tensor hidden = torch::layer_norm(x, {d}, lnf_w, lnf_b, kLayerNormEps);
    // Each reply position is read once, so index_select's backward adds into distinct rows.
    torch::Tensor logits = torch::matmul(hidden.index_select(0, host_tensor(rows, torch::kInt64, device)), tok.t());
    return pick(torch::log_softmax(logits, -1), host_tensor(targets, torch::kInt64, device));
  }

  // Clips the gradients to max_norm (global L2 norm, accumulated in double in layout order; 0: no
  // clipping), takes one Adam step and clears the gradients. Returns the norm before clipping.
  double adam_step(double max_norm, double lr) {
    torch::NoGradGuard no_grad;
    double sum_sq = 0;
    for (auto& p : params) {
      if (p.value.grad().defined()) sum_sq += p.value.grad().to(torch::kFloat64).pow(2).sum().item<double>();
    }
    const double norm = std::sqrt(sum_sq);
    const double scale = max_norm > 0 ? max_norm / (norm + kClipEps) : 1;
    step += 1;
    const double bias1 = 1 - std::pow(kAdamBeta1, static_cast<double>(step));
    const double bias2 = 1 - std::pow(kAdamBeta2, static_cast<double>(step));
    for (auto& p : params) {
      torch::Tensor g = p.value.grad();
      if (!g.defined()) g = torch::zeros_like(p.value);
      if (scale < 1) g.mul_(scale);
      p.exp_avg.mul_(kAdamBeta1).add_(g, 1 - kAdamBeta1);
      p.exp_avg_sq.mul_(kAdamBeta2).addcmul_(g, g, 1 - kAdamBeta2);
      torch::Tensor denom = (p.exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(kAdamEps);
      p.value.addcdiv_(p.exp_avg, denom, -lr / bias1);
      p.value.mutable_grad() = torch::Tensor();
    }
    return norm;
  }
};

Model::Model() : net_(std::make_unique<Net>()) {}
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::init(const Shape& shape_in, uint64_t seed, const std::string& device) {
  Shape shape = shape_in;
  shape.vocab = kVocab;
  VINCI_RETURN_IF_ERROR(check_shape(shape));
  std::unique_ptr<Model> m(new Model());
  m->shape_ = shape;
  m->net_->shape = shape;
  m->device_ = device;
  Status st = torch_call("init", [&] {
    m->net_->device = torch::Device(device);
    const auto sp = Net::specs(shape);
    std::vector<std::vector<float>> values;
    const RngKey root = RngKey::root(seed).with("lm_init", shape.text());
    for (const auto& s : sp) {
      int64_t n = 1;
      for (int64_t v : s.sizes) n *= v;
      std::vector<float> v(static_cast<size_t>(n), s.init == Net::Init::kOnes ? 1.0f : 0.0f);
      if (s.init == Net::Init::kNormal || s.init == Net::Init::kResidual) {
        const double std_dev =
            s.init == Net::Init::kNormal ? kInitStd : kInitStd / std::sqrt(2.0 * static_cast<double>(shape.layers));
        Stream draws(root.with("param", s.name));
        for (auto& x : v) x = static_cast<float>(std_dev * draws.normal());
      }
      values.push_back(std::move(v));
    }
    m->net_->assemble(sp, values, nullptr, nullptr);
  });
  if (!st.ok()) return st;
  return m;
}

std::string Model::to_bytes() const {
  ByteWriter w;
  w.raw(kMagic);
  for (int32_t v : {shape_.layers, shape_.d_model, shape_.heads, shape_.context, shape_.vocab}) w.i32(v);
  w.i64(net_->step);
  w.u32(static_cast<uint32_t>(net_->params.size()));
  for (const auto& p : net_->params) {
    w.str(p.name);
    for (const torch::Tensor* t : {&p.value, &p.exp_avg, &p.exp_avg_sq}) {
      torch::Tensor c = t->detach().to(torch::kCPU).contiguous();
      w.f32s(c.data_ptr<float>(), static_cast<size_t>(c.numel()));
    }
  }
  return w.take();
}

Result<std::unique_ptr<Model>> Model::from_bytes(std::string_view bytes, const std::string& device) {
  ByteReader r(bytes);
  std::string_view magic;
  if (!r.bytes(sizeof kMagic - 1, &magic) || magic != kMagic) {
    return corruption("language model state: expected it to start with \"" + std::string(kMagic) +
                      "\", found something else");
  }
  Shape shape;
  for (int32_t* v : {&shape.layers, &shape.d_model, &shape.heads, &shape.context, &shape.vocab}) {
    if (!r.i32(v)) return corruption("language model state: ends inside its shape");
  }
  if (shape.vocab != kVocab) {
    return corruption("language model state: expected vocabulary " + std::to_string(kVocab) + ", found " +
                      std::to_string(shape.vocab));
  }
  if (Status st = check_shape(shape); !st.ok()) return corruption("language model state: " + st.message());
  std::unique_ptr<Model> m(new Model());
  m->shape_ = shape;
  m->net_->shape = shape;
  uint32_t count = 0;
  if (!r.i64(&m->net_->step) || !r.u32(&count)) return corruption("language model state: ends inside its header");
  const auto sp = Net::specs(shape);
  if (count != sp.size()) {
    return corruption("language model state: expected " + std::to_string(sp.size()) + " parameters for " +
                      shape.text() + ", found " + std::to_string(count));
  }
  std::vector<std::vector<float>> values(sp.size()), avg(sp.size()), sq(sp.size());
  for (size_t i = 0; i < sp.size(); ++i) {
    std::string name;
    if (!r.str(&name) || name != sp[i].name) {
      return corruption("language model state: expected parameter " + sp[i].name + ", found '" + name + "'");
    }
    int64_t n = 1;
    for (int64_t v : sp[i].sizes) n *= v;
    for (auto* out : {&values[i], &avg[i], &sq[i]}) {
      out->resize(static_cast<size_t>(n));
      if (!r.f32s(out->data(), out->size())) return corruption("language model state: ends inside " + name);
    }
  }
  if (r.remaining() != 0) {
    return corruption("language model state: " + std::to_string(r.remaining()) + " bytes after the last parameter");
  }
  m->device_ = device;
  Status st = torch_call("load", [&] {
    m->net_->device = torch::Device(device);
    m->net_->assemble(sp, values, &avg, &sq);
  });
  if (!st.ok()) return st;
  return m;
}

std::unique_ptr<Model> Model::clone() const { return std::move(from_bytes(to_bytes(), device_)).value(); }

int64_t Model::parameters() const {
  int64_t n = 0;
  for (const auto& p : net_->params) n += p.value.numel();
  return n;
}

namespace {

// The index a sampler picks from logits (double): greedy at temperature 0 (ties to the lowest
// id), else one uniform draw against softmax(logits / T) restricted to the top-p nucleus.
int32_t sample_token(std::vector<double> logits, const SampleOptions& o, Stream* draws) {
  const int32_t n = static_cast<int32_t>(logits.size());
  if (o.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  double m = -std::numeric_limits<double>::infinity();
  for (double& l : logits) {
    l /= o.temperature;
    m = std::max(m, l);
  }
  std::vector<double> p(logits.size());
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += p[i] = std::exp(logits[i] - m);
  for (double& x : p) x /= sum;
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  // The nucleus: the most probable tokens whose mass first reaches top_p (at least one).
  size_t kept = 0;
  double mass = 0;
  while (kept < order.size() && (kept == 0 || mass < o.top_p)) mass += p[order[kept++]];
  const double u = draws->uniform() * mass;
  double acc = 0;
  for (size_t i = 0; i < kept; ++i) {
    acc += p[order[i]];
    if (u < acc) return order[i];
  }
  return order[kept - 1];
}

std::vector<double> last_row(const torch::Tensor& logits) {
  torch::Tensor row = logits[logits.size(0) - 1].to(torch::kCPU).to(torch::kFloat64).contiguous();
  const double* d = row.data_ptr<double>();
  return std::vector<double>(d, d + row.numel());
}

}  // namespace

Result<Generation> Model::generate(std::vector<int32_t> prompt, const SampleOptions& options, const RngKey& key) const {
  if (prompt.empty()) return invalid_argument("generate: the prompt has no tokens");
  Generation g;
  const int32_t budget = options.max_tokens > 0 ? options.max_tokens : shape_.context;
  const int32_t reply = fit_to_context(shape_.context, &prompt, budget);
  g.prompt_tokens = static_cast<int32_t>(prompt.size());
  g.finish_reason = "length";
  Stream draws(key);
  Status st = torch_call("generate", [&] {
    torch::NoGradGuard no_grad;
    Net::Cache cache;
    cache.k.resize(net_->layers.size());
    cache.v.resize(net_->layers.size());
    torch::Tensor hidden = net_->forward(ids_tensor(prompt, 0, prompt.size(), net_->device), 0, &cache);
    int64_t at = static_cast<int64_t>(prompt.size());
    for (int32_t i = 0; i < reply; ++i) {
      torch::Tensor logits = torch::matmul(hidden.narrow(0, hidden.size(0) - 1, 1), net_->tok.t());
      const int32_t t = sample_token(last_row(logits), options, &draws);
      if (t == kTokEnd) {
        g.finish_reason = "stop";
        return;
      }
      g.tokens.push_back(t);
      if (i + 1 == reply) return;
      hidden = net_->forward(ids_tensor(g.tokens, g.tokens.size() - 1, g.tokens.size(), net_->device), at++, &cache);
    }
  });
  if (!st.ok()) return st;
  return g;
}

Result<double> Model::logprob(std::vector<int32_t> prompt, const std::vector<int32_t>& reply_in, int32_t* kept) const {
  if (prompt.empty()) return invalid_argument("logprob: the prompt has no tokens");
  const int32_t reply = fit_to_context(shape_.context, &prompt, static_cast<int32_t>(reply_in.size()));
  std::vector<int32_t> r(reply_in.begin(), reply_in.begin() + reply);
  if (kept != nullptr) *kept = reply;
  double total = 0;
  if (r.empty()) return total;
  Status st = torch_call("logprob", [&] {
    torch::NoGradGuard no_grad;
    total = net_->reply_logprobs(prompt, r).to(torch::kFloat64).sum().item<double>();
  });
  if (!st.ok()) return st;
  return total;
}

Result<UpdateStats> Model::update(bool rl, std::vector<Sequence> seqs, const UpdateOptions& o, const RngKey& order_key,
                                  const Model* base) {
  if (o.kl > 0 && (base == nullptr || !(base->shape() == shape_))) {
    return failed_precondition("options.kl > 0 needs the base model of shape " + shape_.text());
  }
  UpdateStats stats;
  // Cut every sequence to the context once; a sequence with no reply token left is dropped.
  std::vector<Sequence> kept;
  for (auto& s : seqs) {
    if (s.prompt.empty()) return invalid_argument("update: a sample's prompt has no tokens");
    const int32_t r = fit_to_context(shape_.context, &s.prompt, static_cast<int32_t>(s.reply.size()));
    s.reply.resize(static_cast<size_t>(r));
    if (r > 0) kept.push_back(std::move(s));
  }
  if (kept.empty()) return invalid_argument("update: no sample has a reply token to train on");
  const size_t batch = o.batch > 0 ? static_cast<size_t>(o.batch) : rl ? kept.size() : size_t{8};
  const size_t pass = static_cast<size_t>(std::max(1, o.pass));
  // Mean reply cross-entropy over every sequence, token-weighted, without gradients.
  auto mean_ce = [&]() {
    torch::NoGradGuard no_grad;
    double sum = 0;
    int64_t n = 0;
    if (pass == 1) {
      for (const auto& s : kept) {
        sum -= net_->reply_logprobs(s.prompt, s.reply).to(torch::kFloat64).sum().item<double>();
        n += static_cast<int64_t>(s.reply.size());
      }
    } else {
      for (size_t begin = 0; begin < kept.size(); begin += pass) {
        std::vector<const Sequence*> group;
        for (size_t i = begin; i < std::min(kept.size(), begin + pass); ++i) {
          group.push_back(&kept[i]);
          n += static_cast<int64_t>(kept[i].reply.size());
        }
        sum -= net_->batch_logprobs(group).to(torch::kFloat64).sum().item<double>();
      }
    }
    return sum / static_cast<double>(n);
  };
  Status st = torch_call("update", [&] {
    if (!rl) stats.loss_before = mean_ce();
    for (int32_t epoch = 0; epoch < o.epochs; ++epoch) {
      std::vector<size_t> order(kept.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      Stream shuffle(order_key.with("epoch", epoch));
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle.below(i)]);
      double epoch_loss = 0, epoch_sum = 0;
      int64_t epoch_tokens = 0;
      int32_t epoch_steps = 0;
      stats.prompt_tokens = stats.reply_tokens = 0;
      for (size_t begin = 0; begin < order.size(); begin += batch) {
        const size_t end = std::min(order.size(), begin + batch);
        int64_t n = 0;
        for (size_t i = begin; i < end; ++i) n += static_cast<int64_t>(kept[order[i]].reply.size());
        double step_loss = 0;
        for (size_t i = begin; i < end && pass > 1; i += pass) {
          // One padded pass over up to `pass` sequences: the sum of their terms below.
          std::vector<const Sequence*> group;
          std::vector<double> coef;
          for (size_t j = i; j < std::min(end, i + pass); ++j) {
            const Sequence& s = kept[order[j]];
            group.push_back(&s);
            coef.insert(coef.end(), s.reply.size(), (rl ? -s.advantage : -1.0) / static_cast<double>(n));
            stats.prompt_tokens += static_cast<int64_t>(s.prompt.size());
            stats.reply_tokens += static_cast<int64_t>(s.reply.size());
          }
          torch::Tensor lp = net_->batch_logprobs(group);
          torch::Tensor term = (lp * host_tensor(coef, torch::kFloat64, net_->device).to(torch::kFloat32)).sum();
          if (rl && o.kl > 0) {
            torch::Tensor ref;
            {
              torch::NoGradGuard no_grad;
              ref = base->net_->batch_logprobs(group);
            }
            torch::Tensor diff = ref - lp;
            term = term + o.kl * (torch::exp(diff) - diff - 1).sum() / static_cast<double>(n);
          }
          term.backward();
          step_loss += term.item<double>();
          epoch_sum -= lp.detach().to(torch::kFloat64).sum().item<double>();
        }
        for (size_t i = begin; i < end && pass == 1; ++i) {
          const Sequence& s = kept[order[i]];
          torch::Tensor lp = net_->reply_logprobs(s.prompt, s.reply);
          torch::Tensor sum_lp = lp.sum();
          torch::Tensor term = (rl ? -s.advantage : -1.0) * sum_lp / static_cast<double>(n);
          if (rl && o.kl > 0) {
            torch::Tensor ref;
            {
              torch::NoGradGuard no_grad;
              ref = base->net_->reply_logprobs(s.prompt, s.reply);
            }
            torch::Tensor diff = ref - lp;
            term = term + o.kl * (torch::exp(diff) - diff - 1).sum() / static_cast<double>(n);
          }
          term.backward();
          step_loss += term.item<double>();
          epoch_sum -= sum_lp.item<double>();
          stats.prompt_tokens += static_cast<int64_t>(s.prompt.size());
          stats.reply_tokens += static_cast<int64_t>(s.reply.size());
        }
        epoch_tokens += n;
        stats.grad_norm = net_->adam_step(o.clip, o.lr);
        epoch_loss += step_loss;
        ++epoch_steps;
        ++stats.steps;
      }
      // rl: the mean of the steps' losses; sft: the epoch's token-mean cross-entropy.
      stats.loss = rl ? epoch_loss / epoch_steps : epoch_sum / static_cast<double>(epoch_tokens);
    }
    if (!rl) stats.loss_after = mean_ce();
  });
  if (!st.ok()) return st;
  return stats;
}

}  // namespace lm
}  // namespace vinci
