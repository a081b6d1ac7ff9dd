#include "gpu/executor.h"

#include <cmath>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/rng.h"
#include "gpu/expr.h"
#include "gpu/shapes.h"

namespace vinci {

struct TaskInstance::Impl {
  const Task* task = nullptr;
  SizeMap sizes;
  torch::Device device{torch::kCPU};
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  std::map<std::string, torch::Tensor> weight_by_name;
  std::map<std::string, const ModuleSpec*> modules;
};

namespace {

// FP32 tensors in the type an op computes in (FP64 for the float64 reference, BF16 or FP16 for a
// 16-bit library step); indices and the like kept as they are.
at::Tensor as_compute(const at::Tensor& t, torch::ScalarType compute) {
  return compute != torch::kFloat32 && t.defined() && t.scalar_type() == torch::kFloat32 ? t.to(compute) : t;
}

torch::ScalarType compute_type(StepType type) {
  switch (type) {
    case StepType::kFloat32: return torch::kFloat32;
    case StepType::kBFloat16: return torch::kBFloat16;
    case StepType::kFloat16: return torch::kFloat16;
  }
  return torch::kFloat32;
}

}  // namespace

StepType step_type(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return StepType::kBFloat16;
    case Precision::kFp16: return StepType::kFloat16;
    case Precision::kFp32:
    case Precision::kTf32: return StepType::kFloat32;
  }
  return StepType::kFloat32;
}

namespace {

std::string op_where(const Task& t, const OpSpec& op) {
  return t.source_file + ": task '" + t.id + "': op '" + op.op + "'";
}

Result<int64_t> eval_size(const std::string& e, const SizeMap& sizes) {
  ExprEnv env;
  env.symbols = sizes;
  return eval_expr(e, env);
}

// PyTorch's kaiming_uniform_(a = sqrt(5)) as nn.Linear/nn.ConvNd reset_parameters call it:
// bound = sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)). Computed in double in the
// same order as torch/nn/init.py so the bound (and so every weight) is bit-identical.
double kaiming_bound(int64_t fan_in) {
  double a = std::sqrt(5.0);
  double gain = std::sqrt(2.0 / (1 + a * a));
  double std_dev = gain / std::sqrt(static_cast<double>(fan_in));
  return std::sqrt(3.0) * std_dev;
}

int64_t fan_in_of(const torch::Tensor& w) {
  int64_t receptive = 1;
  for (int64_t i = 2; i < w.dim(); ++i) receptive *= w.size(i);
  return w.size(1) * receptive;
}

// Swin's constant buffers, computed as its constructors compute them (the same ops in the same
// order, so the values are bit-identical).
Result<torch::Tensor> make_buffer(const Task& task, const ModuleSpec& m, const SizeMap& sizes) {
  std::string where = task.source_file + ": task '" + task.id + "': module '" + m.name + "'";
  auto size = [&](const char* key) -> Result<int64_t> {
    VINCI_ASSIGN_OR_RETURN(std::string e, attr_expr(m.attrs, key, where));
    return eval_size(e, sizes);
  };
  VINCI_ASSIGN_OR_RETURN(int64_t w, size("window"));
  if (w < 2) return invalid_argument(where + ": key 'window': expected at least 2, found " + std::to_string(w));
  std::string init = m.attrs.value("init", std::string());
  if (init == "relative_coords_log") {
    // Relative offsets -(W-1)..W-1 on both axes, [1, 2W-1, 2W-1, 2], divided by W-1, times 8,
    // then sign(t) * log2(|t| + 1) / log2(8).
    torch::Tensor r = torch::arange(-(w - 1), w, torch::TensorOptions().dtype(torch::kFloat32));
    torch::Tensor t = torch::stack(torch::meshgrid({r, r}, "ij")).permute({1, 2, 0}).contiguous().unsqueeze(0);
    t.div_(w - 1);
    t.mul_(8);
    return torch::sign(t) * torch::log2(torch::abs(t) + 1.0) / 3.0;
  }
  if (init == "shifted_window_mask") {
    // Label the nine regions a cyclic shift by `shift` brings together, partition the label map
    // into W x W windows, and give every (query, key) pair of different labels -100, the rest 0.
    VINCI_ASSIGN_OR_RETURN(int64_t res, size("resolution"));
    VINCI_ASSIGN_OR_RETURN(int64_t shift, size("shift"));
    if (shift <= 0 || shift >= w || res % w != 0)
      return invalid_argument(
          where + ": expected 0 < shift < window and resolution a multiple of window, found shift " +
          std::to_string(shift) + ", window " + std::to_string(w) + ", resolution " + std::to_string(res));
    torch::Tensor img = torch::zeros({1, res, res, 1});
    const int64_t cuts[4] = {0, res - w, res - shift, res};
    float label = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) img.slice(1, cuts[i], cuts[i + 1]).slice(2, cuts[j], cuts[j + 1]).fill_(label++);
    torch::Tensor win =
        img.view({1, res / w, w, res / w, w, 1}).permute({0, 1, 3, 2, 4, 5}).contiguous().view({-1, w * w});
    torch::Tensor d = win.unsqueeze(1) - win.unsqueeze(2);
    return d.masked_fill(d != 0, -100.0).masked_fill(d == 0, 0.0);
  }
  return invalid_argument(where + ": key 'init': expected relative_coords_log or shifted_window_mask, found '" + init +
                          "'");
}

