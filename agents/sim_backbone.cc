#include "agents/sim_backbone.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "agents/sim_checkpoint.h"
#include "core/bytes.h"
#include "core/check.h"

namespace vinci {
namespace {

// torch.optim.Adam's defaults.
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.999;
constexpr double kAdamEps = 1e-8;
// torch.nn.utils.clip_grad_norm_ adds this to the norm before dividing.
constexpr double kClipEps = 1e-6;

// Fills masked-out selection scores before a logsumexp: exp(-1e30 - max) is exactly 0 in float32,
// and unlike -inf it keeps 0 * (...) finite, so rows with nothing to add stay NaN-free.
constexpr float kMaskedScore = -1e30f;

constexpr int32_t kRoles = 3;

// OpenMP keeps the thread count per calling thread, so pin it on every entry, not once.
void pin_torch_threads() {
  if (at::get_num_threads() != SimBackbone::kTorchThreads) {
    at::set_num_threads(SimBackbone::kTorchThreads);
  }
}

// Runs `body`, a libtorch call, on the pinned threads; an exception from libtorch becomes an
// internal error that names what was running ("sim backbone WHAT: ...").
template <class F>
Status torch_call(const char* what, F&& body) {
  try {
    pin_torch_threads();
    body();
    return Status();
  } catch (const std::exception& e) {
    return internal_error(std::string("sim backbone ") + what + ": " + e.what());
  }
}

std::string str(int64_t v) { return std::to_string(v); }

// ---- sampling math, in double ----

// Index of the largest x[j] (+ a Gumbel draw per j when noise is given); ties go to the lowest j.
// With noise, draws are made for every j in order, so draw j is the stream's j-th.
int32_t noisy_argmax(const double* x, int32_t n, Stream* noise) {
  int32_t best = 0;
  double best_value = 0;
  for (int32_t j = 0; j < n; ++j) {
    double v = x[j] + (noise != nullptr ? noise->gumbel() : 0.0);
    if (j == 0 || v > best_value) {
      best = j;
      best_value = v;
    }
  }
  return best;
}

double log_softmax_at(const double* x, int32_t n, int32_t i) {
  double m = x[0];
  for (int32_t j = 1; j < n; ++j) m = std::max(m, x[j]);
  double s = 0;
  for (int32_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  return x[i] - m - std::log(s);
}

// log(1 / (1 + exp(-z))) without overflow for either sign of z.
double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

// A tensor's float32 values (contiguous, detached), for the checkpoint writer and the hasher.
torch::Tensor contiguous_values(const torch::Tensor& t) { return t.detach().contiguous(); }

// Its little-endian float32 bytes.
std::string float_bytes(const torch::Tensor& t) {
  torch::Tensor c = contiguous_values(t);
  ByteWriter w;
  w.f32s(c.data_ptr<float>(), static_cast<size_t>(c.numel()));
  return w.take();
}

}  // namespace

std::string libtorch_version() { return TORCH_VERSION; }

std::string libtorch_cpu_capability() {
  const std::string config = at::show_config();
  const std::string label = "CPU capability usage: ";
  size_t at = config.find(label);
  if (at == std::string::npos) return "unknown";
  at += label.size();
  size_t end = config.find('\n', at);
  std::string value = config.substr(at, end == std::string::npos ? std::string::npos : end - at);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\r')) value.pop_back();
  return value.empty() ? "unknown" : value;
}

// The torch side: parameters, their Adam state, and the forward passes of the three roles.
struct SimBackbone::Net {
  struct Param {
    torch::Tensor value;  // requires_grad
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
    int64_t step = 0;  // Adam steps this parameter has taken (it had a gradient)
  };

  BackboneShape shape;
  int32_t hidden = 0;
  int32_t role_dim = 0;
  int32_t choice_dim = 0;
  int32_t n_heads = 0;
  int32_t input_dim = 0;  // x without the role embedding: T + C + C + F
  std::vector<int32_t> head_offsets;
  torch::Tensor head_segments;  // [C, heads]: 1 where choice c belongs to head k; a constant

  std::map<std::string, Param> params;  // name order is the digest and checkpoint order
  torch::Tensor role_embedding, trunk1_w, trunk1_b, trunk2_w, trunk2_b, policy_w, policy_b, selection1_w, selection1_b,
      selection2_w, selection2_b, include_w, include_b, scope_w, scope_b;

  // ---- construction ----

  void build(const SimBackboneConfig& config) {
    shape = config.shape;
    hidden = config.hidden;
    role_dim = config.role_dim;
    choice_dim = shape.choice_dim();
    n_heads = static_cast<int32_t>(shape.head_sizes.size());
    input_dim = shape.task_dim + 2 * choice_dim + shape.feedback_dim;
    int32_t offset = 0;
    std::vector<float> segments(static_cast<size_t>(choice_dim) * n_heads, 0.0f);
    for (int32_t k = 0; k < n_heads; ++k) {
      head_offsets.push_back(offset);
      for (int32_t c = 0; c < shape.head_sizes[k]; ++c) segments[(offset + c) * n_heads + k] = 1;
      offset += shape.head_sizes[k];
    }
    head_segments = torch::from_blob(segments.data(), {choice_dim, n_heads}, torch::kFloat32).clone();

    torch::NoGradGuard no_grad;
    // A private generator: the global one is neither read nor reseeded. Creation order below is
    // fixed, so the parameters are a pure function of the config.
    at::Generator gen = at::detail::createCPUGenerator(config.init_seed);
    const int64_t H = hidden;
    role_embedding = add("role_embedding", torch::empty({kRoles, role_dim}).normal_(0, 1, gen));
    linear("trunk1", H, input_dim + role_dim, gen, &trunk1_w, &trunk1_b);
    linear("trunk2", H, H, gen, &trunk2_w, &trunk2_b);
    linear("policy", choice_dim, H, gen, &policy_w, &policy_b);
    linear("selection1", H, H + shape.candidate_dim, gen, &selection1_w, &selection1_b);
    linear("selection2", 1, H, gen, &selection2_w, &selection2_b);
    linear("summary_include", choice_dim, H, gen, &include_w, &include_b);
    linear("summary_scope", 2, H, gen, &scope_w, &scope_b);
  }

