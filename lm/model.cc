#include "lm/model.h"

#include <ATen/Parallel.h>
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

torch::Tensor ids_tensor(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  std::vector<int64_t> v(ids.begin() + static_cast<ptrdiff_t>(begin), ids.begin() + static_cast<ptrdiff_t>(end));
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kInt64).clone();
}

}  // namespace

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
      p.value = torch::from_blob(values[i].data(), sp[i].sizes, torch::kFloat32).clone().set_requires_grad(true);
      p.exp_avg = avg ? torch::from_blob((*avg)[i].data(), sp[i].sizes, torch::kFloat32).clone()
                      : torch::zeros(sp[i].sizes, torch::kFloat32);
      p.exp_avg_sq = sq ? torch::from_blob((*sq)[i].data(), sp[i].sizes, torch::kFloat32).clone()
                        : torch::zeros(sp[i].sizes, torch::kFloat32);
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
    torch::Tensor x = tok.index_select(0, ids) + pos.narrow(0, pos0, n);
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
        torch::Tensor future = torch::ones({n, total}, torch::kBool).triu(total - n + 1);
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

  // log pi of each reply token after the prompt, [reply.size()] (float32, with gradients unless
  // under a NoGradGuard).
  torch::Tensor reply_logprobs(const std::vector<int32_t>& prompt, const std::vector<int32_t>& reply) const {
    std::vector<int32_t> all(prompt);
    all.insert(all.end(), reply.begin(), reply.end());
    torch::Tensor hidden = forward(ids_tensor(all, 0, all.size() - 1), 0, nullptr);
    const int64_t p = static_cast<int64_t>(prompt.size()), r = static_cast<int64_t>(reply.size());
    torch::Tensor logits = torch::matmul(hidden.narrow(0, p - 1, r), tok.t());
    torch::Tensor targets = ids_tensor(reply, 0, reply.size()).unsqueeze(1);
    return torch::log_softmax(logits, -1).gather(1, targets).squeeze(1);
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

Result<std::unique_ptr<Model>> Model::init(const Shape& shape_in, uint64_t seed) {
  Shape shape = shape_in;
  shape.vocab = kVocab;
  VINCI_RETURN_IF_ERROR(check_shape(shape));
  std::unique_ptr<Model> m(new Model());
  m->shape_ = shape;
  m->net_->shape = shape;
  Status st = torch_call("init", [&] {
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
      torch::Tensor c = t->detach().contiguous();
      w.f32s(c.data_ptr<float>(), static_cast<size_t>(c.numel()));
    }
  }
  return w.take();
}

Result<std::unique_ptr<Model>> Model::from_bytes(std::string_view bytes) {
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
  Status st = torch_call("load", [&] { m->net_->assemble(sp, values, &avg, &sq); });
  if (!st.ok()) return st;
  return m;
}

std::unique_ptr<Model> Model::clone() const { return std::move(from_bytes(to_bytes())).value(); }

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
  torch::Tensor row = logits[logits.size(0) - 1].to(torch::kFloat64).contiguous();
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
    torch::Tensor hidden = net_->forward(ids_tensor(prompt, 0, prompt.size()), 0, &cache);
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
      hidden = net_->forward(ids_tensor(g.tokens, g.tokens.size() - 1, g.tokens.size()), at++, &cache);
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
  // Mean reply cross-entropy over every sequence, token-weighted, without gradients.
  auto mean_ce = [&]() {
    torch::NoGradGuard no_grad;
    double sum = 0;
    int64_t n = 0;
    for (const auto& s : kept) {
      sum -= net_->reply_logprobs(s.prompt, s.reply).to(torch::kFloat64).sum().item<double>();
      n += static_cast<int64_t>(s.reply.size());
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
        for (size_t i = begin; i < end; ++i) {
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