Status build_weights(TaskInstance::Impl* impl, at::Generator& gen) {
  const Task& task = *impl->task;
  VINCI_ASSIGN_OR_RETURN(std::vector<WeightSpec> specs, weight_specs(task));
  std::map<std::string, torch::Tensor> made;
  auto cpu = torch::TensorOptions().dtype(torch::kFloat32);
  for (const auto& spec : specs) {
    VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shape, eval_shape(spec.shape, impl->sizes));
    made[spec.name] = torch::empty(shape, cpu);
  }
  // Draw in construction order, module by module, as the Python constructors do.
  for (const auto& m : task.modules) {
    auto w = [&](const std::string& p) -> torch::Tensor& { return made[m.name + "." + p]; };
    if (m.kind() == ModuleType::kLinear || is_conv_module(m.kind())) {
      torch::Tensor& weight = w("weight");
      int64_t fan_in = fan_in_of(weight);
      double b = kaiming_bound(fan_in);
      weight.uniform_(-b, b, gen);
      if (attr_bool_or(m.attrs, "bias", true)) {
        double bb = 1.0 / std::sqrt(static_cast<double>(fan_in));
        w("bias").uniform_(-bb, bb, gen);
      }
    } else if (m.kind() == ModuleType::kBatchNorm) {
      w("weight").fill_(1);
      w("bias").fill_(0);
      w("running_mean").fill_(0);
      w("running_var").fill_(1);
    } else if (m.kind() == ModuleType::kLayerNorm || m.kind() == ModuleType::kGroupNorm) {
      w("weight").fill_(1);
      w("bias").fill_(0);
    } else if (m.kind() == ModuleType::kParameter) {
      torch::Tensor& p = made[m.name];
      std::string init = m.attrs.value("init", std::string("randn"));
      double scale = attr_double_or(m.attrs, "scale", 1.0);
      if (init == "randn")
        p.normal_(0, 1, gen);
      else if (init == "rand")
        p.uniform_(0, 1, gen);
      else if (init == "ones")
        p.fill_(1);
      else if (init == "zeros")
        p.fill_(0);
      else if (init == "log_full")
        p.fill_(attr_double_or(m.attrs, "value", 1.0)).log_();  // torch.log(v * ones)
      else
        return invalid_argument(task.source_file + ": task '" + task.id + "': module '" + m.name +
                                "' key 'init': expected randn|rand|ones|zeros|log_full, found '" + init + "'");
      if (scale != 1.0) p.mul_(scale);  // torch.randn(shape) * scale, as KernelBench writes it
      if (m.attrs.contains("scale_rsqrt")) {
        // (1 / math.sqrt(n)) * torch.randn(shape): the factor computed in double from a size.
        VINCI_ASSIGN_OR_RETURN(std::string e, attr_expr(m.attrs, "scale_rsqrt", task.id));
        VINCI_ASSIGN_OR_RETURN(int64_t v, eval_size(e, impl->sizes));
        p.mul_(1.0 / std::sqrt(static_cast<double>(v)));
      }
    } else if (m.kind() == ModuleType::kBuffer) {
      VINCI_ASSIGN_OR_RETURN(torch::Tensor b, make_buffer(task, m, impl->sizes));
      made[m.name] = b;
    } else if (m.kind() == ModuleType::kLstm || m.kind() == ModuleType::kGru) {
      // reset_parameters: stdv = 1 / sqrt(hidden) in double; every parameter U(-stdv, stdv) in
      // registration order (weight_ih, weight_hh, bias_ih, bias_hh per layer and direction).
      VINCI_ASSIGN_OR_RETURN(std::string hidden, attr_expr(m.attrs, "hidden", task.id));
      VINCI_ASSIGN_OR_RETURN(int64_t h, eval_size(hidden, impl->sizes));
      double stdv = 1.0 / std::sqrt(static_cast<double>(h));
      for (const auto& spec : specs)
        if (spec.module == m.name) made[spec.name].uniform_(-stdv, stdv, gen);
    } else if (m.kind() == ModuleType::kMha) {
      // nn.MultiheadAttention: out_proj = Linear(E, E) draws in its constructor, then
      // _reset_parameters: xavier_uniform_(in_proj_weight), in_proj_bias = 0, out_proj.bias = 0.
      torch::Tensor& ow = w("out_proj.weight");
      int64_t e = ow.size(1);
      double b = kaiming_bound(e);
      ow.uniform_(-b, b, gen);
      double bb = 1.0 / std::sqrt(static_cast<double>(e));
      w("out_proj.bias").uniform_(-bb, bb, gen);
      torch::Tensor& ipw = w("in_proj_weight");
      double xb = std::sqrt(3.0) * (1.0 * std::sqrt(2.0 / static_cast<double>(ipw.size(0) + ipw.size(1))));
      ipw.uniform_(-xb, xb, gen);
      w("in_proj_bias").fill_(0);
      w("out_proj.bias").fill_(0);
    }
  }
  // A constructor's own re-initialisation after building every module (MobileNetV2's loop over
  // self.modules()): `reinit` draws again, in module order, after all the default draws.
  for (const auto& m : task.modules) {
    if (!m.attrs.contains("reinit")) continue;
    std::string where = task.source_file + ": task '" + task.id + "': module '" + m.name + "' key 'reinit'";
    auto w = [&](const std::string& p) -> torch::Tensor& { return made[m.name + "." + p]; };
    std::string how = m.attrs["reinit"].is_string() ? m.attrs["reinit"].get<std::string>() : "";
    bool conv = is_conv_module(m.kind()) && !is_transposed_conv_module(m.kind());
    if (how == "kaiming_normal_fan_out" && conv) {
      // nn.init.kaiming_normal_(w, mode='fan_out'): gain sqrt(2), std = gain / sqrt(fan_out).
      torch::Tensor& weight = w("weight");
      int64_t fan_out = weight.size(0);
      for (int64_t d = 2; d < weight.dim(); ++d) fan_out *= weight.size(d);
      weight.normal_(0, std::sqrt(2.0) / std::sqrt(static_cast<double>(fan_out)), gen);
    } else if (how == "normal" && m.kind() == ModuleType::kLinear) {
      w("weight").normal_(0, attr_double_or(m.attrs, "reinit_std", 1.0), gen);
    } else {
      return invalid_argument(where +
                              ": expected kaiming_normal_fan_out (conv) or normal (linear, with reinit_std), found " +
                              m.attrs["reinit"].dump());
    }
    if (attr_bool_or(m.attrs, "bias", true)) w("bias").fill_(0);
  }
  for (const auto& spec : specs) {
    torch::Tensor t = made[spec.name].to(impl->device);
    impl->weights.emplace_back(spec.name, t);
    impl->weight_by_name[spec.name] = t;
  }
  return Status();
}