  torch::Tensor add(const std::string& name, torch::Tensor value) {
    Param p;
    p.value = value.set_requires_grad(true);
    p.exp_avg = torch::zeros_like(value).set_requires_grad(false);
    p.exp_avg_sq = torch::zeros_like(value).set_requires_grad(false);
    params[name] = p;
    return p.value;
  }

  // libtorch's default Linear init: kaiming_uniform(a = sqrt(5)) on the weight is
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias uses the same bound.
  void linear(const std::string& name, int64_t out, int64_t in, at::Generator& gen, torch::Tensor* w,
              torch::Tensor* b) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    *w = add(name + ".weight", torch::empty({out, in}).uniform_(-bound, bound, gen));
    *b = add(name + ".bias", torch::empty({out}).uniform_(-bound, bound, gen));
  }

  // ---- input checks ----

  static Status check_vector(const char* what, const std::vector<float>& v, int32_t want) {
    if (v.size() != static_cast<size_t>(want)) {
      return invalid_argument(std::string(what) + ": expected " + str(want) + " values, got " +
                              str(static_cast<int64_t>(v.size())));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        std::ostringstream os;
        os << what << "[" << i << "] is " << v[i] << ", expected a finite number";
        return invalid_argument(os.str());
      }
    }
    return Status();
  }

  Status check_active_heads(const std::vector<int32_t>& heads) const {
    std::set<int32_t> seen;
    for (size_t i = 0; i < heads.size(); ++i) {
      if (heads[i] < 0 || heads[i] >= n_heads) {
        return invalid_argument("active_heads[" + str(i) + "] = " + str(heads[i]) +
                                ": expected a global knob index in [0, " + str(n_heads) + ")");
      }
      if (!seen.insert(heads[i]).second) {
        return invalid_argument("active_heads[" + str(i) + "] = " + str(heads[i]) + " appears twice");
      }
    }
    return Status();
  }

  Status check(const PolicyInput& in) const {
    VINCI_RETURN_IF_ERROR(check_vector("task", in.task, shape.task_dim));
    VINCI_RETURN_IF_ERROR(check_vector("skill_hint", in.skill_hint, choice_dim));
    VINCI_RETURN_IF_ERROR(check_vector("previous", in.previous, choice_dim));
    VINCI_RETURN_IF_ERROR(check_vector("feedback", in.feedback, shape.feedback_dim));
    VINCI_RETURN_IF_ERROR(check_active_heads(in.active_heads));
    if (in.allowed.empty()) return Status();
    VINCI_RETURN_IF_ERROR(check_vector("allowed", in.allowed, choice_dim));
    for (int32_t k : in.active_heads) {
      bool any = false;
      for (int32_t c = 0; c < shape.head_sizes[k]; ++c) any = any || in.allowed[head_offsets[k] + c] != 0;
      if (!any) return invalid_argument("allowed: every choice of active head " + str(k) + " is locked");
    }
    return Status();
  }

  Status check(const SelectionInput& in) const {
    VINCI_RETURN_IF_ERROR(check_vector("task", in.task, shape.task_dim));
    if (in.max_pick < 0) {
      return invalid_argument("max_pick = " + str(in.max_pick) + ": expected >= 0");
    }
    for (size_t j = 0; j < in.candidates.size(); ++j) {
      std::string what = "candidates[" + str(j) + "]";
      VINCI_RETURN_IF_ERROR(check_vector(what.c_str(), in.candidates[j], shape.candidate_dim));
    }
    return Status();
  }

  Status check(const SummaryInput& in) const {
    VINCI_RETURN_IF_ERROR(check_vector("task", in.task, shape.task_dim));
    VINCI_RETURN_IF_ERROR(check_vector("winning", in.winning, choice_dim));
    VINCI_RETURN_IF_ERROR(check_vector("feedback", in.feedback, shape.feedback_dim));
    return check_active_heads(in.active_heads);
  }

  Status check(const PolicyInput& in, const PolicySample& s) const {
    VINCI_RETURN_IF_ERROR(check(in));
    if (s.choices.size() != in.active_heads.size()) {
      return invalid_argument("policy sample has " + str(s.choices.size()) + " choices for " +
                              str(in.active_heads.size()) + " active heads");
    }
    for (size_t i = 0; i < s.choices.size(); ++i) {
      int32_t size = shape.head_sizes[in.active_heads[i]];
      if (s.choices[i] < 0 || s.choices[i] >= size) {
        return invalid_argument("policy choices[" + str(i) + "] = " + str(s.choices[i]) + ": head " +
                                str(in.active_heads[i]) + " has " + str(size) + " choices");
      }
      if (!in.allowed.empty() && in.allowed[head_offsets[in.active_heads[i]] + s.choices[i]] == 0) {
        return invalid_argument("policy choices[" + str(i) + "] = " + str(s.choices[i]) + ": head " +
                                str(in.active_heads[i]) + " has that choice locked");
      }
    }
    return Status();
  }