std::vector<int64_t> to_vec(c10::IntArrayRef a) { return std::vector<int64_t>(a.begin(), a.end()); }

}  // namespace

InputDistribution trial_distribution(int64_t trial) {
  constexpr InputDistribution kOrder[] = {InputDistribution::kUniform01, InputDistribution::kSigned,
                                          InputDistribution::kHeavyTailed};
  return kOrder[trial % 3];
}

const char* distribution_name(InputDistribution d) {
  switch (d) {
    case InputDistribution::kUniform01: return "uniform01";
    case InputDistribution::kSigned: return "signed";
    case InputDistribution::kHeavyTailed: return "heavy_tailed";
  }
  return "?";
}

Result<InputDistribution> parse_distribution(const std::string& name) {
  for (auto d : {InputDistribution::kUniform01, InputDistribution::kSigned, InputDistribution::kHeavyTailed})
    if (name == distribution_name(d)) return d;
  return invalid_argument("input distribution: expected uniform01, signed or heavy_tailed, found '" + name + "'");
}

uint64_t input_seed(uint64_t root_seed, const std::string& task_id, int64_t trial, InputDistribution dist) {
  Stream s(RngKey::root(root_seed)
               .with("purpose", "inputs")
               .with("task", task_id)
               .with("trial", trial)
               .with("dist", distribution_name(dist)));
  // torch's mt19937 takes the low 32 bits of the seed; keep them all random.
  return s.next_u64();
}

TaskInstance::TaskInstance(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TaskInstance::TaskInstance(TaskInstance&&) noexcept = default;
TaskInstance& TaskInstance::operator=(TaskInstance&&) noexcept = default;
TaskInstance::~TaskInstance() = default;

const Task& TaskInstance::task() const { return *impl_->task; }
const SizeMap& TaskInstance::sizes() const { return impl_->sizes; }
const std::vector<std::pair<std::string, at::Tensor>>& TaskInstance::weights() const { return impl_->weights; }

Result<TaskInstance> TaskInstance::create(const Task& task, SizeName size, const std::string& device,
                                          uint64_t weight_seed) {
  auto it = task.sizes.find(size_name(size));
  if (it == task.sizes.end()) return invalid_argument("task '" + task.id + "' has no size '" + size_name(size) + "'");
  return create_at(task, it->second, device, weight_seed);
}

Result<TaskInstance> TaskInstance::create_at(const Task& task, const SizeMap& sizes, const std::string& device,
                                             uint64_t weight_seed) {
  auto impl = std::make_unique<Impl>();
  impl->task = &task;
  impl->sizes = sizes;
  try {
    impl->device = torch::Device(device);
  } catch (const std::exception& e) {
    return invalid_argument("device '" + device + "': " + e.what());
  }
  for (const auto& m : task.modules) impl->modules[m.name] = &m;
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(weight_seed);
  VINCI_RETURN_IF_ERROR(build_weights(impl.get(), gen));
  return TaskInstance(std::move(impl));
}

namespace {

// Draws a task's inputs: gen is a CPU generator (KernelBench-identical draws, moved to the device
// after) or undefined, for the device's default generator, seeded by the caller.
Result<std::vector<at::Tensor>> draw_inputs(const Task& task, const SizeMap& sizes, InputDistribution dist,
                                            const c10::optional<at::Generator>& gen, torch::Device where,
                                            torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> out;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(where);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(where);
  for (const auto& in : task.inputs) {
    VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shape, eval_shape(in.shape, sizes));
    torch::Tensor t;
    if (in.domain == InputDomain::kIndex) {
      VINCI_ASSIGN_OR_RETURN(int64_t classes, eval_size(in.classes, sizes));
      t = torch::randint(0, classes, shape, gen, i64);
    } else if (in.domain == InputDomain::kSign) {
      t = torch::randint(0, 2, shape, gen, f32) * 2 - 1;
    } else {
      // KernelBench draws the scale before the tensor it multiplies (torch.rand(()) first).
      torch::Tensor scale;
      if (in.scaled) scale = torch::rand({}, gen, f32);
      switch (dist) {
        case InputDistribution::kUniform01: t = torch::rand(shape, gen, f32); break;
        case InputDistribution::kSigned: t = torch::rand(shape, gen, f32) * 2 - 1; break;
        case InputDistribution::kHeavyTailed: {
          torch::Tensor z = torch::randn(shape, gen, f32);
          t = z * torch::exp(torch::randn(shape, gen, f32));
          break;
        }
      }
      if (in.scaled) t = t * scale;
      if (in.domain == InputDomain::kPositive && dist != InputDistribution::kUniform01) t = t.abs() + 1e-3;
      if (in.domain == InputDomain::kProbability) t = torch::softmax(t, -1);
      if (in.domain == InputDomain::kSymmetric) t = (t + t.t()) / 2;
      if (in.domain == InputDomain::kUpperTriangular) t = torch::triu(t);
      if (in.domain == InputDomain::kLowerTriangular) t = torch::tril(t);
    }
    out.push_back(t.to(device));
  }
  return out;
}

}  // namespace

Result<std::vector<at::Tensor>> TaskInstance::make_inputs(InputDistribution dist, uint64_t seed) const {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return draw_inputs(*impl_->task, impl_->sizes, dist, gen, torch::kCPU, impl_->device);
}

Result<std::vector<at::Tensor>> TaskInstance::make_inputs_on_device(InputDistribution dist, uint64_t seed) const {
  if (!impl_->device.is_cuda()) return make_inputs(dist, seed);
  torch::cuda::manual_seed(seed);
  return draw_inputs(*impl_->task, impl_->sizes, dist, c10::nullopt, impl_->device, impl_->device);
}