  Status check(const SelectionInput& in, const SelectionSample& s) const {
    VINCI_RETURN_IF_ERROR(check(in));
    std::set<int32_t> seen;
    for (size_t t = 0; t < s.picked.size(); ++t) {
      if (s.picked[t] < 0 || static_cast<size_t>(s.picked[t]) >= in.candidates.size()) {
        return invalid_argument("selection picked[" + str(t) + "] = " + str(s.picked[t]) + ": there are " +
                                str(in.candidates.size()) + " candidates");
      }
      if (!seen.insert(s.picked[t]).second) {
        return invalid_argument("selection picked[" + str(t) + "] = " + str(s.picked[t]) + " was picked twice");
      }
    }
    return Status();
  }

  Status check(const SummaryInput& in, const SummarySample& s) const {
    VINCI_RETURN_IF_ERROR(check(in));
    if (s.include.size() != in.active_heads.size()) {
      return invalid_argument("summary sample has " + str(s.include.size()) + " include flags for " +
                              str(in.active_heads.size()) + " active heads");
    }
    for (size_t i = 0; i < s.include.size(); ++i) {
      if (s.include[i] > 1) {
        return invalid_argument("summary include[" + str(i) + "] = " + str(s.include[i]) + ": expected 0 or 1");
      }
    }
    if (s.scope != 0 && s.scope != 1) {
      return invalid_argument("summary scope = " + str(s.scope) + ": expected 0 or 1");
    }
    return Status();
  }

  // ---- forward ----

  // One trunk row: task | skill_hint | previous | feedback; empty vectors leave zeros.
  void fill_row(float* row, const std::vector<float>& task, const std::vector<float>& hint,
                const std::vector<float>& previous, const std::vector<float>& feedback) const {
    std::fill(row, row + input_dim, 0.0f);
    std::copy(task.begin(), task.end(), row);
    std::copy(hint.begin(), hint.end(), row + shape.task_dim);
    std::copy(previous.begin(), previous.end(), row + shape.task_dim + choice_dim);
    std::copy(feedback.begin(), feedback.end(), row + shape.task_dim + 2 * choice_dim);
  }

  static torch::Tensor matrix(std::vector<float>& data, int64_t rows, int64_t cols) {
    if (rows * cols == 0) return torch::zeros({rows, cols}, torch::kFloat32);
    return torch::from_blob(data.data(), {rows, cols}, torch::kFloat32).clone();
  }

  static torch::Tensor vector64(std::vector<int64_t>& data) {
    if (data.empty()) return torch::zeros({0}, torch::kInt64);
    return torch::from_blob(data.data(), {static_cast<int64_t>(data.size())}, torch::kInt64).clone();
  }

  torch::Tensor trunk(const torch::Tensor& x, AgentRole role) const {
    const int64_t n = x.size(0);
    torch::Tensor r = role_embedding.narrow(0, static_cast<int64_t>(role), 1).expand({n, role_dim});
    torch::Tensor h = torch::tanh(torch::linear(torch::cat({x, r}, 1), trunk1_w, trunk1_b));
    return torch::tanh(torch::linear(h, trunk2_w, trunk2_b));
  }

  // h_rows: [M, H], one trunk row per candidate; candidates: [M, K]. Returns [M].
  torch::Tensor selection_head(const torch::Tensor& h_rows, const torch::Tensor& candidates) const {
    torch::Tensor z = torch::tanh(torch::linear(torch::cat({h_rows, candidates}, 1), selection1_w, selection1_b));
    return torch::linear(z, selection2_w, selection2_b).squeeze(1);
  }

  // [N, heads] include logits: head k's slice of (Wi h + bi) dotted with the winning one-hot.
  torch::Tensor include_head(const torch::Tensor& h, const torch::Tensor& winning) const {
    return (torch::linear(h, include_w, include_b) * winning).matmul(head_segments);
  }

  std::vector<double> policy_logits(const PolicyInput& in) const {
    torch::NoGradGuard no_grad;
    std::vector<float> x(input_dim);
    fill_row(x.data(), in.task, in.skill_hint, in.previous, in.feedback);
    torch::Tensor h = trunk(matrix(x, 1, input_dim), AgentRole::kPolicy);
    return to_doubles(torch::linear(h, policy_w, policy_b));
  }

  std::vector<double> selection_scores(const SelectionInput& in) const {
    const int64_t n = static_cast<int64_t>(in.candidates.size());
    if (n == 0) return {};
    torch::NoGradGuard no_grad;
    std::vector<float> x(input_dim);
    fill_row(x.data(), in.task, {}, {}, {});
    torch::Tensor h = trunk(matrix(x, 1, input_dim), AgentRole::kSelection);
    std::vector<float> c;
    c.reserve(static_cast<size_t>(n) * shape.candidate_dim);
    for (const auto& cand : in.candidates) c.insert(c.end(), cand.begin(), cand.end());
    return to_doubles(selection_head(h.expand({n, hidden}), matrix(c, n, shape.candidate_dim)));
  }

  // Include logits of every head (global order), then the 2 scope logits.
  std::vector<double> summary_logits(const SummaryInput& in) const {
    torch::NoGradGuard no_grad;
    std::vector<float> x(input_dim);
    fill_row(x.data(), in.task, {}, in.winning, in.feedback);
    torch::Tensor h = trunk(matrix(x, 1, input_dim), AgentRole::kSummary);
    std::vector<float> w = in.winning;
    std::vector<double> out = to_doubles(include_head(h, matrix(w, 1, choice_dim)));
    std::vector<double> scope = to_doubles(torch::linear(h, scope_w, scope_b));
    out.insert(out.end(), scope.begin(), scope.end());
    return out;
  }