Result<int64_t> TaskInstance::input_elements() const {
  int64_t n = 0;
  for (const auto& in : impl_->task->inputs) {
    VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shape, eval_shape(in.shape, impl_->sizes));
    int64_t e = 1;
    for (int64_t d : shape) e *= d;
    n += e;
  }
  return n;
}

Result<std::vector<at::Tensor>> TaskInstance::run_op(const OpSpec& op, const std::vector<at::Tensor>& in,
                                                     StepType type) const {
  torch::ScalarType compute = compute_type(type);
  if (compute == torch::kFloat32) return run_op_in(op, in, compute);
  std::vector<at::Tensor> narrowed;
  for (const auto& t : in) narrowed.push_back(as_compute(t, compute));
  VINCI_ASSIGN_OR_RETURN(std::vector<at::Tensor> out, run_op_in(op, narrowed, compute));
  for (auto& t : out)
    if (t.scalar_type() == compute) t = t.to(torch::kFloat32);
  return out;
}

namespace {

// One op's run on the reference's tensors: what each family's rules read.
struct OpCall {
  const OpSpec& op;
  const std::vector<at::Tensor>& in;
  const ModuleSpec* mod;  // null when the op has none
  const std::string& where;
  const SizeMap& sizes;
  const std::map<std::string, torch::Tensor>& weights;  // by "module.name"
  torch::ScalarType compute;
  // The op's module's weight by name, in the compute type (undefined when it has none).
  torch::Tensor W(const std::string& p) const {
    auto it = weights.find(op.module + "." + p);
    return it == weights.end() ? torch::Tensor() : as_compute(it->second, compute);
  }
  const at::Tensor& x() const { return in.at(0); }
  const auto& attrs() const { return op.attrs; }
  int64_t dim() const { return attr_int_or(op.attrs, "dim", -1); }
  bool keepdim() const { return attr_bool_or(op.attrs, "keepdim", false); }
};

using Outs = Result<std::vector<at::Tensor>>;

Outs one(torch::Tensor t) { return std::vector<at::Tensor>{std::move(t)}; }

Outs not_in_family(const OpCall& c) {
  return internal_error(c.where + ": op not implemented by the executor's family for it");
}

// Unary, scalar and binary elementwise ops.
Outs run_elementwise(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const auto& a = c.attrs();
  switch (c.op.code()) {
    case OpCode::kRelu: return one(torch::relu(x));
    case OpCode::kLeakyRelu: return one(torch::leaky_relu(x, attr_double_or(a, "negative_slope", 0.01)));
    case OpCode::kSigmoid: return one(torch::sigmoid(x));
    case OpCode::kTanh: return one(torch::tanh(x));
    case OpCode::kGelu: return one(torch::gelu(x));
    case OpCode::kSilu: return one(torch::silu(x));
    case OpCode::kElu: return one(torch::elu(x, attr_double_or(a, "alpha", 1.0)));
    case OpCode::kSelu: return one(torch::selu(x));
    case OpCode::kSoftplus: return one(torch::softplus(x));
    case OpCode::kSoftsign: return one(x / (1 + torch::abs(x)));
    case OpCode::kHardsigmoid: return one(torch::hardsigmoid(x));
    case OpCode::kHardswish: return one(torch::hardswish(x));
    case OpCode::kHardtanh: return one(torch::hardtanh(x, attr_double_or(a, "min", -1), attr_double_or(a, "max", 1)));
    case OpCode::kMish: return one(torch::mish(x));
    case OpCode::kExp: return one(torch::exp(x));
    case OpCode::kLog: return one(torch::log(x));
    case OpCode::kAbs: return one(torch::abs(x));
    case OpCode::kSquare: return one(x * x);
    case OpCode::kSqrt: return one(torch::sqrt(x));
    case OpCode::kClamp: {
      double lo = attr_double_or(a, "min", -std::numeric_limits<double>::infinity());
      double hi = attr_double_or(a, "max", std::numeric_limits<double>::infinity());
      return one(torch::clamp(x, lo, hi));
    }
    case OpCode::kMulScalar: return one(x * attr_double_or(a, "value", 1.0));
    case OpCode::kAddScalar: return one(x + attr_double_or(a, "value", 0.0));
    case OpCode::kDivScalar: return one(x / attr_double_or(a, "value", 1.0));
    case OpCode::kAdd: return one(x + c.in.at(1));
    case OpCode::kSub: return one(x - c.in.at(1));
    case OpCode::kMul: return one(x * c.in.at(1));
    case OpCode::kDiv: return one(x / c.in.at(1));
    default: return not_in_family(c);
  }
}

// Reductions, scans and the row ops along `dim`.
Outs run_reduction(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const auto& a = c.attrs();
  const int64_t dim = c.dim();
  const bool keepdim = c.keepdim();
  switch (c.op.code()) {
    case OpCode::kSum: return one(x.sum(dim, keepdim));
    case OpCode::kMean: return one(x.mean(dim, keepdim));
    case OpCode::kAmax: return one(x.amax(dim, keepdim));
    case OpCode::kAmin: return one(x.amin(dim, keepdim));
    case OpCode::kLogsumexp: return one(torch::logsumexp(x, dim, keepdim));
    case OpCode::kNormL2: return one(x.norm(2, {dim}, keepdim));
    case OpCode::kSoftmax: return one(torch::softmax(x, dim));
    case OpCode::kLogSoftmax: return one(torch::log_softmax(x, dim));
    case OpCode::kArgmax: return one(torch::argmax(x, dim, keepdim));
    case OpCode::kArgmin: return one(torch::argmin(x, dim, keepdim));
    case OpCode::kCumsum: return one(x.cumsum(dim));
    case OpCode::kCumprod: return one(x.cumprod(dim));
    case OpCode::kCumsumReverse: return one(torch::cumsum(x.flip({dim}), dim).flip({dim}));
    case OpCode::kCumsumExclusive: {
      // KernelBench's: cat(zeros of one slice, cumsum of all but the last slice) along dim.
      torch::Tensor cs = torch::cumsum(x.narrow(dim, 0, x.size(dim) - 1), dim);
      return one(torch::cat({torch::zeros_like(x.select(dim, 0).unsqueeze(dim)), cs}, dim));
    }
    case OpCode::kFrobeniusNorm: return one(torch::frobenius_norm(x, {}, false));  // torch.norm(x, p='fro')
    case OpCode::kNormalize:
      // F.normalize(x, p=2, dim): x / max(||x||_2, eps), written as PyTorch's Python writes it.
      return one(x / x.norm(2, {dim}, true).clamp_min(attr_double_or(a, "eps", 1e-12)).expand_as(x));
    default: return not_in_family(c);
  }
}

// The normalisation layers (their weights from the module).
Outs run_normalization(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const auto& a = c.attrs();
  switch (c.op.code()) {
    case OpCode::kRmsNorm: {
      // KernelBench's RMSNorm: x / sqrt(mean(x^2, dim, keepdim) + eps).
      double eps = attr_double_or(a, "eps", 1e-5);
      return one(x / torch::sqrt((x * x).mean(c.dim(), true) + eps));
    }
    case OpCode::kLayerNorm: {
      torch::Tensor w = c.W("weight");
      return one(torch::layer_norm(x, to_vec(w.sizes()), w, c.W("bias"), attr_double_or(c.mod->attrs, "eps", 1e-5)));
    }
    case OpCode::kBatchNorm: {
      // Training mode: batch statistics. The running buffers are updated as PyTorch does, on
      // copies, so running the reference twice gives the same weights and the same output.
      torch::Tensor rm = c.W("running_mean").clone(), rv = c.W("running_var").clone();
      return one(torch::batch_norm(x, c.W("weight"), c.W("bias"), rm, rv, true,
                                   attr_double_or(c.mod->attrs, "momentum", 0.1),
                                   attr_double_or(c.mod->attrs, "eps", 1e-5), false));
    }
    case OpCode::kGroupNorm: {
      VINCI_ASSIGN_OR_RETURN(int64_t groups, attr_int(c.mod->attrs, "groups", c.where));
      return one(torch::group_norm(x, groups, c.W("weight"), c.W("bias"), attr_double_or(c.mod->attrs, "eps", 1e-5)));
    }
    case OpCode::kInstanceNorm:
      // F.instance_norm as nn.InstanceNorm1d/2d/3d calls it by default (affine off, no running
      // statistics): each (sample, channel) normalised by its own mean and biased variance.
      return one(torch::instance_norm(x, {}, {}, {}, {}, true, 0.1, attr_double_or(a, "eps", 1e-5),
                                      at::globalContext().userEnabledCuDNN()));
    default: return not_in_family(c);
  }
}

// Convolutions and transposed convolutions of rank 1 to 3 (their weights from the module).
Outs run_conv(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const OpCode n = c.op.code();
  size_t rank = static_cast<size_t>(op_spatial_rank(n));
  const auto& ma = c.mod->attrs;
  auto s = attr_ints_or(ma, "stride", rank, 1);
  auto p = attr_ints_or(ma, "padding", rank, 0);
  auto d = attr_ints_or(ma, "dilation", rank, 1);
  auto opad = attr_ints_or(ma, "output_padding", rank, 0);
  int64_t g = 1;  // groups: an integer or a size expression
  if (ma.contains("groups")) {
    VINCI_ASSIGN_OR_RETURN(std::string ge, attr_expr(ma, "groups", c.where));
    VINCI_ASSIGN_OR_RETURN(g, eval_size(ge, c.sizes));
  }
  torch::Tensor w = c.W("weight"), b = c.W("bias");
  switch (n) {
    case OpCode::kConv1d: return one(torch::conv1d(x, w, b, s, p, d, g));
    case OpCode::kConv2d: return one(torch::conv2d(x, w, b, s, p, d, g));
    case OpCode::kConv3d: return one(torch::conv3d(x, w, b, s, p, d, g));
    case OpCode::kConvTranspose1d: return one(torch::conv_transpose1d(x, w, b, s, p, opad, g, d));
    case OpCode::kConvTranspose2d: return one(torch::conv_transpose2d(x, w, b, s, p, opad, g, d));
    case OpCode::kConvTranspose3d: return one(torch::conv_transpose3d(x, w, b, s, p, opad, g, d));
    default: return not_in_family(c);
  }
}

// Max, average and adaptive average pooling.
Outs run_pool(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const auto& a = c.attrs();
  const OpCode n = c.op.code();
  if (n == OpCode::kAdaptiveAvgPool2d || n == OpCode::kAdaptiveAvgPool3d) {
    size_t rank = n == OpCode::kAdaptiveAvgPool2d ? 2 : 3;
    VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> o, attr_ints(a, "output", rank, c.where));
    return one(rank == 2 ? torch::adaptive_avg_pool2d(x, o) : torch::adaptive_avg_pool3d(x, o));
  }
  size_t rank = static_cast<size_t>(op_spatial_rank(n));
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(a, "kernel", rank, c.where));
  auto s = attr_ints_or(a, "stride", rank, 0);
  for (size_t i = 0; i < rank; ++i)
    if (s[i] == 0) s[i] = k[i];
  auto p = attr_ints_or(a, "padding", rank, 0);
  auto d = attr_ints_or(a, "dilation", rank, 1);
  bool ceil_mode = attr_bool_or(a, "ceil_mode", false);
  switch (n) {
    case OpCode::kMaxPool1d: return one(torch::max_pool1d(x, k, s, p, d, ceil_mode));
    case OpCode::kMaxPool2d: return one(torch::max_pool2d(x, k, s, p, d, ceil_mode));
    case OpCode::kMaxPool3d: return one(torch::max_pool3d(x, k, s, p, d, ceil_mode));
    case OpCode::kAvgPool2d: return one(torch::avg_pool2d(x, k, s, p, ceil_mode));
    case OpCode::kAvgPool1d: return one(torch::avg_pool1d(x, k, s, p));
    case OpCode::kAvgPool3d: return one(torch::avg_pool3d(x, k, s, p));
    default: return not_in_family(c);
  }
}

// The `shape` key's size expressions at this instance's sizes (reshape, expand).
Result<std::vector<int64_t>> shape_attr(const OpCall& c) {
  std::vector<int64_t> shape;
  for (const auto& e : c.attrs().at("shape")) {
    std::string expr = e.is_string() ? e.get<std::string>() : e.dump();
    VINCI_ASSIGN_OR_RETURN(int64_t v, eval_size(expr, c.sizes));
    shape.push_back(v);
  }
  return shape;
}

// Ops that move, select or pad elements without arithmetic.
Outs run_layout(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const auto& a = c.attrs();
  const OpCode n = c.op.code();
  switch (n) {
    case OpCode::kReshape: {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shape_attr(c));
      return one(x.reshape(shape));
    }
    case OpCode::kExpand: {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shape_attr(c));
      return one(x.expand(shape));
    }
    case OpCode::kFlatten: return one(x.flatten(attr_int_or(a, "start_dim", 1)));
    case OpCode::kPermute: {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attr_ints(a, "dims", static_cast<size_t>(x.dim()), c.where));
      return one(x.permute(dims).contiguous());
    }
    case OpCode::kTranspose: return one(x.transpose(attr_int_or(a, "dim0", 0), attr_int_or(a, "dim1", 1)).contiguous());
    case OpCode::kSplit: {
      std::vector<at::Tensor> parts;
      for (auto& t : x.chunk(static_cast<int64_t>(c.op.outputs.size()), attr_int_or(a, "dim", 0)))
        parts.push_back(t.contiguous());
      return parts;
    }
    case OpCode::kConcat: return one(torch::cat(c.in, attr_int_or(a, "dim", 0)));
    case OpCode::kSlice:
    case OpCode::kSelect: {
      // Python's x[..., start:end] / x[..., index]: views, as the indexing returns them.
      auto bound = [&](const char* key, int64_t dflt) -> Result<int64_t> {
        if (!a.contains(key)) return dflt;
        if (a[key].is_number_integer()) return a[key].get<int64_t>();
        return eval_size(a[key].get<std::string>(), c.sizes);
      };
      int64_t d = attr_int_or(a, "dim", 0);
      if (n == OpCode::kSelect) {
        VINCI_ASSIGN_OR_RETURN(int64_t index, bound("index", 0));
        return one(x.select(d, index));
      }
      VINCI_ASSIGN_OR_RETURN(int64_t start, bound("start", 0));
      VINCI_ASSIGN_OR_RETURN(int64_t end, bound("end", std::numeric_limits<int64_t>::max()));
      return one(x.slice(d, start, end));
    }
    case OpCode::kTriu: return one(torch::triu(x, attr_int_or(a, "diagonal", 0)));
    case OpCode::kTril: return one(torch::tril(x, attr_int_or(a, "diagonal", 0)));
    case OpCode::kRoll: {
      std::vector<int64_t> shifts, dims;
      for (const auto& v : a.at("shifts")) shifts.push_back(v.get<int64_t>());
      for (const auto& v : a.at("dims")) dims.push_back(v.get<int64_t>());
      return one(torch::roll(x, shifts, dims));
    }
    case OpCode::kPad: {
      // F.pad(x, pad) in constant mode with zeros: torch.constant_pad_nd.
      std::vector<int64_t> pad;
      for (const auto& p : a.at("pad")) pad.push_back(p.get<int64_t>());
      return one(torch::constant_pad_nd(x, pad, 0));
    }
    default: return not_in_family(c);
  }
}