  static std::vector<double> to_doubles(const torch::Tensor& t) {
    torch::Tensor c = t.detach().contiguous();
    const float* p = c.data_ptr<float>();
    return std::vector<double>(p, p + c.numel());
  }

  // ---- one optimizer step on the gradients the parameters hold ----

  // Clips the gradients to max_norm (global L2 norm), takes one Adam step with learning rate lr
  // on every parameter that has a gradient, and clears the gradients. Returns the norm before
  // clipping.
  double adam_step(double max_norm, double lr) {
    torch::NoGradGuard no_grad;
    // Global L2 norm over every gradient, accumulated in double in name order.
    double sum_sq = 0;
    for (auto& [name, p] : params) {
      const torch::Tensor& g = p.value.grad();
      if (g.defined()) sum_sq += g.to(torch::kFloat64).pow(2).sum().item<double>();
    }
    const double norm = std::sqrt(sum_sq);
    const double clip = max_norm / (norm + kClipEps);
    for (auto& [name, p] : params) {
      torch::Tensor g = p.value.grad();
      if (!g.defined()) continue;  // a head no trained experience reached: untouched
      if (clip < 1) g.mul_(clip);
      p.step += 1;
      p.exp_avg.mul_(kAdamBeta1).add_(g, 1 - kAdamBeta1);
      p.exp_avg_sq.mul_(kAdamBeta2).addcmul_(g, g, 1 - kAdamBeta2);
      const double bias1 = 1 - std::pow(kAdamBeta1, static_cast<double>(p.step));
      const double bias2 = 1 - std::pow(kAdamBeta2, static_cast<double>(p.step));
      torch::Tensor denom = (p.exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(kAdamEps);
      p.value.addcdiv_(p.exp_avg, denom, -lr / bias1);
    }
    for (auto& [name, p] : params) p.value.mutable_grad() = torch::Tensor();
    return norm;
  }

  // Per role (AgentRole order): -objective / count over rows[role], with gradients; 0 for a role
  // without rows. With unit advantages these are the mean cross-entropies.
  void role_losses(const std::vector<Experience>& batch, const std::vector<size_t> rows[3],
                   torch::Tensor out[3]) const {
    for (int role = 0; role < 3; ++role) {
      out[role] = torch::zeros({}, torch::kFloat32);
      if (rows[role].empty()) continue;
      torch::Tensor obj = role == 0   ? selection_objective(batch, rows[role])
                          : role == 1 ? policy_objective(batch, rows[role])
                                      : summary_objective(batch, rows[role]);
      out[role] = -obj / static_cast<double>(rows[role].size());
    }
  }

  // ---- objectives: sum over the listed experiences of advantage * log_prob, with gradients ----

  torch::Tensor policy_objective(const std::vector<Experience>& batch, const std::vector<size_t>& rows) const {
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<float> x(static_cast<size_t>(n) * input_dim), adv(n), mask(n * n_heads, 0.0f);
    std::vector<int64_t> choice(n * n_heads, 0);
    // Locked choices (PolicyInput::allowed), only when some row has a lock: a run without locks
    // computes exactly what it did before locks existed.
    bool any_lock = false;
    for (size_t i : rows) any_lock = any_lock || !batch[i].policy_input.allowed.empty();
    std::vector<float> locked(any_lock ? static_cast<size_t>(n) * choice_dim : 0, 0.0f);
    for (int64_t r = 0; r < n; ++r) {
      const Experience& e = batch[rows[r]];
      const PolicyInput& in = e.policy_input;
      fill_row(&x[r * input_dim], in.task, in.skill_hint, in.previous, in.feedback);
      for (size_t c = 0; c < in.allowed.size(); ++c) locked[r * choice_dim + c] = in.allowed[c] == 0 ? 1.0f : 0.0f;
      adv[r] = static_cast<float>(e.advantage);
      for (size_t a = 0; a < in.active_heads.size(); ++a) {
        choice[r * n_heads + in.active_heads[a]] = e.policy.choices[a];
        mask[r * n_heads + in.active_heads[a]] = 1;
      }
    }
    torch::Tensor logits = torch::linear(trunk(matrix(x, n, input_dim), AgentRole::kPolicy), policy_w, policy_b);
    if (any_lock) logits = logits.masked_fill(matrix(locked, n, choice_dim).ne(0), kMaskedScore);
    torch::Tensor choices = vector64(choice).view({n, n_heads});
    torch::Tensor masks = matrix(mask, n, n_heads);
    torch::Tensor log_prob = torch::zeros({n}, torch::kFloat32);
    for (int32_t k = 0; k < n_heads; ++k) {
      torch::Tensor ls = torch::log_softmax(logits.narrow(1, head_offsets[k], shape.head_sizes[k]), 1);
      torch::Tensor picked = ls.gather(1, choices.select(1, k).unsqueeze(1)).squeeze(1);
      log_prob = log_prob + picked * masks.select(1, k);
    }
    return (matrix(adv, 1, n).squeeze(0) * log_prob).sum();
  }

  // Plackett-Luce: each pick adds score(pick) - logsumexp(scores still left). Experiences that
  // picked nothing have log_prob 0 and add nothing.
  torch::Tensor selection_objective(const std::vector<Experience>& batch, const std::vector<size_t>& all_rows) const {
    std::vector<size_t> rows;
    for (size_t i : all_rows) {
      if (!batch[i].selection.picked.empty()) rows.push_back(i);
    }
    if (rows.empty()) return torch::zeros({}, torch::kFloat32);
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t K = shape.candidate_dim;
    int64_t max_len = 0, max_picks = 0, total = 0;
    for (size_t i : rows) {
      max_len = std::max<int64_t>(max_len, batch[i].selection_input.candidates.size());
      max_picks = std::max<int64_t>(max_picks, batch[i].selection.picked.size());
      total += batch[i].selection_input.candidates.size();
    }
    std::vector<float> x(static_cast<size_t>(n) * input_dim), adv(n), cand;
    cand.reserve(total * K);
    std::vector<int64_t> owner, pad_index(n * max_len, total);  // `total` names the pad slot
    for (int64_t r = 0; r < n; ++r) {
      const Experience& e = batch[rows[r]];
      fill_row(&x[r * input_dim], e.selection_input.task, {}, {}, {});
      adv[r] = static_cast<float>(e.advantage);
      const auto& cs = e.selection_input.candidates;
      for (size_t j = 0; j < cs.size(); ++j) {
        pad_index[r * max_len + j] = static_cast<int64_t>(owner.size());
        owner.push_back(r);
        cand.insert(cand.end(), cs[j].begin(), cs[j].end());
      }
    }
    torch::Tensor h = trunk(matrix(x, n, input_dim), AgentRole::kSelection);
    torch::Tensor scores = selection_head(h.index_select(0, vector64(owner)), matrix(cand, total, K));
    torch::Tensor padded = torch::cat({scores, torch::full({1}, kMaskedScore, torch::kFloat32)})
                               .index_select(0, vector64(pad_index))
                               .view({n, max_len});
    torch::Tensor log_prob = torch::zeros({n}, torch::kFloat32);
    for (int64_t t = 0; t < max_picks; ++t) {
      std::vector<float> left(n * max_len, 0.0f), valid(n, 0.0f);
      std::vector<int64_t> chosen(n, 0);
      for (int64_t r = 0; r < n; ++r) {
        const Experience& e = batch[rows[r]];
        const auto& picked = e.selection.picked;
        if (t < static_cast<int64_t>(picked.size())) {
          for (size_t j = 0; j < e.selection_input.candidates.size(); ++j) left[r * max_len + j] = 1;
          for (int64_t s = 0; s < t; ++s) left[r * max_len + picked[s]] = 0;
          chosen[r] = picked[t];
          valid[r] = 1;
        } else {
          // Nothing to pick: a row of one candidate picking it contributes exactly 0.
          left[r * max_len] = 1;
        }
      }
      torch::Tensor masked = padded.masked_fill(matrix(left, n, max_len).eq(0), kMaskedScore);
      torch::Tensor lse = torch::logsumexp(masked, {1});
      torch::Tensor got = padded.gather(1, vector64(chosen).unsqueeze(1)).squeeze(1);
      log_prob = log_prob + (got - lse) * matrix(valid, 1, n).squeeze(0);
    }
    return (matrix(adv, 1, n).squeeze(0) * log_prob).sum();
  }

  torch::Tensor summary_objective(const std::vector<Experience>& batch, const std::vector<size_t>& rows) const {
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<float> x(static_cast<size_t>(n) * input_dim), win(n * choice_dim), adv(n), include(n * n_heads, 0.0f),
        mask(n * n_heads, 0.0f);
    std::vector<int64_t> scope(n);
    for (int64_t r = 0; r < n; ++r) {
      const Experience& e = batch[rows[r]];
      const SummaryInput& in = e.summary_input;
      fill_row(&x[r * input_dim], in.task, {}, in.winning, in.feedback);
      std::copy(in.winning.begin(), in.winning.end(), &win[r * choice_dim]);
      adv[r] = static_cast<float>(e.advantage);
      scope[r] = e.summary.scope;
      for (size_t a = 0; a < in.active_heads.size(); ++a) {
        include[r * n_heads + in.active_heads[a]] = e.summary.include[a];
        mask[r * n_heads + in.active_heads[a]] = 1;
      }
    }
    torch::Tensor h = trunk(matrix(x, n, input_dim), AgentRole::kSummary);
    torch::Tensor z = include_head(h, matrix(win, n, choice_dim));
    torch::Tensor y = matrix(include, n, n_heads);
    torch::Tensor lp_include =
        (matrix(mask, n, n_heads) * (y * torch::log_sigmoid(z) + (1 - y) * torch::log_sigmoid(-z))).sum(1);
    torch::Tensor lp_scope =
        torch::log_softmax(torch::linear(h, scope_w, scope_b), 1).gather(1, vector64(scope).unsqueeze(1)).squeeze(1);
    return (matrix(adv, 1, n).squeeze(0) * (lp_include + lp_scope)).sum();
  }
};

Result<std::unique_ptr<SimBackbone>> SimBackbone::create(const SimBackboneConfig& config) {
  const BackboneShape& s = config.shape;
  if (s.task_dim < 0) return invalid_argument("task_dim = " + str(s.task_dim) + ": expected >= 0");
  if (s.feedback_dim < 0) {
    return invalid_argument("feedback_dim = " + str(s.feedback_dim) + ": expected >= 0");
  }
  if (s.candidate_dim < 0) {
    return invalid_argument("candidate_dim = " + str(s.candidate_dim) + ": expected >= 0");
  }
  if (s.head_sizes.empty()) return invalid_argument("head_sizes is empty: expected >= 1 head");
  for (size_t k = 0; k < s.head_sizes.size(); ++k) {
    if (s.head_sizes[k] < 1) {
      return invalid_argument("head_sizes[" + str(k) + "] = " + str(s.head_sizes[k]) + ": expected >= 1 choice");
    }
  }
  if (config.hidden < 1) return invalid_argument("hidden = " + str(config.hidden) + ": expected >= 1");
  if (config.role_dim < 1) {
    return invalid_argument("role_dim = " + str(config.role_dim) + ": expected >= 1");
  }
  if (!(config.lr > 0) || !std::isfinite(config.lr)) {
    return invalid_argument("lr = " + std::to_string(config.lr) + ": expected a finite value > 0");
  }
  if (!(config.max_grad_norm > 0)) {
    return invalid_argument("max_grad_norm = " + std::to_string(config.max_grad_norm) + ": expected > 0");
  }
  try {
    pin_torch_threads();
    auto net = std::make_unique<Net>();
    net->build(config);
    return std::unique_ptr<SimBackbone>(new SimBackbone(config, std::move(net)));
  } catch (const std::exception& e) {
    return internal_error(std::string("building the sim backbone: ") + e.what());
  }
}

SimBackbone::SimBackbone(const SimBackboneConfig& config, std::unique_ptr<Net> net)
    : config_(config), net_(std::move(net)) {}

SimBackbone::~SimBackbone() = default;

Result<PolicySample> SimBackbone::sample_policy(const PolicyInput& in, const RngKey& key, bool greedy) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(net_->check(in));
  std::vector<double> logits;
  VINCI_RETURN_IF_ERROR(torch_call("policy forward", [&] { logits = net_->policy_logits(in); }));
  // A locked choice's logit is -inf: it draws its noise like any other (the stream's positions do
  // not depend on the lock) and is never the argmax; its probability is 0.
  for (size_t c = 0; c < in.allowed.size(); ++c) {
    if (in.allowed[c] == 0) logits[c] = -std::numeric_limits<double>::infinity();
  }
  PolicySample out;
  for (int32_t k : in.active_heads) {
    const double* l = logits.data() + net_->head_offsets[k];
    const int32_t n = net_->shape.head_sizes[k];
    int32_t c;
    if (greedy) {
      c = noisy_argmax(l, n, nullptr);
    } else {
      Stream noise(key.with("head", int64_t{k}));
      c = noisy_argmax(l, n, &noise);
    }
    out.choices.push_back(c);
    out.log_prob += log_softmax_at(l, n, c);
  }
  return out;
}