// Products and attention: matmul, linear, einsum, the masks and attention blocks.
Outs run_product(const OpCall& c) {
  const torch::Tensor& x = c.x();
  const auto& a = c.attrs();
  switch (c.op.code()) {
    case OpCode::kMatmul: {
      torch::Tensor l = attr_bool_or(a, "transpose_a", false) ? x.transpose(-1, -2) : x;
      torch::Tensor r = attr_bool_or(a, "transpose_b", false) ? c.in.at(1).transpose(-1, -2) : c.in.at(1);
      return one(torch::matmul(l, r));
    }
    case OpCode::kLinear: return one(torch::linear(x, c.W("weight"), c.W("bias")));
    case OpCode::kEinsum: return one(torch::einsum(a.value("equation", std::string()), c.in));
    case OpCode::kCausalMask: {
      int64_t rows = x.size(-2), cols = x.size(-1);
      torch::Tensor upper =
          torch::ones({rows, cols}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
      return one(x.masked_fill(upper, -std::numeric_limits<float>::infinity()));
    }
    case OpCode::kSelfAttention: {
      // nn.MultiheadAttention(x, x, x) on (S, B, E) without masks, as TransformerEncoderLayer
      // calls it: scaled dot-product attention per head, then out_proj.
      VINCI_ASSIGN_OR_RETURN(int64_t heads, attr_int(c.mod->attrs, "heads", c.where));
      int64_t S = x.size(0), B = x.size(1), E = x.size(2), hd = E / heads;
      auto qkv = torch::linear(x, c.W("in_proj_weight"), c.W("in_proj_bias")).chunk(3, -1);
      auto split_heads = [&](const torch::Tensor& t) {
        return t.contiguous().view({S, B * heads, hd}).transpose(0, 1);
      };
      // q / math.sqrt(head_dim), a division as torch.nn.functional.multi_head_attention_forward
      // writes it (a product with the reciprocal differs in the last bit unless head_dim is a
      // power of 4).
      torch::Tensor q = split_heads(qkv[0]) / std::sqrt(static_cast<double>(hd));
      torch::Tensor k = split_heads(qkv[1]), v = split_heads(qkv[2]);
      torch::Tensor att = torch::softmax(torch::bmm(q, k.transpose(1, 2)), -1);
      torch::Tensor o = torch::bmm(att, v).transpose(0, 1).contiguous().view({S, B, E});
      return one(torch::linear(o, c.W("out_proj.weight"), c.W("out_proj.bias")));
    }
    case OpCode::kScaledDotProductAttention: {
      // F.scaled_dot_product_attention(Q, K, V) without mask, dropout or causal masking, as
      // PyTorch's math path computes it: softmax((Q * (1 / sqrt(E))) K^T) V. (Fused kernels
      // round differently; KernelBench's own output is within 1e-5 of this.)
      double scale = 1.0 / std::sqrt(static_cast<double>(x.size(-1)));
      torch::Tensor att = torch::softmax(torch::matmul(x * scale, c.in.at(1).transpose(-2, -1)), -1);
      return one(torch::matmul(att, c.in.at(2)));
    }
    case OpCode::kRelativePositionBias: {
      // table[index] for index[i][j] = (yi - yj + W - 1) * (2W - 1) + (xi - xj + W - 1), i = yi * W + xi,
      // viewed [W*W, W*W, H] and made [H, W*W, W*W] (Swin's relative_position_index gather).
      VINCI_ASSIGN_OR_RETURN(std::string we, attr_expr(a, "window", c.where));
      VINCI_ASSIGN_OR_RETURN(int64_t w, eval_size(we, c.sizes));
      std::vector<int64_t> index;
      index.reserve(static_cast<size_t>(w * w * w * w));
      for (int64_t i = 0; i < w * w; ++i)
        for (int64_t j = 0; j < w * w; ++j)
          index.push_back((i / w - j / w + w - 1) * (2 * w - 1) + (i % w - j % w + w - 1));
      torch::Tensor idx = torch::tensor(index, torch::TensorOptions().dtype(torch::kInt64)).to(x.device());
      return one(x.index_select(0, idx).view({w * w, w * w, -1}).permute({2, 0, 1}).contiguous());
    }
    default: return not_in_family(c);
  }
}

// nn.LSTM, nn.GRU (params: the module's flat weights in registration order) and the Elman RNN.
Outs run_recurrent(const OpCall& c, const std::vector<torch::Tensor>& params) {
  const torch::Tensor& x = c.x();
  const OpCode n = c.op.code();
  if (n == OpCode::kElmanRnn) {
    // h_t = tanh(Linear(In + H, H)(cat(x_t, h_{t-1}))) for t over dim 0, every h_t stacked.
    torch::Tensor h = c.in.at(1);
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < x.size(0); ++t) {
      h = torch::tanh(torch::linear(torch::cat({x[t], h}, 1), c.W("weight"), c.W("bias")));
      steps.push_back(h);
    }
    return one(torch::stack(steps, 0));
  }
  // Training mode, no dropout between layers.
  const auto& ma = c.mod->attrs;
  bool bias = attr_bool_or(ma, "bias", true);
  int64_t layers = attr_int_or(ma, "layers", 1);
  bool bidir = attr_bool_or(ma, "bidirectional", false);
  bool batch_first = attr_bool_or(ma, "batch_first", false);
  if (n == OpCode::kLstm) {
    auto r = torch::lstm(x, {c.in.at(1), c.in.at(2)}, params, bias, layers, 0.0, true, bidir, batch_first);
    return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
  }
  if (n == OpCode::kGru) {
    auto r = torch::gru(x, c.in.at(1), params, bias, layers, 0.0, true, bidir, batch_first);
    return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r)};
  }
  return not_in_family(c);
}