Result<SelectionSample> SimBackbone::sample_selection(const SelectionInput& in, const RngKey& key, bool greedy) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(net_->check(in));
  const int32_t n = static_cast<int32_t>(in.candidates.size());
  const int32_t picks = std::min(in.max_pick, n);
  SelectionSample out;
  if (picks == 0) return out;
  std::vector<double> scores;
  VINCI_RETURN_IF_ERROR(torch_call("selection forward", [&] { scores = net_->selection_scores(in); }));
  std::vector<bool> left(n, true);
  for (int32_t t = 0; t < picks; ++t) {
    // One Gumbel per original candidate index, drawn for all of them, so candidate j's noise at
    // pick t is the same whatever was picked before.
    Stream noise(key.with("pick", int64_t{t}));
    int32_t best = -1;
    double best_value = 0, max_left = -std::numeric_limits<double>::infinity();
    for (int32_t j = 0; j < n; ++j) {
      double g = greedy ? 0.0 : noise.gumbel();
      if (!left[j]) continue;
      max_left = std::max(max_left, scores[j]);
      double v = scores[j] + g;
      if (best < 0 || v > best_value) {
        best = j;
        best_value = v;
      }
    }
    double sum = 0;
    for (int32_t j = 0; j < n; ++j) {
      if (left[j]) sum += std::exp(scores[j] - max_left);
    }
    out.log_prob += scores[best] - max_left - std::log(sum);
    out.picked.push_back(best);
    left[best] = false;
  }
  return out;
}