// The losses: a scalar each, as KernelBench's problems reduce them.
Outs run_loss(const OpCall& c) {
  const torch::Tensor& x = c.x();
  switch (c.op.code()) {
    case OpCode::kMseLoss: return one(torch::mse_loss(x, c.in.at(1)));
    case OpCode::kCrossEntropy: return one(torch::nll_loss(torch::log_softmax(x, 1), c.in.at(1)));
    case OpCode::kSmoothL1Loss: return one(torch::smooth_l1_loss(x, c.in.at(1)));
    case OpCode::kKlDiv:
      // F.kl_div(log(p), t, reduction='batchmean') = sum(t * (log t - log p)) / batch, computed as
      // PyTorch does (kl_div with reduction sum, then divided by the batch size).
      return one(torch::kl_div(torch::log(x), c.in.at(1), at::Reduction::Sum, false) / x.size(0));
    case OpCode::kHingeLoss: return one(torch::clamp(1 - x * c.in.at(1), 0).mean());
    case OpCode::kCosineSimilarityLoss: return one((1 - torch::cosine_similarity(x, c.in.at(1), 1, 1e-8)).mean());
    case OpCode::kTripletMarginLoss:
      return one(torch::triplet_margin_loss(x, c.in.at(1), c.in.at(2), attr_double_or(c.attrs(), "margin", 1.0), 2.0,
                                            1e-6, false, at::Reduction::Mean));
    default: return not_in_family(c);
  }
}

}  // namespace