Result<SummarySample> SimBackbone::sample_summary(const SummaryInput& in, const RngKey& key, bool greedy) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(net_->check(in));
  std::vector<double> logits;
  VINCI_RETURN_IF_ERROR(torch_call("summary forward", [&] { logits = net_->summary_logits(in); }));
  SummarySample out;
  for (int32_t k : in.active_heads) {
    // Bernoulli(sigmoid(z)) as a 2-way Gumbel-max over (exclude: 0, include: z).
    const double two[2] = {0.0, logits[k]};
    int32_t c;
    if (greedy) {
      c = noisy_argmax(two, 2, nullptr);
    } else {
      Stream noise(key.with("include", int64_t{k}));
      c = noisy_argmax(two, 2, &noise);
    }
    out.include.push_back(static_cast<uint8_t>(c));
    out.log_prob += log_sigmoid(c == 1 ? logits[k] : -logits[k]);
  }
  const double* scope = logits.data() + net_->n_heads;
  if (greedy) {
    out.scope = noisy_argmax(scope, 2, nullptr);
  } else {
    Stream noise(key.with("scope", int64_t{0}));
    out.scope = noisy_argmax(scope, 2, &noise);
  }
  out.log_prob += log_softmax_at(scope, 2, out.scope);
  return out;
}