Result<std::vector<at::Tensor>> TaskInstance::run_op_in(const OpSpec& op, const std::vector<at::Tensor>& in,
                                                        torch::ScalarType compute) const {
  const Task& task = *impl_->task;
  std::string where = op_where(task, op);
  const ModuleSpec* mod = nullptr;
  if (!op.module.empty()) {
    auto it = impl_->modules.find(op.module);
    if (it == impl_->modules.end()) return invalid_argument(where + ": unknown module '" + op.module + "'");
    mod = it->second;
  }
  const OpCall c{op, in, mod, where, impl_->sizes, impl_->weight_by_name, compute};
  torch::NoGradGuard no_grad;
  try {
    (void)in.at(0);
    // One case per op, to its family's function (the compiler names an op without one).
    switch (op.code()) {
      case OpCode::kRelu:
      case OpCode::kLeakyRelu:
      case OpCode::kSigmoid:
      case OpCode::kTanh:
      case OpCode::kGelu:
      case OpCode::kSilu:
      case OpCode::kElu:
      case OpCode::kSelu:
      case OpCode::kSoftplus:
      case OpCode::kSoftsign:
      case OpCode::kHardsigmoid:
      case OpCode::kHardswish:
      case OpCode::kHardtanh:
      case OpCode::kMish:
      case OpCode::kExp:
      case OpCode::kLog:
      case OpCode::kAbs:
      case OpCode::kSquare:
      case OpCode::kSqrt:
      case OpCode::kClamp:
      case OpCode::kMulScalar:
      case OpCode::kAddScalar:
      case OpCode::kDivScalar:
      case OpCode::kAdd:
      case OpCode::kSub:
      case OpCode::kMul:
      case OpCode::kDiv: return run_elementwise(c);
      case OpCode::kSum:
      case OpCode::kMean:
      case OpCode::kAmax:
      case OpCode::kAmin:
      case OpCode::kLogsumexp:
      case OpCode::kNormL2:
      case OpCode::kSoftmax:
      case OpCode::kLogSoftmax:
      case OpCode::kArgmax:
      case OpCode::kArgmin:
      case OpCode::kCumsum:
      case OpCode::kCumprod:
      case OpCode::kCumsumReverse:
      case OpCode::kCumsumExclusive:
      case OpCode::kFrobeniusNorm:
      case OpCode::kNormalize: return run_reduction(c);
      case OpCode::kRmsNorm:
      case OpCode::kLayerNorm:
      case OpCode::kBatchNorm:
      case OpCode::kGroupNorm:
      case OpCode::kInstanceNorm: return run_normalization(c);
      case OpCode::kConv1d:
      case OpCode::kConv2d:
      case OpCode::kConv3d:
      case OpCode::kConvTranspose1d:
      case OpCode::kConvTranspose2d:
      case OpCode::kConvTranspose3d: return run_conv(c);
      case OpCode::kMaxPool1d:
      case OpCode::kMaxPool2d:
      case OpCode::kMaxPool3d:
      case OpCode::kAvgPool1d:
      case OpCode::kAvgPool2d:
      case OpCode::kAvgPool3d:
      case OpCode::kAdaptiveAvgPool2d:
      case OpCode::kAdaptiveAvgPool3d: return run_pool(c);
      case OpCode::kReshape:
      case OpCode::kExpand:
      case OpCode::kFlatten:
      case OpCode::kPermute:
      case OpCode::kTranspose:
      case OpCode::kSplit:
      case OpCode::kConcat:
      case OpCode::kSlice:
      case OpCode::kSelect:
      case OpCode::kTriu:
      case OpCode::kTril:
      case OpCode::kRoll:
      case OpCode::kPad: return run_layout(c);
      case OpCode::kMatmul:
      case OpCode::kLinear:
      case OpCode::kEinsum:
      case OpCode::kCausalMask:
      case OpCode::kSelfAttention:
      case OpCode::kScaledDotProductAttention:
      case OpCode::kRelativePositionBias: return run_product(c);
      case OpCode::kLstm:
      case OpCode::kGru:
      case OpCode::kElmanRnn: {
        std::vector<torch::Tensor> params;
        if (op.code() != OpCode::kElmanRnn)
          for (const auto& [name, t] : impl_->weights)
            if (name.rfind(op.module + ".", 0) == 0) params.push_back(as_compute(t, compute));
        return run_recurrent(c, params);
      }
      case OpCode::kMseLoss:
      case OpCode::kCrossEntropy:
      case OpCode::kSmoothL1Loss:
      case OpCode::kKlDiv:
      case OpCode::kHingeLoss:
      case OpCode::kCosineSimilarityLoss:
      case OpCode::kTripletMarginLoss: return run_loss(c);
      case OpCode::kUnknown: break;
    }
  } catch (const std::exception& e) {
    return invalid_argument(where + ": libtorch refused: " + std::string(e.what()).substr(0, 400));
  }
  return internal_error(where + ": op not implemented by the executor");
}

Result<std::map<std::string, at::Tensor>> TaskInstance::run_values(const std::vector<at::Tensor>& inputs,
                                                                   bool float64) const {
  const Task& task = *impl_->task;
  if (inputs.size() != task.inputs.size())
    return invalid_argument("task '" + task.id + "': expected " + std::to_string(task.inputs.size()) +
                            " inputs, found " + std::to_string(inputs.size()));
  std::map<std::string, at::Tensor> values;
  torch::ScalarType compute = float64 ? torch::kFloat64 : torch::kFloat32;
  for (size_t i = 0; i < inputs.size(); ++i) values[task.inputs[i].name] = as_compute(inputs[i], compute);
  for (const auto& [name, w] : impl_->weights) values[name] = as_compute(w, compute);
  for (const auto& op : task.ops) {
    std::vector<at::Tensor> args;
    for (const auto& n : op.inputs) args.push_back(values.at(n));
    VINCI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outs, run_op_in(op, args, compute));
    if (outs.size() != op.outputs.size())
      return internal_error(op_where(task, op) + ": produced " + std::to_string(outs.size()) + " outputs");
    for (size_t i = 0; i < outs.size(); ++i) values[op.outputs[i]] = outs[i];
  }
  return values;
}

Result<std::map<std::string, at::Tensor>> TaskInstance::run_all(const std::vector<at::Tensor>& inputs) const {
  return run_values(inputs, false);
}

Result<at::Tensor> TaskInstance::run(const std::vector<at::Tensor>& inputs) const {
  VINCI_ASSIGN_OR_RETURN(auto values, run_values(inputs, false));
  return values.at(impl_->task->output);
}

Result<at::Tensor> TaskInstance::run_float64(const std::vector<at::Tensor>& inputs) const {
  torch::NoGradGuard no_grad;
  try {
    VINCI_ASSIGN_OR_RETURN(auto values, run_values(inputs, true));
    return values.at(impl_->task->output);
  } catch (const c10::Error& e) {
    return internal_error("task '" + impl_->task->id +
                          "': the float64 reference failed: " + e.what_without_backtrace());
  }
}

}  // namespace vinci