Result<UpdateStats> SimBackbone::update(const std::vector<Experience>& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> policy_rows, selection_rows, summary_rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Experience& e = batch[i];
    Status st;
    switch (e.role) {
      case AgentRole::kPolicy:
        if (!config_.train_policy) continue;
        st = net_->check(e.policy_input, e.policy);
        policy_rows.push_back(i);
        break;
      case AgentRole::kSelection:
        if (!config_.train_selection) continue;
        st = net_->check(e.selection_input, e.selection);
        selection_rows.push_back(i);
        break;
      case AgentRole::kSummary:
        if (!config_.train_summary) continue;
        st = net_->check(e.summary_input, e.summary);
        summary_rows.push_back(i);
        break;
      default: st = invalid_argument("unknown role " + str(static_cast<int>(e.role)));
    }
    if (st.ok() && !std::isfinite(e.advantage)) {
      st = invalid_argument("advantage is not finite");
    }
    if (!st.ok()) {
      return invalid_argument("update: experience " + str(i) + " (" + agent_role_name(e.role) + "): " + st.message());
    }
  }
  UpdateStats stats;
  stats.experiences = static_cast<int64_t>(policy_rows.size() + selection_rows.size() + summary_rows.size());
  if (stats.experiences == 0) return stats;  // nothing trained: no optimizer step at all

  VINCI_RETURN_IF_ERROR(torch_call("update", [&] {
    for (auto& [name, p] : net_->params) p.value.mutable_grad() = torch::Tensor();
    torch::Tensor objective = torch::zeros({}, torch::kFloat32);
    if (!policy_rows.empty()) objective = objective + net_->policy_objective(batch, policy_rows);
    if (!selection_rows.empty()) {
      objective = objective + net_->selection_objective(batch, selection_rows);
    }
    if (!summary_rows.empty()) objective = objective + net_->summary_objective(batch, summary_rows);
    torch::Tensor loss = -objective / static_cast<double>(stats.experiences);
    stats.loss = loss.item<double>();
    if (loss.requires_grad()) loss.backward();

    stats.grad_norm = net_->adam_step(config_.max_grad_norm, config_.lr);
  }));
  return stats;
}

namespace {

// Checks every experience of a supervised batch against the network, whatever its role.
template <typename Net>
Status check_supervised(const Net& net, const std::vector<Experience>& batch, std::vector<size_t> rows[3]) {
  for (size_t i = 0; i < batch.size(); ++i) {
    const Experience& e = batch[i];
    Status st;
    switch (e.role) {
      case AgentRole::kPolicy: st = net.check(e.policy_input, e.policy); break;
      case AgentRole::kSelection: st = net.check(e.selection_input, e.selection); break;
      case AgentRole::kSummary: st = net.check(e.summary_input, e.summary); break;
      default: st = invalid_argument("unknown role " + str(static_cast<int>(e.role)));
    }
    if (!st.ok()) {
      return invalid_argument("supervised batch: experience " + str(static_cast<int64_t>(i)) + " (" +
                              agent_role_name(e.role) + "): " + st.message());
    }
    rows[static_cast<int>(e.role)].push_back(i);
  }
  return Status();
}

// The batch with every advantage 1: the objectives then sum log-likelihoods.
std::vector<Experience> unit_advantages(const std::vector<Experience>& batch) {
  std::vector<Experience> out = batch;
  for (auto& e : out) e.advantage = 1.0;
  return out;
}

bool all_unit(const std::vector<Experience>& batch) {
  for (const auto& e : batch) {
    if (e.advantage != 1.0) return false;
  }
  return true;
}

}  // namespace

Result<RoleCrossEntropy> SimBackbone::cross_entropy(const std::vector<Experience>& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> rows[3];
  VINCI_RETURN_IF_ERROR(check_supervised(*net_, batch, rows));
  std::vector<Experience> copy;
  const std::vector<Experience>& b = all_unit(batch) ? batch : (copy = unit_advantages(batch));
  RoleCrossEntropy ce;
  VINCI_RETURN_IF_ERROR(torch_call("cross-entropy", [&] {
    torch::NoGradGuard no_grad;
    torch::Tensor losses[3];
    net_->role_losses(b, rows, losses);
    for (int role = 0; role < 3; ++role) {
      ce.count[role] = static_cast<int64_t>(rows[role].size());
      ce.mean[role] = losses[role].item<double>();
    }
  }));
  return ce;
}

Result<UpdateStats> SimBackbone::supervised_step(const std::vector<Experience>& batch, double lr) {
  if (!(lr > 0)) return invalid_argument("supervised step: lr = " + std::to_string(lr) + ": expected > 0");
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> rows[3];
  VINCI_RETURN_IF_ERROR(check_supervised(*net_, batch, rows));
  std::vector<Experience> copy;
  const std::vector<Experience>& b = all_unit(batch) ? batch : (copy = unit_advantages(batch));
  UpdateStats stats;
  stats.experiences = static_cast<int64_t>(batch.size());
  if (batch.empty()) return stats;
  VINCI_RETURN_IF_ERROR(torch_call("supervised step", [&] {
    for (auto& [name, p] : net_->params) p.value.mutable_grad() = torch::Tensor();
    torch::Tensor losses[3];
    net_->role_losses(b, rows, losses);
    torch::Tensor loss = losses[0] + losses[1] + losses[2];
    stats.loss = loss.item<double>();
    if (loss.requires_grad()) loss.backward();
    stats.grad_norm = net_->adam_step(config_.max_grad_norm, lr);
  }));
  return stats;
}

Status SimBackbone::reset_optimizer() {
  std::lock_guard<std::mutex> lock(mu_);
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : net_->params) {
    p.exp_avg.zero_();
    p.exp_avg_sq.zero_();
    p.step = 0;
  }
  return Status();
}

namespace {

// A fresh float32 tensor of dims from little-endian floats.
torch::Tensor float_tensor(std::string_view bytes, const std::vector<int64_t>& dims) {
  torch::Tensor t = torch::empty(dims, torch::kFloat32);
  ByteReader r(bytes);
  VINCI_ASSERT_MSG(static_cast<int64_t>(bytes.size() / 4) == t.numel() && r.f32s(t.data_ptr<float>(), bytes.size() / 4),
                   "checkpoint values do not fill their tensor");  // sized by the parse
  return t;
}

}  // namespace

Result<Digest> SimBackbone::checkpoint_digest(std::string_view bytes) {
  VINCI_ASSIGN_OR_RETURN(SimCheckpoint c, parse_sim_checkpoint(bytes));
  SimParameterHasher h;
  for (const auto& p : c.params) h.add(p.name, p.dims, p.values);
  return h.finish();
}

Digest SimBackbone::parameter_digest() const {
  std::lock_guard<std::mutex> lock(mu_);
  SimParameterHasher h;
  for (const auto& [name, p] : net_->params) h.add(name, p.value.sizes().vec(), float_bytes(p.value));
  return h.finish();
}

std::string SimBackbone::save_parameters() const {
  std::lock_guard<std::mutex> lock(mu_);
  const BackboneShape& s = net_->shape;
  const int32_t fields[kSimCheckpointFields] = {s.task_dim, s.feedback_dim, s.candidate_dim, net_->hidden,
                                                net_->role_dim};
  SimCheckpointWriter w(fields, s.head_sizes, static_cast<uint32_t>(net_->params.size()));
  for (const auto& [name, p] : net_->params) {
    torch::Tensor v = contiguous_values(p.value), m = contiguous_values(p.exp_avg), q = contiguous_values(p.exp_avg_sq);
    w.add(name, p.value.sizes().vec(), v.data_ptr<float>(), p.step, m.data_ptr<float>(), q.data_ptr<float>());
  }
  return w.take();
}

Status SimBackbone::load_parameters(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_ASSIGN_OR_RETURN(SimCheckpoint c, parse_sim_checkpoint(bytes));
  const BackboneShape& s = net_->shape;
  const int32_t want[kSimCheckpointFields] = {s.task_dim, s.feedback_dim, s.candidate_dim, net_->hidden,
                                              net_->role_dim};
  for (int i = 0; i < kSimCheckpointFields; ++i) {
    if (c.fields[i] != want[i]) {
      return mismatch(std::string("sim backbone checkpoint: ") + kSimCheckpointFieldNames[i] + " is " +
                      str(c.fields[i]) + ", this backbone has " + str(want[i]));
    }
  }
  if (c.head_sizes.size() != s.head_sizes.size()) {
    return mismatch("sim backbone checkpoint: " + str(static_cast<int64_t>(c.head_sizes.size())) +
                    " heads, this backbone has " + str(static_cast<int64_t>(s.head_sizes.size())));
  }
  for (size_t k = 0; k < c.head_sizes.size(); ++k) {
    if (c.head_sizes[k] != s.head_sizes[k]) {
      return mismatch("sim backbone checkpoint: head_sizes[" + str(static_cast<int64_t>(k)) + "] is " +
                      str(c.head_sizes[k]) + ", this backbone has " + str(s.head_sizes[k]));
    }
  }
  if (c.params.size() != net_->params.size()) {
    return mismatch("sim backbone checkpoint: " + str(static_cast<int64_t>(c.params.size())) +
                    " parameters, this backbone has " + str(static_cast<int64_t>(net_->params.size())));
  }
  std::map<std::string, Net::Param> loaded;
  try {
    auto got = c.params.begin();
    for (const auto& [name, p] : net_->params) {
      const SimCheckpoint::Param& q = *got++;
      if (q.name != name) {
        return mismatch("sim backbone checkpoint: parameter \"" + q.name + "\" where \"" + name + "\" was expected");
      }
      if (q.dims != p.value.sizes().vec()) {
        auto shape_text = [](const std::vector<int64_t>& v) {
          std::string t = "[";
          for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + str(v[i]);
          return t + "]";
        };
        return mismatch("sim backbone checkpoint: parameter " + name + " has shape " + shape_text(q.dims) +
                        ", this backbone has " + shape_text(p.value.sizes().vec()));
      }
      Net::Param& l = loaded[name];
      l.value = float_tensor(q.values, q.dims);
      l.exp_avg = float_tensor(q.exp_avg, q.dims);
      l.exp_avg_sq = float_tensor(q.exp_avg_sq, q.dims);
      l.step = q.step;
    }
    // Copy in place: the named tensors (trunk1_w, ...) alias the map's values.
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : net_->params) {
      const Net::Param& q = loaded[name];
      p.value.copy_(q.value);
      p.exp_avg.copy_(q.exp_avg);
      p.exp_avg_sq.copy_(q.exp_avg_sq);
      p.step = q.step;
    }
  } catch (const std::exception& e) {
    return internal_error(std::string("sim backbone checkpoint load: ") + e.what());
  }
  return Status();
}

Result<std::vector<double>> SimBackbone::policy_logits(const PolicyInput& in) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(net_->check(in));
  std::vector<double> out;
  VINCI_RETURN_IF_ERROR(torch_call("policy forward", [&] { out = net_->policy_logits(in); }));
  return out;
}

Result<std::vector<double>> SimBackbone::selection_scores(const SelectionInput& in) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(net_->check(in));
  std::vector<double> out;
  VINCI_RETURN_IF_ERROR(torch_call("selection forward", [&] { out = net_->selection_scores(in); }));
  return out;
}

Result<std::vector<double>> SimBackbone::summary_logits(const SummaryInput& in) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_RETURN_IF_ERROR(net_->check(in));
  std::vector<double> all;
  VINCI_RETURN_IF_ERROR(torch_call("summary forward", [&] { all = net_->summary_logits(in); }));
  std::vector<double> out;
  for (int32_t k : in.active_heads) out.push_back(all[k]);
  out.push_back(all[net_->n_heads]);
  out.push_back(all[net_->n_heads + 1]);
  return out;
}

}  // namespace vinci
