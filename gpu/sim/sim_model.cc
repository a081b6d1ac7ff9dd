#include "gpu/sim/sim_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "gpu/ops.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

// Instructions a thread spends per loop iteration on index arithmetic, bounds checks and the
// loop itself, amortised over the vector width and items per thread. A count of the SASS of a
// grid-stride elementwise loop (IMAD, ISETP, BRA, address math): ~8.
constexpr double kIndexInstructions = 8;
// Warps per SM that keep the 4 schedulers' FP32 pipes issuing when each warp has one independent
// instruction in flight: 4 schedulers x ~4-cycle FMA latency / ~2 ready instructions = 8.
constexpr double kIssueWarpsPerSm = 8;
// Register estimates: the fixed part of a kernel (indices, pointers, loop state) seen in NVRTC's
// -Xptxas -v output of small generated kernels: ~16 elementwise, ~24 reductions, ~32 GEMM.
constexpr int64_t kBaseRegsElementwise = 16;
constexpr int64_t kBaseRegsRow = 24;
constexpr int64_t kBaseRegsGemm = 32;
// A kernel that needs more registers than a thread may hold spills to local memory; a spilling
// inner loop runs ~2x slower (local memory goes through L1/L2).
constexpr double kSpillSlowdown = 2.0;
// PyTorch's elementwise kernels: 128 threads x 4 elements (vectorised) per thread per block.
constexpr int64_t kLibraryBlockThreads = 128;
constexpr int64_t kLibraryElementsPerBlock = 512;
// PyTorch's block-per-row kernels (cunn_SoftMaxForward, the layer_norm moments kernel) launch
// 512-1024 threads per row.
constexpr int64_t kLibraryRowThreads = 512;
// cuDNN convolutions (implicit GEMM, fp32, TF32 off) reach ~80% of the library GEMM rate on the
// large KernelBench shapes; pooling, scans and norms are memory-bound.
constexpr double kConvOfGemm = 0.8;
// cuBLAS' fp32 tile and the most it splits K to fill the machine on thin products.
constexpr int64_t kLibraryGemmTile = 128;
constexpr int64_t kLibrarySplitKMax = 16;
// PyTorch's persistent softmax keeps rows of up to 1024 elements in registers (one read); longer
// rows take three passes (max, sum of exponentials, write), the later two hitting L2 when the
// rows in flight fit.
constexpr int64_t kPersistentSoftmaxMax = 1024;

double product(const std::vector<int64_t>& s) {
  double p = 1;
  for (int64_t v : s) p *= static_cast<double>(v);
  return p;
}

double ceil_div(double a, double b) { return std::ceil(a / b); }

// Floating-point operations per element of a unary op, counting a transcendental as the
// instruction sequence CUDA's precise libm issues for it (expf/logf ~4, erff/tanhf ~8).
double unary_flops(OpCode op) {
  if (op == OpCode::kRelu || op == OpCode::kAbs || op == OpCode::kSquare || op == OpCode::kMulScalar ||
      op == OpCode::kAddScalar)
    return 1;
  if (op == OpCode::kLeakyRelu || op == OpCode::kHardtanh || op == OpCode::kClamp || op == OpCode::kDivScalar) return 2;
  if (op == OpCode::kSoftsign || op == OpCode::kHardsigmoid) return 3;
  if (op == OpCode::kHardswish || op == OpCode::kElu || op == OpCode::kExp || op == OpCode::kLog || op == OpCode::kSqrt)
    return 4;
  if (op == OpCode::kSigmoid || op == OpCode::kSelu || op == OpCode::kSilu) return 6;
  if (op == OpCode::kSoftplus || op == OpCode::kTanh) return 8;
  if (op == OpCode::kGelu) return 14;
  if (op == OpCode::kMish) return 16;
  return 2;
}

// Fraction of an SM's share of bandwidth it draws with `inflight` bytes outstanding.
double saturation(double inflight, double c) { return 1.0 - std::exp(-inflight / c); }

struct Grid {
  int64_t blocks = 1;
  int64_t threads = 1;
};

// A kernel's resource use for the occupancy calculation.
struct Resources {
  int64_t threads = 0;
  int64_t registers = 0;
  int64_t shared = 0;
};

// Execution-time pieces of one kernel or library launch, before efficiency and floor.
struct Body {
  double mem_us = 0;
  double l2_us = 0;
  double compute_us = 0;
  double shared_us = 0;
  double latency_us = 0;  // serial latency added on top of the roofline (reduction syncs)
  double dram_bytes = 0;
  double l2_bytes = 0;
  double flops = 0;
  StepBound bound = StepBound::kNone;
  double total() {
    double m = std::max({mem_us, l2_us, compute_us, shared_us});
    bound = m == 0            ? StepBound::kNone
            : m == mem_us     ? StepBound::kMemory
            : m == l2_us      ? StepBound::kL2
            : m == compute_us ? StepBound::kCompute
                              : StepBound::kShared;
    if (latency_us > m) bound = StepBound::kLatency;
    return m + latency_us;
  }
};

class Estimator {
 public:
  Estimator(const DeviceProfile& p, const SimModel& m) : p_(p), m_(m) {}

  struct Occupancy {
    int64_t bps = 0;
    int64_t warps_per_block = 1;
    double occupancy = 0;
    bool spills = false;
  };

  Occupancy occupancy(const Resources& r) const {
    Occupancy o;
    o.warps_per_block = std::max<int64_t>(1, (r.threads + p_.warp_size - 1) / p_.warp_size);
    // ptxas fits a block's registers in the SM (__launch_bounds__ of the block size, which the
    // generator emits): past that cap, and past 255, the kernel spills instead.
    int64_t cap = std::min(p_.max_registers_per_thread, p_.registers_per_sm / (o.warps_per_block * p_.warp_size) /
                                                            p_.register_granularity * p_.register_granularity);
    o.spills = r.registers > cap;
    o.bps = m_.blocks_per_sm(r.threads, std::min(r.registers, cap), r.shared);
    o.occupancy = static_cast<double>(o.bps * o.warps_per_block) / static_cast<double>(p_.max_warps_per_sm);
    return o;
  }

  // Device bandwidth fraction with n blocks resident, each holding `warp_inflight` bytes
  // outstanding per warp: Little's law per active SM.
  double bw_fraction(double n, const Occupancy& o, double warp_inflight) const {
    double sms = static_cast<double>(p_.sms);
    double active = std::min(n, sms);
    double inflight = (n / active) * static_cast<double>(o.warps_per_block) * warp_inflight;
    return active / sms * saturation(inflight, p_.inflight_bytes_per_sm);
  }

  // Seconds to move dram and l2 bytes spread evenly over `blocks`, in full waves of SMs x bps
  // resident blocks and a partial last wave (the tail runs with fewer bytes in flight).
  std::pair<double, double> memory_s(double dram, double l2, int64_t blocks, const Occupancy& o,
                                     double warp_inflight) const {
    if (blocks <= 0 || o.bps <= 0) return {0, 0};
    double resident = static_cast<double>(p_.sms * o.bps);
    double b = static_cast<double>(blocks);
    double full = std::floor(b / resident), rem = b - full * resident;
    double per_d = dram / b, per_l2 = l2 / b;
    double td = 0, tl = 0;
    for (auto [count, n] : {std::pair<double, double>{full * resident, resident}, {rem, rem}}) {
      if (count <= 0) continue;
      double f = bw_fraction(n, o, warp_inflight);
      td += count * per_d / (p_.hbm_bytes_per_s * f);
      tl += count * per_l2 / (p_.l2_bytes_per_s * f);
    }
    return {td, tl};
  }

  // Seconds of `work` units at `rate_per_sm` units/s per SM when an SM with w warps reaches
  // min(1, w / warps_needed) of its rate; waves as in memory_s, the partial wave's busiest SM
  // holding ceil(rem / SMs) blocks.
  double compute_s(double work, int64_t blocks, const Occupancy& o, double rate_per_sm, double warps_needed) const {
    if (work <= 0 || blocks <= 0 || o.bps <= 0) return 0;
    double sms = static_cast<double>(p_.sms);
    double b = static_cast<double>(blocks), resident = sms * static_cast<double>(o.bps);
    double full = std::floor(b / resident), rem = b - full * resident;
    double per_block = work / b;
    auto wave = [&](double k) {
      double util = std::min(1.0, k * static_cast<double>(o.warps_per_block) / warps_needed);
      return k * per_block / (rate_per_sm * util);
    };
    double t = full * wave(static_cast<double>(o.bps));
    if (rem > 0) t += wave(std::ceil(rem / sms));
    return t;
  }

  double waves(int64_t blocks, const Occupancy& o) const {
    return o.bps > 0 ? static_cast<double>(blocks) / static_cast<double>(p_.sms * o.bps) : 0;
  }

  const DeviceProfile& p() const { return p_; }

 private:
  const DeviceProfile& p_;
  const SimModel& m_;
};

int64_t round_up(int64_t v, int64_t g) { return (v + g - 1) / g * g; }

int64_t parse_int_or(const std::map<std::string, std::string>& m, const std::string& key, int64_t dflt) {
  auto it = m.find(key);
  if (it == m.end()) return dflt;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  return end && *end == 0 && v > 0 ? v : dflt;
}

bool knob_is(const PlanKernel& k, const std::string& key, const std::string& value) {
  auto it = k.knobs.find(key);
  return it != k.knobs.end() && it->second == value;
}

// Dimensions of a matrix product op at concrete shapes.
struct GemmDims {
  double batch = 1, m = 0, n = 0, k = 0;
  double a_bytes = 0, b_bytes = 0, c_bytes = 0, bias_bytes = 0;
};

}  // namespace

// ----------------------------------------------------------------------------------------------

const char* step_family_name(StepFamily family) {
  switch (family) {
    case StepFamily::kElementwise: return "elementwise";
    case StepFamily::kRowReduction: return "row_reduction";
    case StepFamily::kGemm: return "gemm";
    case StepFamily::kCustom: return "custom";
    case StepFamily::kLibraryGemm: return "library_gemm";
    case StepFamily::kLibraryOther: return "library_other";
    case StepFamily::kView: return "view";
  }
  return "custom";
}

StepFamily step_family_of(KernelFamily family) {
  switch (family) {
    case KernelFamily::kElementwise: return StepFamily::kElementwise;
    case KernelFamily::kRowReduction: return StepFamily::kRowReduction;
    case KernelFamily::kGemm: return StepFamily::kGemm;
    case KernelFamily::kCustom: return StepFamily::kCustom;
  }
  return StepFamily::kCustom;
}

const char* step_bound_name(StepBound bound) {
  switch (bound) {
    case StepBound::kNone: return "none";
    case StepBound::kMemory: return "memory";
    case StepBound::kL2: return "l2";
    case StepBound::kCompute: return "compute";
    case StepBound::kShared: return "shared";
    case StepBound::kLatency: return "latency";
    case StepBound::kFloor: return "floor";
    case StepBound::kRefused: return "refused";
  }
  return "none";
}

const std::vector<int64_t>* TaskContext::shape(const std::string& name) const {
  auto it = shapes_.find(name);
  return it == shapes_.end() ? nullptr : &it->second;
}

SimModel::SimModel(DeviceProfile profile) : profile_(std::move(profile)) {}

int64_t SimModel::blocks_per_sm(int64_t threads, int64_t registers, int64_t shared_bytes) const {
  const DeviceProfile& p = profile_;
  if (threads <= 0 || threads > p.max_threads_per_block || shared_bytes > p.shared_bytes_per_block) return 0;
  int64_t warps = (threads + p.warp_size - 1) / p.warp_size;
  int64_t regs = round_up(std::max<int64_t>(registers, 1), p.register_granularity);
  int64_t by_warps = p.max_warps_per_sm / warps;
  int64_t by_threads = p.max_threads_per_sm / (warps * p.warp_size);
  int64_t by_regs = p.registers_per_sm / (regs * warps * p.warp_size);
  int64_t by_shared = p.shared_bytes_per_sm / (shared_bytes + p.shared_reserved_per_block);
  return std::max<int64_t>(0, std::min({p.max_blocks_per_sm, by_warps, by_threads, by_regs, by_shared}));
}

namespace sim_internal {

// The cost model of one prediction: the plan's steps against one task context.
class PlanCoster {
 public:
  PlanCoster(const SimModel& model, const TaskContext& ctx, const Plan* plan,
             std::map<std::string, std::vector<int64_t>>* plan_shapes)
      : p_(model.profile()), est_(model.profile(), model), ctx_(ctx), plan_(plan), plan_shapes_(plan_shapes) {
    if (plan_)
      for (const auto& b : plan_->buffers) buffers_.emplace(b.name, &b);  // the first of a name, as find_buffer
  }

  const PlanBuffer* find_buffer(const std::string& name) const {
    auto it = buffers_.find(name);
    return it == buffers_.end() ? nullptr : it->second;
  }

  Result<int64_t> eval(const std::string& text, const ExprEnv& env) const {
    bool pure = text.find('(') == std::string::npos ||
                (text.find("numel") == std::string::npos && text.find("dim(") == std::string::npos &&
                 text.find("rank") == std::string::npos);
    if (pure) {
      auto it = ctx_.expr_cache_.find(text);
      if (it != ctx_.expr_cache_.end()) return it->second;
    }
    VINCI_ASSIGN_OR_RETURN(int64_t v, eval_expr(text, env));
    if (pure) ctx_.expr_cache_.emplace(text, v);
    return v;
  }

  Result<double> evald(const std::string& text, const ExprEnv& env) const {
    if (text.empty()) return 0.0;
    VINCI_ASSIGN_OR_RETURN(int64_t v, eval(text, env));
    return static_cast<double>(v);
  }

  // --- L2 residency: an LRU stack distance over the bytes the plan has touched so far --------
  // A buffer's size depends only on the plan and the task context: computed once a prediction.
  double buffer_bytes(const std::string& name) const {
    auto cached = bytes_.find(name);
    if (cached != bytes_.end()) return cached->second;
    double bytes = 0;
    const PlanBuffer* b = plan_ && plan_shapes_ ? find_buffer(name) : nullptr;
    const std::vector<int64_t>* shape = nullptr;
    if (b) {
      auto it = plan_shapes_->find(name);
      if (it != plan_shapes_->end()) shape = &it->second;
    }
    if (shape) {
      bytes = product(*shape) * (b->dtype == "i64" ? 8 : 4);
    } else if (const std::vector<int64_t>* s = ctx_.shape(name)) {
      double elem = 4;
      for (const auto& in : ctx_.task().inputs)
        if (in.name == name && in.domain == InputDomain::kIndex) elem = 8;
      bytes = product(*s) * elem;
    }
    bytes_.emplace(name, bytes);
    return bytes;
  }

  bool produced(const std::string& name) const { return touched_.count(name) > 0; }

  // Share of `reads` served by L2: a buffer is resident when the plan touched it earlier and the
  // bytes touched since, plus its own, fit in the usable L2. Inputs and weights start cold (the
  // live evaluator flushes L2 before every sample).
  double resident_fraction(const std::vector<std::string>& reads) const {
    double total = 0, hit = 0, cap = p_.l2_bytes * p_.l2_usable_fraction;
    for (const auto& r : reads) {
      double b = buffer_bytes(r);
      total += b;
      auto it = touched_.find(r);
      if (it != touched_.end() && clock_ - it->second + b <= cap) hit += b;
    }
    return total > 0 ? hit / total : 0;
  }

  void touch(const std::vector<std::string>& names) {
    for (const auto& n : names) {
      clock_ += buffer_bytes(n);
      touched_[n] = clock_;
    }
  }

  // --- kernels -------------------------------------------------------------------------------
  Result<StepPrediction> kernel_step(const PlanStep& step, const ExprEnv& env) {
    const PlanKernel* k = plan_->find_kernel(step.kernel);
    if (!k) return invalid_argument("plan step: kernel '" + step.kernel + "' not in the plan");
    Grid g;
    std::array<int64_t, 3> grid{}, block{};
    for (size_t i = 0; i < 3; ++i) {
      VINCI_ASSIGN_OR_RETURN(grid[i], eval(step.grid[i], env));
      VINCI_ASSIGN_OR_RETURN(block[i], eval(step.block[i], env));
    }
    // A launch CUDA refuses is priced as an empty one (correctness reports it); a valid one's
    // products fit in 64 bits.
    if (launch_dims_error(grid, block).empty()) {
      g.blocks = grid[0] * grid[1] * grid[2];
      g.threads = block[0] * block[1] * block[2];
    } else {
      g.blocks = 0;
      g.threads = 0;
    }
    std::vector<std::string> reads, writes;
    for (const auto& a : step.args) {
      if (a.buffer.empty()) continue;
      bool fused_out = std::find(k->fused_values.begin(), k->fused_values.end(), a.buffer) != k->fused_values.end();
      const PlanBuffer* b = find_buffer(a.buffer);
      bool fresh_temp =
          b && (b->role == "intermediate" || b->role == "output") && !produced(a.buffer) && !ctx_.shape(a.buffer);
      bool is_output = b && b->role == "output" && !produced(a.buffer);
      if (fused_out || fresh_temp || is_output)
        writes.push_back(a.buffer);
      else
        reads.push_back(a.buffer);
    }
    double resident = resident_fraction(reads);
    StepPrediction s;
    s.what = k->name;
    s.family = step_family_of(k->family);
    s.own_kernel = true;
    s.launches = 1;
    s.launch_us = p_.kernel_launch_us;
    s.blocks = g.blocks;
    Body body;
    Estimator::Occupancy occ;
    using P = DeviceProfile;
    double P::*eff_term = &P::eff_custom;
    if (g.blocks == 0 || g.threads == 0) {
      // An empty launch: CUDA rejects a zero grid; correctness reports it. Time: the launch.
    } else if (k->family == KernelFamily::kGemm) {
      VINCI_ASSIGN_OR_RETURN(body, gemm_kernel(*k, g, env, resident, &occ));
      eff_term = k->tensor_cores ? &P::eff_gemm_tensor_core : &P::eff_gemm_cuda_core;
    } else if (k->family == KernelFamily::kRowReduction) {
      VINCI_ASSIGN_OR_RETURN(body, row_kernel(*k, g, env, resident, &occ));
      eff_term = &P::eff_row_reduction;
    } else {
      // elementwise, and custom kernels (LLM-written): a streaming kernel at its declared cost.
      VINCI_ASSIGN_OR_RETURN(body, stream_kernel(*k, g, env, resident, &occ));
      if (k->family == KernelFamily::kElementwise) eff_term = &P::eff_elementwise;
    }
    double eff = p_.*eff_term;
    double t = body.total() * 1e6;
    if (occ.spills) t *= kSpillSlowdown;
    s.body_us = t;
    s.efficiency = eff_term;
    s.empty_launch = g.blocks == 0 || g.threads == 0;
    s.exec_us = kernel_exec_us(p_, s.empty_launch, t, eff);
    s.bound = s.exec_us == p_.kernel_floor_us && t / eff < p_.kernel_floor_us ? StepBound::kFloor : body.bound;
    if (occ.bps == 0) s.bound = StepBound::kRefused;  // the device would not launch it: correctness fails it
    s.time_us = s.launch_us + s.exec_us;
    s.dram_bytes = body.dram_bytes;
    s.l2_bytes = body.l2_bytes;
    s.flops = body.flops;
    s.blocks_per_sm = occ.bps;
    s.occupancy = occ.occupancy;
    s.waves = est_.waves(g.blocks, occ);
    touch(reads);
    touch(writes);
    return s;
  }

  Result<Body> stream_kernel(const PlanKernel& k, const Grid& g, const ExprEnv& env, double resident,
                             Estimator::Occupancy* occ) {
    VINCI_ASSIGN_OR_RETURN(double n, evald(k.cost.elements, env));
    VINCI_ASSIGN_OR_RETURN(double br, evald(k.cost.bytes_read, env));
    VINCI_ASSIGN_OR_RETURN(double bw, evald(k.cost.bytes_written, env));
    VINCI_ASSIGN_OR_RETURN(double fl, evald(k.cost.flops, env));
    double vw = static_cast<double>(std::max<int64_t>(1, k.vector_width));
    double ipt = static_cast<double>(std::max<int64_t>(1, k.items_per_thread));
    // Each thread holds its vw * ipt loaded values (results reuse their registers).
    Resources r{g.threads, kBaseRegsElementwise + static_cast<int64_t>(vw * ipt), k.shared_bytes};
    *occ = est_.occupancy(r);
    Body b;
    if (occ->bps == 0) return b;
    double read_per_elem = n > 0 ? std::max(4.0, br / n) : 4.0;
    double warp_inflight = static_cast<double>(p_.warp_size) * vw * ipt * read_per_elem;
    b.dram_bytes = br * (1 - resident) + bw;
    b.l2_bytes = br * resident;
    auto [td, tl] = est_.memory_s(b.dram_bytes, b.l2_bytes, g.blocks, *occ, warp_inflight);
    b.mem_us = td;
    b.l2_us = tl;
    double math = fl * (knob_is(k, "ew.math", "fast") ? p_.fast_math_factor : 1.0);
    double instr = n * kIndexInstructions / (vw * ipt) + math;
    double lane_rate = p_.fp32_peak_flops / 2 / static_cast<double>(p_.sms);  // instructions/s per SM
    b.compute_us = est_.compute_s(instr, g.blocks, *occ, lane_rate, kIssueWarpsPerSm);
    b.flops = fl;
    return b;
  }

  // The op a kernel computes first (its defining op: the product or the reduction).
  const OpSpec* primary_op(const PlanKernel& k) const {
    for (const auto& v : k.fused_values) {
      auto it = ctx_.producer_.find(v);
      if (it != ctx_.producer_.end()) return it->second;
    }
    return nullptr;
  }

  Result<GemmDims> gemm_dims(const OpSpec& op) const {
    GemmDims d;
    auto shape_of = [&](const std::string& n) -> Result<std::vector<int64_t>> {
      const std::vector<int64_t>* s = ctx_.shape(n);
      if (!s) return Status(invalid_argument("sim: value '" + n + "' has no shape"));
      return *s;
    };
    if (op.code() == OpCode::kLinear) {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> x, shape_of(op.inputs.at(0)));
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> w, shape_of(op.module + ".weight"));
      d.k = static_cast<double>(x.back());
      d.m = product(x) / d.k;
      d.n = static_cast<double>(w.at(0));
      const std::vector<int64_t>* bias = ctx_.shape(op.module + ".bias");
      d.bias_bytes = bias ? product(*bias) * 4 : 0;
    } else {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> a, shape_of(op.inputs.at(0)));
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> b, shape_of(op.inputs.at(1)));
      if (a.size() < 2 || b.size() < 2) return invalid_argument("sim: matmul operands of rank < 2");
      if (attr_bool_or(op.attrs, "transpose_a", false)) std::swap(a[a.size() - 1], a[a.size() - 2]);
      if (attr_bool_or(op.attrs, "transpose_b", false)) std::swap(b[b.size() - 1], b[b.size() - 2]);
      d.m = static_cast<double>(a[a.size() - 2]);
      d.k = static_cast<double>(a.back());
      d.n = static_cast<double>(b.back());
      d.batch = std::max(product(std::vector<int64_t>(a.begin(), a.end() - 2)),
                         product(std::vector<int64_t>(b.begin(), b.end() - 2)));
    }
    d.a_bytes = d.batch * d.m * d.k * 4;
    d.b_bytes = (op.code() == OpCode::kLinear ? 1 : d.batch) * d.k * d.n * 4;
    d.c_bytes = d.batch * d.m * d.n * 4;
    return d;
  }

  Result<Body> gemm_kernel(const PlanKernel& k, const Grid& g, const ExprEnv& env, double resident,
                           Estimator::Occupancy* occ) {
    const OpSpec* op = primary_op(k);
    if (!op || (op->code() != OpCode::kMatmul && op->code() != OpCode::kLinear))
      return stream_kernel(k, g, env, resident, occ);
    VINCI_ASSIGN_OR_RETURN(GemmDims d, gemm_dims(*op));
    VINCI_ASSIGN_OR_RETURN(double br, evald(k.cost.bytes_read, env));
    VINCI_ASSIGN_OR_RETURN(double bw, evald(k.cost.bytes_written, env));
    VINCI_ASSIGN_OR_RETURN(double fl, evald(k.cost.flops, env));
    double flops = std::max(fl, 2 * d.batch * d.m * d.n * d.k);
    double unique_read = std::max(br, d.a_bytes + d.b_bytes);
    double cap = p_.l2_bytes * p_.l2_usable_fraction;
    double tm = static_cast<double>(k.tile[0]), tn = static_cast<double>(k.tile[1]);
    double sms = static_cast<double>(p_.sms);
    Body b;
    b.flops = flops;
    if (tm <= 0 || tn <= 0) {
      // No shared-memory tiling: every product reads its operands through L1. Lanes along N read
      // B coalesced (one 128-byte wavefront) and broadcast A (one); lanes along M
      // ("naive_strided") touch 32 lines of A per load. L1 serves one wavefront per clock per SM.
      Resources r{g.threads, kBaseRegsGemm, k.shared_bytes};
      *occ = est_.occupancy(r);
      if (occ->bps == 0) return b;
      double wavefronts = k.algorithm == "naive_strided" ? 33 : 2;
      double warp_fmas = d.batch * d.m * d.n * d.k / static_cast<double>(p_.warp_size);
      b.shared_us = warp_fmas * wavefronts / (sms * p_.clock_hz) / std::min(1.0, occ->occupancy * 2);
      b.dram_bytes = unique_read * (1 - resident) + bw;
      b.l2_bytes = unique_read * resident;
      auto [td, tl] = est_.memory_s(b.dram_bytes, b.l2_bytes, g.blocks, *occ, 128);
      b.mem_us = td;
      b.l2_us = tl;
      b.compute_us = flops / p_.fp32_peak_flops;
      return b;
    }
    double threads = static_cast<double>(std::max<int64_t>(1, g.threads));
    double ttm = k.thread_tile[0] > 0 ? static_cast<double>(k.thread_tile[0]) : 0;
    double ttn = k.thread_tile[1] > 0 ? static_cast<double>(k.thread_tile[1]) : 0;
    if (ttm <= 0 || ttn <= 0) {  // derive a square-ish register block from tile / threads
      double per = std::max(1.0, tm * tn / threads);
      ttm = std::max(1.0, std::floor(std::sqrt(per)));
      ttn = std::max(1.0, per / ttm);
    }
    double fragment = ttm * ttn;  // accumulators per thread
    int64_t regs = kBaseRegsGemm + static_cast<int64_t>(fragment + ttm + ttn);
    double tk = static_cast<double>(std::max<int64_t>(1, k.tile[2]));
    int64_t shared = k.shared_bytes > 0 ? k.shared_bytes : static_cast<int64_t>((tm + tn) * tk * 4);
    *occ = est_.occupancy({g.threads, regs, shared});
    if (occ->bps == 0) return b;
    // Global traffic: each block streams its tm rows of A and tn columns of B over K; all of it
    // passes through L2. DRAM sees the unique bytes plus what L2 cannot keep between waves: blocks
    // are rasterised along N, so a wave of W resident blocks covers W / tiles_n tile rows and
    // streams the B columns it needs. While B fits in L2 it is read from DRAM once; otherwise it
    // is streamed again by every wave (every tile row when a wave is narrower than a row).
    double tiles_m = ceil_div(d.m, tm), tiles_n = ceil_div(d.n, tn);
    double blocks_mn = d.batch * tiles_m * tiles_n;
    double tile_traffic = blocks_mn * (tm + tn) * d.k * 4;
    double wave_blocks = static_cast<double>(p_.sms * occ->bps);
    double b_per_batch = d.b_bytes / (op->code() == OpCode::kLinear ? 1 : d.batch);
    double b_streams = 1;
    if (b_per_batch > cap) b_streams = wave_blocks >= tiles_n ? std::ceil(tiles_m * tiles_n / wave_blocks) : tiles_m;
    double dram_read = unique_read + d.b_bytes * (b_streams - 1);
    dram_read = std::min(dram_read, std::max(unique_read, tile_traffic));
    b.dram_bytes = dram_read * (1 - resident) + bw;
    b.l2_bytes = std::max(0.0, tile_traffic - dram_read) + dram_read * resident;
    auto [td, tl] = est_.memory_s(b.dram_bytes, b.l2_bytes, g.blocks, *occ, 512);
    b.mem_us = td;
    b.l2_us = tl;
    double rate_sm;
    if (k.tensor_cores) {
      // wmma: each warp's tile (area tm*tn/warps) loads (wm + wn) x 8 floats of fragments per
      // k-step of 8 from shared memory for 2 wm wn 8 flops.
      double warps = std::max(1.0, threads / static_cast<double>(p_.warp_size));
      double side = std::sqrt(tm * tn / warps);
      // 16-bit operands (bf16, fp16) are half the bytes of shared memory and run at the 16-bit
      // tensor peak.
      bool half = is_16bit_precision(k.precision);
      double bytes_per_flop = (half ? 1 : 2) * (side + side) / (side * side);
      b.shared_us = flops * bytes_per_flop / (p_.shared_bytes_per_clock * sms * p_.clock_hz);
      rate_sm = (half ? p_.bf16_peak_flops : p_.tf32_peak_flops) * p_.wmma_fraction / sms;
      // Per k tile, a warp spends its mma instructions' cycles on the tensor pipe (one
      // m16n16k8 is 4096 flops at a quarter of the SM's rate) and issues LDG + STS for its share
      // of the staged tiles; the staging is what the mma cycles do not cover.
      double mma_cycles = tm * tn * tk / (16 * 16 * 8) / warps * 4096 / (rate_sm / 4 / p_.clock_hz);
      double staging = (tm + tn) * tk * 2 / threads;
      rate_sm *= mma_cycles / (mma_cycles + staging);
      // One warp per scheduler keeps its tensor pipe busy (mma.sync is long and pipelined).
      b.compute_us = est_.compute_s(flops, g.blocks, *occ, rate_sm, 4);
    } else {
      // CUDA cores: per k-step a thread issues ttm*ttn FMAs, its shared loads (float4 when the
      // register block allows) and loop overhead; staging the tiles adds LDG + STS per element.
      double lds = (std::fmod(ttm, 4) == 0 ? ttm / 4 : ttm) + (std::fmod(ttn, 4) == 0 ? ttn / 4 : ttn);
      double unroll = static_cast<double>(parse_int_or(k.knobs, "gemm.unroll", 1));
      double overhead = 2.0 / unroll + 2 * (tm + tn) / threads;
      double issue = fragment / (fragment + lds + overhead);
      rate_sm = p_.fp32_peak_flops / sms * issue;
      double warps_needed = kIssueWarpsPerSm / std::min(fragment, 4.0);
      b.compute_us = est_.compute_s(flops, g.blocks, *occ, rate_sm, warps_needed);
      // Shared-memory wavefronts: a warp (4 x 8 threads) reads 4 ttm A and 8 ttn B floats per k.
      double warp_ksteps = d.batch * d.m * d.n * d.k / (fragment * p_.warp_size);
      b.shared_us = warp_ksteps * (4 * ttm + 8 * ttn) * 4 / (p_.shared_bytes_per_clock * sms * p_.clock_hz);
    }
    return b;
  }

  Result<Body> row_kernel(const PlanKernel& k, const Grid& g, const ExprEnv& env, double resident,
                          Estimator::Occupancy* occ) {
    const OpSpec* op = primary_op(k);
    VINCI_ASSIGN_OR_RETURN(double n_out, evald(k.cost.elements, env));
    VINCI_ASSIGN_OR_RETURN(double br, evald(k.cost.bytes_read, env));
    VINCI_ASSIGN_OR_RETURN(double bw, evald(k.cost.bytes_written, env));
    VINCI_ASSIGN_OR_RETURN(double fl, evald(k.cost.flops, env));
    double rows = 0, len = 0, inner = 1;
    if (op && !op->inputs.empty() && ctx_.shape(op->inputs[0])) {
      const std::vector<int64_t>& x = *ctx_.shape(op->inputs[0]);
      int64_t rank = static_cast<int64_t>(x.size());
      if (op->code() == OpCode::kLayerNorm) {
        int64_t trailing = 1;  // layer_norm normalises over its module's trailing shape
        for (const auto& m : ctx_.task().modules)
          if (m.name == op->module && m.attrs.contains("shape") && m.attrs["shape"].is_array())
            trailing = static_cast<int64_t>(m.attrs["shape"].size());
        len = product(std::vector<int64_t>(x.end() - std::min(trailing, rank), x.end()));
      } else {
        int64_t dim = attr_int_or(op->attrs, "dim", -1);
        if (dim < 0) dim += rank;
        dim = std::clamp<int64_t>(dim, 0, std::max<int64_t>(0, rank - 1));
        len = rank ? static_cast<double>(x[static_cast<size_t>(dim)]) : 1;
        inner = product(std::vector<int64_t>(x.begin() + std::min(dim + 1, rank), x.end()));
      }
      rows = product(x) / std::max(1.0, len);
    } else {
      rows = std::max(1.0, n_out);
      len = std::max(1.0, br / 4 / rows);
    }
    double numel = rows * len;
    double vw = static_cast<double>(std::max<int64_t>(1, k.vector_width));
    // The generator's float4 path runs only on rows whose length divides by 4; others fall back
    // to scalar loads at run time.
    if (std::fmod(len, vw) != 0) vw = 1;
    double unroll = static_cast<double>(parse_int_or(k.knobs, "row.unroll", 1));
    const OpCode name = op ? op->code() : OpCode::kUnknown;
    bool online = k.algorithm != "two_pass";
    // Passes over the input as the generator writes them (its cost.bytes_read counts every pass)
    // and the block-wide reductions each row needs.
    double passes = 1, reductions = 1;
    if (name == OpCode::kSoftmax || name == OpCode::kLogSoftmax)
      passes = online ? 2 : 3, reductions = online ? 1 : 2;
    else if (name == OpCode::kRmsNorm)
      passes = 2;
    else if (name == OpCode::kLayerNorm)
      passes = 3, reductions = 2;
    bool warp_per_row = k.reduction == "warp_shuffle";
    bool thread_per_row = k.reduction == "sequential";  // the generator's row.strategy thread_per_row
    // row.strategy inner_tile: a block holds 32 neighbouring rows (one lane each) and splits their
    // length over its warps.
    bool tile = k.reduction == "inner_tile";
    Resources r{g.threads, kBaseRegsRow + static_cast<int64_t>(2 * vw * unroll) + (online ? 8 : 0), k.shared_bytes};
    *occ = est_.occupancy(r);
    Body b;
    if (occ->bps == 0) return b;
    double threads = static_cast<double>(g.threads);
    double lanes_per_row = thread_per_row ? 1.0 : warp_per_row ? p_.warp_size : tile ? threads / p_.warp_size : threads;
    // Threads past the row's end idle: short rows fill only part of a block.
    double busy = std::min(1.0, len / (lanes_per_row * vw));
    // inner_tile: lanes past the last of fewer than 32 neighbouring rows idle too.
    if (tile) busy *= std::min(1.0, inner / p_.warp_size);
    double warp_inflight = static_cast<double>(p_.warp_size) * 4 * vw * unroll * busy;
    double concurrent_rows = static_cast<double>(std::min<int64_t>(g.blocks, p_.sms * occ->bps)) *
                             (thread_per_row ? threads
                              : warp_per_row ? static_cast<double>(occ->warps_per_block)
                              : tile         ? p_.warp_size
                                             : 1.0);
    double cap = p_.l2_bytes * p_.l2_usable_fraction;
    // Passes after the first re-read the row: from L2 while the rows in flight fit.
    double reread = std::min(br, (passes - 1) * numel * 4);
    bool reread_hits = concurrent_rows * len * 4 <= cap;
    double first = br - reread;
    // A reduction over a non-innermost dim (inner > 1) reads with stride `inner`: each lane's 4
    // bytes cost a 32-byte sector, which holds the elements of min(8, inner) neighbouring rows.
    // A thread per row puts neighbouring rows on neighbouring lanes: coalesced when inner > 1.
    // inner_tile's lanes read neighbouring rows too; under 8 live lanes a warp's load is less
    // than one sector, served by L2.
    // A block or a warp per row: a block whose warps run all the rows of a sector (a warp per
    // row, at least 8 warps) reads whole sectors between them: L1_049's 1024-thread plan takes
    // 3.24 ms on the H200, 1.5x PyTorch's time. Otherwise the sector's other rows run in other
    // blocks, on other SMs at other times, and DRAM serves the sector again for each: L1_047's
    // block per row takes 15.0 ms for 8.6 GB, the time of 8 x 8.6 GB at 4.6 TB/s.
    double sector = tile && inner < 8 ? 8.0 / inner : 1.0;  // L2 reads per byte used
    double refetch = 0;                                     // DRAM bytes read again
    if (inner > 1 && !thread_per_row && !tile) {
      double sector_rows = std::min(8.0, inner);
      double rows_per_block = warp_per_row ? static_cast<double>(occ->warps_per_block) : 1.0;
      if (rows_per_block < sector_rows) refetch = (sector_rows - 1) * br;
    }
    b.dram_bytes = first * (1 - resident) + bw + (reread_hits ? 0 : reread) + refetch;
    b.l2_bytes = first * resident + (reread_hits ? reread : 0) + (sector - 1) * br;
    auto [td, tl] = est_.memory_s(b.dram_bytes, b.l2_bytes, g.blocks, *occ, warp_inflight);
    b.mem_us = td;
    b.l2_us = tl;
    double lane_rate = p_.fp32_peak_flops / 2 / static_cast<double>(p_.sms);
    double instr = numel * passes * kIndexInstructions / (vw * unroll) / 2 + fl;
    b.compute_us = est_.compute_s(instr / std::max(busy, 1e-3), g.blocks, *occ, lane_rate, kIssueWarpsPerSm);
    b.flops = fl;
    if (thread_per_row && inner == 1) {
      // Contiguous rows, one per lane: every warp load touches 32 lines, and L1 serves one
      // wavefront per clock per SM (L1 keeps each line for the thread's next loads).
      double warp_loads = numel * passes / (static_cast<double>(p_.warp_size) * vw);
      b.shared_us = warp_loads * p_.warp_size / (static_cast<double>(p_.sms) * p_.clock_hz);
    }
    // Each row's reduction is a dependent chain: log2(32) shuffles per warp; a block adds a
    // shared-memory exchange and syncs (tree: one per halving step).
    double log_threads = std::log2(std::max(2.0, threads));
    double cycles;
    if (thread_per_row)
      cycles = 0;  // the thread saw the whole row: nothing to exchange
    else if (warp_per_row)
      cycles = 5 * p_.shuffle_cycles;
    else if (tile)
      cycles = 2 * p_.sync_cycles + (threads / p_.warp_size) * p_.shared_cycles;
    else if (k.reduction == "block_tree")
      cycles = log_threads * (p_.sync_cycles + p_.shared_cycles);
    else
      cycles = 10 * p_.shuffle_cycles + 2 * p_.sync_cycles + p_.shared_cycles;
    b.latency_us = std::ceil(rows / std::max(1.0, concurrent_rows)) * reductions * cycles / p_.clock_hz;
    return b;
  }

  // --- library steps -------------------------------------------------------------------------
  // What a library op does beyond reading its inputs and writing its outputs once: its kernel
  // launches, flops and extra traffic (library_work fills it, library_step prices it).
  struct LibraryWork {
    int launches = 1;
    double flops = 0, extra_bytes = 0, extra_ws = 0, rate = 0;
    double row_blocks = 0;  // > 0: one block per row (PyTorch's softmax and layer_norm kernels)
    bool gemm = false;
    bool view = false;  // no kernel: a view of its input
    GemmDims gd;
  };

  // Ops PyTorch computes as a few whole-tensor kernels: launches, the extra bytes read and written
  // and the flops per input element; the extra working set is the input's size.
  struct ComposedCost {
    int launches;
    double extra_per_element;  // x 4 bytes
    double flops_per_element;
  };
  static void composed(const ComposedCost& c, double x_elems, LibraryWork* w) {
    w->launches = c.launches;
    w->extra_bytes = c.extra_per_element * x_elems * 4;
    w->extra_ws = x_elems * 4;
    w->flops = x_elems * c.flops_per_element;
  }

  Status library_work(const OpSpec& op, const ModuleSpec* mod, double x_elems, double out_elems, double out_bytes,
                      LibraryWork* w) {
    const OpCode n = op.code();
    switch (n) {
      case OpCode::kReshape:
      case OpCode::kFlatten:
      case OpCode::kSlice:
      case OpCode::kSelect:
      case OpCode::kExpand:
        w->launches = 0;  // a view (Python indexing included): no kernel
        w->view = true;
        return Status();
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
      case OpCode::kSqrt:
      case OpCode::kClamp:
      case OpCode::kMulScalar:
      case OpCode::kAddScalar:
      case OpCode::kDivScalar:
      case OpCode::kAdd:
      case OpCode::kSub:
      case OpCode::kMul:
      case OpCode::kDiv: w->flops = out_elems * unary_flops(n); return Status();
      case OpCode::kSquare: w->flops = out_elems; return Status();
      case OpCode::kMatmul:
      case OpCode::kLinear: {
        VINCI_ASSIGN_OR_RETURN(w->gd, gemm_dims(op));
        w->flops = 2 * w->gd.batch * w->gd.m * w->gd.n * w->gd.k;
        w->gemm = true;
        return Status();
      }
      case OpCode::kSum:
      case OpCode::kMean:
      case OpCode::kAmax:
      case OpCode::kAmin:
      case OpCode::kNormL2: w->flops = x_elems * 2; return Status();
      case OpCode::kLogsumexp:
        w->flops = x_elems * 6;
        w->extra_bytes = x_elems * 4, w->extra_ws = x_elems * 4;  // max, then sum
        return Status();
      case OpCode::kSoftmax:
      case OpCode::kLogSoftmax:
      case OpCode::kLayerNorm: return row_op_work(op, mod, x_elems, w), Status();
      // x / sqrt(mean(x * x) + eps): x*x (read, write), mean (read), add, sqrt (tiny), div (read x
      // and the row scale, write).
      case OpCode::kRmsNorm: return composed({5, 3, 4}, x_elems, w), Status();
      case OpCode::kBatchNorm:  // statistics, then normalise
      case OpCode::kGroupNorm:
      case OpCode::kInstanceNorm:  // per (sample, channel), as batch_norm
        return composed({2, 1, 8}, x_elems, w), Status();
      case OpCode::kMseLoss: return composed({3, 3, 3}, x_elems, w), Status();  // sub, pow, mean
      case OpCode::kSmoothL1Loss: return composed({2, 2, 4}, x_elems, w), Status();
      case OpCode::kCrossEntropy:
        return composed({2, 2, 8}, x_elems, w), Status();  // log_softmax, nll_loss
      // log t, log p, sub, mul, sum, div
      case OpCode::kKlDiv: return composed({6, 8, 10}, x_elems, w), Status();
      case OpCode::kHingeLoss:
        return composed({4, 5, 4}, x_elems, w), Status();  // mul, rsub, clamp, mean
      // products and norms, divide, rsub, mean
      case OpCode::kCosineSimilarityLoss: return composed({4, 2, 6}, x_elems, w), Status();
      case OpCode::kCumsumReverse:
        return composed({3, 4, 2}, x_elems, w), Status();  // flip, cumsum, flip
      // cumsum of the narrowed view, zeros, cat
      case OpCode::kCumsumExclusive: return composed({3, 2, 2}, x_elems, w), Status();
      // x.norm(2, dim) (reads x), clamp_min on the norms, x / norm (reads x and the norms).
      case OpCode::kNormalize: return composed({3, 1, 3}, x_elems, w), Status();
      // two pairwise distances (sub, norm), sub + margin, clamp, mean
      case OpCode::kTripletMarginLoss: return composed({6, 4, 8}, x_elems, w), Status();
      case OpCode::kConv1d:
      case OpCode::kConv2d:
      case OpCode::kConv3d:
      case OpCode::kConvTranspose1d:
      case OpCode::kConvTranspose2d:
      case OpCode::kConvTranspose3d: return conv_work(op, mod, x_elems, out_elems, w);
      case OpCode::kMaxPool1d:
      case OpCode::kMaxPool2d:
      case OpCode::kMaxPool3d:
      case OpCode::kAvgPool1d:
      case OpCode::kAvgPool2d:
      case OpCode::kAvgPool3d:
      case OpCode::kAdaptiveAvgPool2d:
      case OpCode::kAdaptiveAvgPool3d:
      case OpCode::kTriu:  // an index compare a element: read once, write once
      case OpCode::kTril: w->flops = x_elems; return Status();
      case OpCode::kCumsum:
      case OpCode::kCumprod:
      case OpCode::kFrobeniusNorm:
      case OpCode::kArgmax:
      case OpCode::kArgmin: w->flops = x_elems * 2; return Status();
      case OpCode::kPermute:
      case OpCode::kTranspose:
      case OpCode::kSplit:
        w->launches = static_cast<int>(std::max<size_t>(1, op.outputs.size()));  // contiguous copies
        return Status();
      case OpCode::kConcat:  // one copy kernel: reads every input once, writes the output once
      case OpCode::kPad:     // one copy kernel into the zero-filled, larger output
      case OpCode::kRoll:    // one gather-copy kernel
        w->launches = 1;
        return Status();
      case OpCode::kCausalMask: {
        w->launches = 3;  // ones, triu, masked_fill
        const std::vector<int64_t>& x = *ctx_.shape(op.inputs[0]);
        double mask = x.size() >= 2 ? static_cast<double>(x[x.size() - 1] * x[x.size() - 2]) : 1;
        w->extra_bytes = 3 * mask;  // bool mask written twice, read once
        return Status();
      }
      case OpCode::kSelfAttention: return self_attention_work(op, mod, w), Status();
      case OpCode::kScaledDotProductAttention: return sdpa_work(op, x_elems, w), Status();
      case OpCode::kEinsum: return einsum_work(op, w), Status();
      case OpCode::kLstm:
      case OpCode::kGru:
      case OpCode::kElmanRnn: return recurrent_work(op, mod, w), Status();
      case OpCode::kRelativePositionBias:
        w->launches = 3;  // the index to the device, index_select, the permuted contiguous copy
        w->extra_bytes = 2 * out_bytes;
        w->extra_ws = out_bytes;
        return Status();
      case OpCode::kUnknown: break;
    }
    return invalid_argument("sim: no cost model for library op '" + op.op + "'");
  }

  // softmax, log_softmax and layer_norm: PyTorch gives each row one block (row_blocks), and a
  // row too long for one pass reads it again.
  void row_op_work(const OpSpec& op, const ModuleSpec* mod, double x_elems, LibraryWork* w) {
    const std::vector<int64_t>& x = *ctx_.shape(op.inputs[0]);
    auto rows_of = [&](int64_t trailing_dims) {
      int64_t rank = static_cast<int64_t>(x.size());
      return product(std::vector<int64_t>(x.begin(), x.end() - std::min(trailing_dims, rank)));
    };
    if (op.code() == OpCode::kLayerNorm) {
      int64_t trailing = mod && mod->attrs.contains("shape") && mod->attrs["shape"].is_array()
                             ? static_cast<int64_t>(mod->attrs["shape"].size())
                             : 1;
      w->row_blocks = rows_of(trailing);
      w->extra_bytes = x_elems * 4;  // Welford statistics pass, then the normalising pass
      w->extra_ws = x_elems * 4;
      w->flops = x_elems * 8;
      return;
    }
    int64_t dim = attr_int_or(op.attrs, "dim", -1);
    if (dim < 0) dim += static_cast<int64_t>(x.size());
    double len =
        static_cast<double>(x.at(static_cast<size_t>(std::clamp<int64_t>(dim, 0, static_cast<int64_t>(x.size()) - 1))));
    if (len > kPersistentSoftmaxMax) {
      w->extra_bytes = 2 * x_elems * 4;
      // Rows in flight: one block per row, about two resident per SM.
      w->extra_ws = std::min(x_elems * 4, 2.0 * static_cast<double>(p_.sms) * len * 4);
    }
    w->flops = x_elems * 8;
    if (dim == static_cast<int64_t>(x.size()) - 1) w->row_blocks = rows_of(1);
  }

  // 2 x output elements x (input channels / groups) x kernel volume; the weight's shape is
  // [out, in/groups, k...] (transposed: [in, out/groups, k...]). A transposed convolution
  // scatters each input element into (out/groups) x kernel volume outputs: 2 x input elements
  // x that (a strided one reaches each output from only 1/prod(stride) of the taps).
  Status conv_work(const OpSpec& op, const ModuleSpec* mod, double x_elems, double out_elems, LibraryWork* w) {
    const std::vector<int64_t>* wt = ctx_.shape(op.module + ".weight");
    if (!wt) return invalid_argument("sim: conv op '" + op.outputs.at(0) + "' has no weight shape");
    bool transposed = op_is_transposed_conv(op.code());
    double kvol = product(std::vector<int64_t>(wt->begin() + 2, wt->end()));
    double per_out =
        transposed ? static_cast<double>((*wt)[0]) * kvol /
                         std::max<int64_t>(1, attr_int_or(mod ? mod->attrs : nlohmann::json::object(), "groups", 1))
                   : static_cast<double>((*wt)[1]) * kvol;
    w->flops = 2 * out_elems * per_out;
    if (transposed) w->flops = 2 * x_elems * static_cast<double>((*wt)[1]) * kvol;
    w->rate = p_.fp32_library_flops * kConvOfGemm;
    return Status();
  }

  // nn.MultiheadAttention as the executor runs it: in_proj, q/k/v copies, scale, Q K^T, softmax,
  // A V, a contiguous transpose, out_proj.
  void self_attention_work(const OpSpec& op, const ModuleSpec* mod, LibraryWork* w) {
    const std::vector<int64_t>& x = *ctx_.shape(op.inputs[0]);
    double S = static_cast<double>(x.at(0)), B = static_cast<double>(x.at(1)), E = static_cast<double>(x.at(2));
    double heads = static_cast<double>(mod ? attr_int_or(mod->attrs, "heads", 1) : 1);
    double tokens = S * B, scores = B * heads * S * S;
    w->launches = 10;
    w->flops = 2 * tokens * E * 3 * E + 4 * tokens * S * E + 2 * tokens * E * E + scores * 8;
    w->extra_bytes = tokens * E * 4 * (3 + 6 + 2 + 2 + 2) + scores * 4 * 4;
    w->extra_ws = scores * 4;
    w->rate = p_.fp32_library_flops;
  }

  // Q [..., L, E], K [..., S, E], V [..., S, Ev]: scale Q, Q K^T, softmax, A V.
  void sdpa_work(const OpSpec& op, double x_elems, LibraryWork* w) {
    const std::vector<int64_t>& q = *ctx_.shape(op.inputs[0]);
    const std::vector<int64_t>* k = ctx_.shape(op.inputs[1]);
    const std::vector<int64_t>* v = ctx_.shape(op.inputs[2]);
    double L = static_cast<double>(q.at(q.size() - 2)), E = static_cast<double>(q.back());
    double S = k ? static_cast<double>(k->at(k->size() - 2)) : L;
    double Ev = v ? static_cast<double>(v->back()) : E;
    double heads = x_elems / std::max(1.0, L * E);
    double scores = heads * L * S;
    w->launches = 4;
    w->flops = x_elems + 2 * scores * E + scores * 8 + 2 * scores * Ev;
    w->extra_bytes = 2 * x_elems * 4 + scores * 4 * 4;
    w->extra_ws = scores * 4;
    w->rate = p_.fp32_library_flops;
  }

  // Contracted left to right as torch.einsum does without opt_einsum: each step a permuted copy of
  // the operands and one bmm over the union of the two operands' letters.
  void einsum_work(const OpSpec& op, LibraryWork* w) {
    std::string eq = op.attrs.value("equation", std::string());
    size_t arrow = eq.find("->");
    std::vector<std::string> subs;
    std::string lhs = eq.substr(0, arrow == std::string::npos ? eq.size() : arrow);
    for (size_t pos = 0, i = 0; i <= lhs.size(); ++i)
      if (i == lhs.size() || lhs[i] == ',') subs.push_back(lhs.substr(pos, i - pos)), pos = i + 1;
    std::string out_sub = arrow == std::string::npos ? "" : eq.substr(arrow + 2);
    std::map<char, double> size_of;
    for (size_t i = 0; i < subs.size() && i < op.inputs.size(); ++i) {
      const std::vector<int64_t>* sh = ctx_.shape(op.inputs[i]);
      for (size_t k = 0; sh && k < subs[i].size() && k < sh->size(); ++k)
        size_of[subs[i][k]] = static_cast<double>((*sh)[k]);
    }
    std::string cur = subs.empty() ? "" : subs[0];
    for (size_t i = 1; i < subs.size(); ++i) {
      std::string both = cur;
      for (char c : subs[i])
        if (both.find(c) == std::string::npos) both += c;
      double vol = 1;
      for (char c : both) vol *= size_of.count(c) ? size_of[c] : 1.0;
      w->flops += 2 * vol;
      std::string later = out_sub;
      for (size_t j = i + 1; j < subs.size(); ++j) later += subs[j];
      cur.clear();
      double kept = 1;
      for (char c : both)
        if (later.find(c) != std::string::npos) cur += c, kept *= size_of.count(c) ? size_of[c] : 1.0;
      w->extra_bytes += 2 * kept * 4;  // the intermediate written and read back
    }
    w->launches = static_cast<int>(std::max<size_t>(1, 2 * (subs.size() - 1)));
    w->extra_ws = w->extra_bytes / 2;
    w->rate = p_.fp32_library_flops;
  }

  // A recurrence: one step after another. Per step and layer-direction the recurrent GEMM
  // (weight_hh, L2-resident after the first step) and the gate arithmetic; cuDNN runs the input
  // projections of a whole layer as one GEMM.
  void recurrent_work(const OpSpec& op, const ModuleSpec* mod, LibraryWork* w) {
    const OpCode n = op.code();
    const std::vector<int64_t>& x = *ctx_.shape(op.inputs[0]);
    const auto& ma = mod ? mod->attrs : nlohmann::json::object();
    bool batch_first = attr_bool_or(ma, "batch_first", false);
    double T = static_cast<double>(batch_first ? x.at(1) : x.at(0));
    double B = static_cast<double>(batch_first ? x.at(0) : x.at(1));
    double chains = 1, gates = 1, recurrent_bytes = 0;
    w->flops = 0;
    if (n == OpCode::kElmanRnn) {
      const std::vector<int64_t>* wt = ctx_.shape(op.module + ".weight");
      double h = wt ? static_cast<double>((*wt)[0]) : 1, k = wt ? static_cast<double>((*wt)[1]) : 1;
      w->flops = T * (2 * B * k * h + 2 * B * h);
      recurrent_bytes = h * k * 4;
      w->launches = static_cast<int>(3 * T);  // cat, linear, tanh per step
    } else {
      gates = n == OpCode::kLstm ? 4 : 3;
      chains = static_cast<double>(attr_int_or(ma, "layers", 1) * (attr_bool_or(ma, "bidirectional", false) ? 2 : 1));
      for (const auto& [name, shape] : ctx_.shapes_) {
        if (name.rfind(op.module + ".weight_", 0) != 0 || shape.size() != 2) continue;
        w->flops += 2 * T * B * static_cast<double>(shape[0] * shape[1]);  // ih and hh GEMMs
        if (name.find("weight_hh") != std::string::npos)
          recurrent_bytes += static_cast<double>(shape[0] * shape[1]) * 4;
      }
      const std::vector<int64_t>* hh = ctx_.shape(op.module + ".weight_hh_l0");
      double h = hh ? static_cast<double>((*hh)[1]) : 1;
      w->flops += chains * T * B * h * gates * 6;  // gate nonlinearities and state updates
      w->launches = static_cast<int>(chains * (T + 1));
    }
    w->extra_bytes = T * recurrent_bytes;  // weight_hh re-read every step
    w->extra_ws = recurrent_bytes / std::max(1.0, chains);
    w->rate = p_.fp32_library_flops * 0.25;  // small-M GEMMs one step at a time
  }

  // precision "tf32": a matrix product that cuBLAS may run on TF32 tensor cores; "bf16", "fp16":
  // on 16-bit tensor cores.
  Result<StepPrediction> library_step(const OpSpec& op, Precision precision = Precision::kFp32) {
    StepPrediction s;
    s.what = "library:" + op.op;
    s.family = StepFamily::kLibraryOther;
    std::vector<std::string> reads = op.inputs, writes = op.outputs;
    const ModuleSpec* mod = nullptr;
    for (const auto& m : ctx_.task().modules)
      if (m.name == op.module) mod = &m;
    if (mod) {
      const std::string prefix = op.module + ".";
      for (auto it = ctx_.shapes_.lower_bound(prefix);
           it != ctx_.shapes_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        reads.push_back(it->first);
    }
    double resident = resident_fraction(reads);
    auto bytes_of = [&](const std::vector<std::string>& names) {
      double t = 0;
      for (const auto& n : names) t += buffer_bytes(n);
      return t;
    };
    double in_bytes = bytes_of(reads), out_bytes = bytes_of(writes);
    double x_elems = op.inputs.empty() || !ctx_.shape(op.inputs[0]) ? 0 : product(*ctx_.shape(op.inputs[0]));
    double out_elems = out_bytes / 4;
    if (!find_op(op.op)) return invalid_argument("sim: no cost model for library op '" + op.op + "'");
    double cap = p_.l2_bytes * p_.l2_usable_fraction;
    // What the op moves beyond reading its inputs once and writing its outputs once.
    LibraryWork w;
    w.rate = p_.fp32_peak_flops * 0.5;
    VINCI_RETURN_IF_ERROR(library_work(op, mod, x_elems, out_elems, out_bytes, &w));
    if (w.view) {
      in_bytes = out_bytes = 0;
      s.family = StepFamily::kView;
    }
    if (w.gemm) s.family = StepFamily::kLibraryGemm;
    int launches = w.launches;
    const bool gemm = w.gemm;
    const GemmDims& gd = w.gd;
    const double extra_bytes = w.extra_bytes, extra_ws = w.extra_ws, flops = w.flops, rate = w.rate,
                 row_blocks = w.row_blocks;
    // A 16-bit library product casts each FP32 operand (the inputs, and the module's weights at
    // every call) to 16 bits before it and its output back to FP32 after it, one elementwise kernel
    // each: 4 bytes read and 2 written an element (2 and 4 for the output). The product moves half
    // the bytes. Casting a large weight can cost more than the product saves (L2_059's 32768 x
    // 32768 weight: 2.07 ms in BF16 on the H200, 1.18 ms in TF32).
    double cast_bytes = 0;
    int cast_launches = 0;
    if (gemm && is_16bit_precision(precision)) {
      cast_bytes = 1.5 * (in_bytes + out_bytes);
      cast_launches = static_cast<int>(reads.size() + writes.size());
      in_bytes /= 2;
      out_bytes /= 2;
      launches += cast_launches;
    }
    s.launches = launches;
    s.launch_us = launches * (p_.kernel_launch_us + p_.library_dispatch_us);
    Body b;
    double extra_hit = extra_ws <= cap ? 1.0 : 0.0;
    b.dram_bytes = in_bytes * (1 - resident) + out_bytes + extra_bytes * (1 - extra_hit);
    b.l2_bytes = in_bytes * resident + extra_bytes * extra_hit;
    b.flops = flops;
    double elems = std::max({x_elems, out_elems, 1.0});
    int64_t blocks = static_cast<int64_t>(std::max(1.0, ceil_div(elems, kLibraryElementsPerBlock)));
    Estimator::Occupancy occ = est_.occupancy({kLibraryBlockThreads, 32, 0});
    if (row_blocks > 0) {
      // PyTorch's softmax and layer_norm kernels give each row one block: few long rows leave
      // SMs idle.
      blocks = static_cast<int64_t>(row_blocks);
      occ = est_.occupancy({kLibraryRowThreads, 32, 0});
    }
    double DeviceProfile::*eff_term = &DeviceProfile::eff_library_other;
    if (gemm) {
      // cuBLAS fp32: 128 x 128 tiles, split-K when the tiles alone leave SMs idle.
      double tiles = gd.batch * ceil_div(gd.m, kLibraryGemmTile) * ceil_div(gd.n, kLibraryGemmTile);
      double split = std::clamp(std::floor(static_cast<double>(p_.sms) / tiles), 1.0,
                                std::min<double>(kLibrarySplitKMax, std::max(1.0, std::floor(gd.k / 256))));
      double work = tiles * split;
      double waves = std::ceil(work / static_cast<double>(p_.sms));
      double wave_eff = work / (waves * static_cast<double>(p_.sms));
      // 16-bit products: the measured rate of cuBLAS' BF16 GEMMs (FP16 runs at the same peak).
      double library_rate = precision == Precision::kTf32   ? p_.tf32_peak_flops * p_.library_tf32_fraction
                            : is_16bit_precision(precision) ? p_.bf16_measured_flops
                                                            : p_.fp32_library_flops;
      b.compute_us = flops / (library_rate * wave_eff);
      blocks = static_cast<int64_t>(work);
      occ = est_.occupancy({256, 128, 32768});
      auto [td, tl] = est_.memory_s(b.dram_bytes, b.l2_bytes, blocks, occ, 2048);
      b.mem_us = td;
      b.l2_us = tl;
      eff_term = &DeviceProfile::eff_library_gemm;
    } else {
      auto [td, tl] = est_.memory_s(b.dram_bytes, b.l2_bytes, blocks, occ, 32.0 * 16);
      b.mem_us = td;
      b.l2_us = tl;
      b.compute_us = flops / rate;
    }
    double eff = p_.*eff_term;
    double t = b.total() * 1e6;
    s.body_us = t;
    s.efficiency = eff_term;
    if (cast_launches > 0) {
      double cast_elems = cast_bytes / 6;
      int64_t cast_blocks = static_cast<int64_t>(std::max(1.0, ceil_div(cast_elems, kLibraryElementsPerBlock)));
      auto [cd, cl] =
          est_.memory_s(cast_bytes, 0, cast_blocks, est_.occupancy({kLibraryBlockThreads, 32, 0}), 32.0 * 16);
      s.cast_launches = cast_launches;
      s.cast_body_us = std::max(cd, cl) * 1e6;
      b.dram_bytes += cast_bytes;
    }
    s.exec_us = library_exec_us(p_, launches, t, eff, s.cast_launches, s.cast_body_us);
    s.bound = launches == 0 ? StepBound::kNone : t / eff < p_.kernel_floor_us ? StepBound::kFloor : b.bound;
    s.time_us = s.launch_us + s.exec_us;
    s.dram_bytes = b.dram_bytes;
    s.l2_bytes = b.l2_bytes;
    s.flops = b.flops;
    s.blocks = blocks;
    s.blocks_per_sm = occ.bps;
    s.occupancy = occ.occupancy;
    s.waves = est_.waves(blocks, occ);
    touch(reads);
    touch(writes);
    return s;
  }

 private:
  const DeviceProfile& p_;
  Estimator est_;
  const TaskContext& ctx_;
  const Plan* plan_;
  std::map<std::string, std::vector<int64_t>>* plan_shapes_;
  // Looked up by name only (never walked in order): hashed.
  std::unordered_map<std::string, double> touched_;
  std::unordered_map<std::string, const PlanBuffer*> buffers_;  // the plan's buffers by name
  mutable std::unordered_map<std::string, double> bytes_;       // buffer_bytes, once a name
  double clock_ = 0;
};

}  // namespace sim_internal

using sim_internal::PlanCoster;

Result<TaskContext> SimModel::prepare(const Task& task, const SizeMap& sizes) const {
  TaskContext ctx;
  ctx.task_ = &task;
  ctx.env_.symbols = sizes;
  VINCI_ASSIGN_OR_RETURN(ShapeMap shapes, infer_shapes(task));
  for (const auto& [name, sym] : shapes) {
    VINCI_ASSIGN_OR_RETURN(ctx.shapes_[name], eval_shape(sym, sizes));
  }
  VINCI_ASSIGN_OR_RETURN(ctx.weights_, weight_specs(task));
  for (const auto& w : ctx.weights_) {
    VINCI_ASSIGN_OR_RETURN(ctx.shapes_[w.name], eval_shape(w.shape, sizes));
  }
  for (const auto& op : task.ops)
    for (const auto& o : op.outputs) ctx.producer_[o] = &op;
  VINCI_RETURN_IF_ERROR(reprice(&ctx));
  return ctx;
}

Status SimModel::reprice(TaskContext* context) const {
  TaskContext& ctx = *context;
  const Task& task = *ctx.task_;
  ctx.reference_ = PlanPrediction();
  ctx.bound_ = TaskBound();
  const std::vector<WeightSpec>& weights = ctx.weights_;
  // The eager reference: one library step per op, in order.
  PlanCoster coster(*this, ctx, nullptr, nullptr);
  for (const auto& op : task.ops) {
    VINCI_ASSIGN_OR_RETURN(StepPrediction s, coster.library_step(op));
    ctx.reference_.time_us += s.time_us;
    ctx.reference_.steps.push_back(std::move(s));
  }

  // The roofline floor.
  TaskBound& b = ctx.bound_;
  auto bytes_of = [&](const std::string& name) {
    auto it = ctx.shapes_.find(name);
    return it == ctx.shapes_.end() ? 0.0 : product(it->second) * 4;
  };
  for (const auto& in : task.inputs) b.min_bytes += bytes_of(in.name) * (in.domain == InputDomain::kIndex ? 2 : 1);
  for (const auto& w : weights) b.min_bytes += bytes_of(w.name);
  b.min_bytes += bytes_of(task.output);
  for (const auto& s : ctx.reference_.steps) {
    if (s.family == StepFamily::kLibraryGemm || s.what == "library:self_attention" ||
        s.what.rfind("library:conv", 0) == 0)
      b.gemm_flops += s.flops;
    else
      b.other_flops += s.flops;
  }
  double t = std::max({b.min_bytes / profile_.hbm_peak_bytes_per_s,
                       b.gemm_flops / std::max(profile_.tf32_peak_flops, profile_.bf16_peak_flops) +
                           b.other_flops / profile_.fp32_peak_flops});
  b.floor_us = t * 1e6 + profile_.kernel_launch_us;
  return Status();
}

Result<PlanPrediction> SimModel::predict(const TaskContext& ctx, const Plan& plan) const {
  // Concrete shapes of the plan's buffers, for numel()/dim() and buffer sizes.
  std::map<std::string, std::vector<int64_t>> shapes;
  ExprEnv env;
  env.symbols = ctx.env_.symbols;
  for (const auto& b : plan.buffers) {
    const std::vector<int64_t>* known = ctx.shape(b.name);
    if (known && known->size() == b.shape.size()) {
      shapes[b.name] = *known;
      continue;
    }
    std::vector<int64_t> s;
    for (const auto& d : b.shape) {
      VINCI_ASSIGN_OR_RETURN(int64_t v, eval_expr(d, env));
      s.push_back(v);
    }
    shapes[b.name] = std::move(s);
  }
  env.buffer_shape = [&shapes](const std::string& name) -> Result<std::vector<int64_t>> {
    auto it = shapes.find(name);
    if (it == shapes.end()) return Status(invalid_argument("no buffer '" + name + "'"));
    return it->second;
  };
  PlanCoster coster(*this, ctx, &plan, &shapes);
  PlanPrediction out;
  out.steps.reserve(plan.steps.size());
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    Result<StepPrediction> s =
        step.kind == StepKind::kKernel ? coster.kernel_step(step, env) : coster.library_step(step.op, step.precision);
    if (!s.ok()) return Status(s.status().code(), "sim: plan step " + std::to_string(i) + ": " + s.status().message());
    out.time_us += s->time_us;
    if (s->own_kernel) out.own_us += s->time_us;
    out.steps.push_back(std::move(*s));
  }
  return out;
}

namespace {

// Rounding of a product's operands, round to nearest: TF32 and FP16 keep 10 explicit mantissa bits,
// BF16 7.
constexpr double kTf32Unit = 1.0 / 2048;
constexpr double kBf16Unit = 1.0 / 256;
// The largest finite FP16 value: a 16-bit library product writes its output in that type.
constexpr double kFp16Max = 65504;
// The largest of millions of outputs sits about this many standard deviations out: fitted to the
// H200's library TF32 GEMMs on the evaluator's signed trial (L1_001, K = 4096: max |error| 0.031).
constexpr double kTf32TailSigmas = 2.0;

// Ops that move, select or mask values without changing the ones they keep: a value's scale and
// error pass through.
bool moves_values(const OpSpec& op) {
  static const char* const kOps[] = {"reshape", "flatten", "transpose", "permute",
                                     "slice",   "select",  "expand",    "causal_mask"};
  for (const char* name : kOps)
    if (op.op == name) return op.inputs.size() == 1 && op.outputs.size() == 1;
  return false;
}

// A value no op makes and no task input names: a weight or parameter of the task.
bool is_parameter(const TaskContext& ctx, const std::map<std::string, const OpSpec*>& producer,
                  const std::string& value) {
  if (producer.count(value)) return false;
  for (const auto& in : ctx.task().inputs)
    if (in.name == value) return false;
  return true;
}

bool is_normalization(OpCode op) {
  return op == OpCode::kBatchNorm || op == OpCode::kGroupNorm || op == OpCode::kInstanceNorm ||
         op == OpCode::kLayerNorm;
}

// The extent of the dim an op's "dim" attribute names (negative counts from the end) in the
// shape of `value`; 0 when the shape or the dim is unknown.
int64_t dim_extent(const TaskContext& ctx, const std::string& value, const nlohmann::json& attrs) {
  const std::vector<int64_t>* shape = ctx.shape(value);
  if (!shape || shape->empty()) return 0;
  int64_t dim = attr_int_or(attrs, "dim", -1);
  if (dim < 0) dim += static_cast<int64_t>(shape->size());
  if (dim < 0 || dim >= static_cast<int64_t>(shape->size())) return 0;
  return (*shape)[static_cast<size_t>(dim)];
}

// RMS of a GEMM operand on the evaluator's trials: task inputs are uniform in [0, 1] or [-1, 1]
// (RMS 1/sqrt(3) either way), a Linear's weight is PyTorch's default uniform(+-1/sqrt(fan_in)), a
// softmax's output over N entries (probabilities summing to 1) at most 1/sqrt(N) (one entry near
// 1), reached through ops that only move values (attention's weights, L3_043), and any other value
// computed inside the task (activations, attention scores) is taken as 0.5, fitted to the attention
// products of L3_043 to L3_047, which pass on the H200 with K = 64 to 128.
double operand_rms(const TaskContext& ctx, const std::map<std::string, const OpSpec*>& producer,
                   const std::string& value, double fan_in) {
  if (value.size() > 7 && value.compare(value.size() - 7, 7, ".weight") == 0) return 1 / std::sqrt(3 * fan_in);
  for (const auto& in : ctx.task().inputs)
    if (in.name == value) return 1 / std::sqrt(3.0);
  std::string v = value;
  for (int hops = 0; hops < 8; ++hops) {
    auto it = producer.find(v);
    if (it == producer.end() || it->second->inputs.empty()) break;
    const OpSpec& op = *it->second;
    if (op.code() == OpCode::kSoftmax) {
      int64_t n = dim_extent(ctx, op.inputs[0], op.attrs);
      if (n == 0) break;
      return 1 / std::sqrt(static_cast<double>(std::max<int64_t>(1, n)));
    }
    if (!moves_values(op)) break;
    v = op.inputs[0];
  }
  return 0.5;
}

}  // namespace

double SimModel::product_abs_error(const TaskContext& ctx, const OpSpec& op, Precision precision, bool library,
                                   double* largest) const {
  if (largest) *largest = 0;
  const std::vector<int64_t>* a = op.inputs.empty() ? nullptr : ctx.shape(op.inputs[0]);
  if (!a || a->empty()) return 0;
  double k = 0, m = 0, n = 0;
  std::string b_name;
  if (op.code() == OpCode::kLinear) {
    const std::vector<int64_t>* w = ctx.shape(op.module + ".weight");
    if (!w || w->empty()) return 0;
    k = static_cast<double>(a->back());
    m = product(*a) / std::max(1.0, k);
    n = static_cast<double>(w->front());
    b_name = op.module + ".weight";
  } else if (op.code() == OpCode::kMatmul && op.inputs.size() == 2) {
    const std::vector<int64_t>* b = ctx.shape(op.inputs[1]);
    if (!b || b->size() < 2 || a->size() < 2) return 0;
    bool ta = attr_bool_or(op.attrs, "transpose_a", false), tb = attr_bool_or(op.attrs, "transpose_b", false);
    m = static_cast<double>((*a)[a->size() - (ta ? 1 : 2)]);
    k = static_cast<double>((*a)[a->size() - (ta ? 2 : 1)]);
    n = static_cast<double>((*b)[b->size() - (tb ? 2 : 1)]);
    b_name = op.inputs[1];
  } else {
    return 0;
  }
  double rms_a = operand_rms(ctx, ctx.producer_, op.inputs[0], k), rms_b = operand_rms(ctx, ctx.producer_, b_name, k);
  // The largest output, as if the K products added up in one direction.
  if (largest) *largest = k * rms_a * rms_b;
  // cuBLAS runs a TF32 matrix-vector product on CUDA cores: exact as FP32. A 16-bit one still
  // rounds its operands.
  if (library && precision == Precision::kTf32 && (m <= 1 || n <= 1)) return 0;
  // Each product a*b takes two roundings; K of them add up like a random walk.
  double unit = precision == Precision::kBf16 ? kBf16Unit : kTf32Unit;
  double spread = std::sqrt(k) * rms_a * rms_b;  // one output's typical size
  return kTf32TailSigmas * unit * std::sqrt(2 * k) * rms_a * rms_b * error_downstream(ctx, op.outputs[0], spread);
}

// What the ops after a product (walked while each value has one consumer) do to its outputs'
// error, as a factor:
// - ops that only move values (reshape, transpose, ...), scalar scalings (mul_scalar, div_scalar,
//   add_scalar) and a product with a parameter (a per-channel scale) pass it on: value and error
//   scale alike;
// - a sum over a dim of N adds up N outputs' independent errors: sqrt(N) (L2_014 and L2_018 sum a
//   Linear's 8192 outputs; their TF32 plans miss atol on the H200 where one output's error alone
//   would pass);
// - a normalization (batch, group, instance or layer norm) divides by the outputs' spread, so the
//   error after it is relative to that spread: 1 / spread (a Linear's outputs spread about 1/3 on
//   the evaluator's trials, and GEMM + BatchNorm or GroupNorm tasks, L2_030 to L2_097, miss atol
//   with BF16 products on the H200 where the bare product passes; TF32's and FP16's 8x smaller
//   rounding passes);
// - a softmax turns the error relative to each probability, and what follows weights them
//   (attention's product with V, NetVLAD's aggregation): 0; so does the largest or smallest of a
//   normalized row (L2_075's min over GroupNorm's outputs), an output a few spreads from zero
//   where rtol adds to atol;
// - every other op (an activation squashes, an added bias or tensor adds a spread of its own)
//   stops the walk.
double SimModel::error_downstream(const TaskContext& ctx, const std::string& value, double spread) const {
  std::string v = value;
  double factor = 1;
  bool normalized = false;
  for (int hops = 0; hops < 12; ++hops) {
    const OpSpec* next = nullptr;
    int consumers = 0;
    for (const OpSpec& op : ctx.task().ops)
      for (const std::string& in : op.inputs)
        if (in == v) next = &op, ++consumers;
    if (consumers != 1 || next->outputs.size() != 1) return factor;
    if (next->code() == OpCode::kSoftmax) return 0;
    if (normalized && (next->code() == OpCode::kAmax || next->code() == OpCode::kAmin)) return 0;
    if (next->inputs.size() == 1 && next->code() == OpCode::kSum) {
      int64_t n = dim_extent(ctx, v, next->attrs);
      return n == 0 ? factor : factor * std::sqrt(static_cast<double>(n));
    }
    if (is_normalization(next->code()) && next->inputs.size() == 1) {
      if (normalized || spread <= 0) return factor;
      factor /= spread;
      normalized = true;
      v = next->outputs[0];
      continue;
    }
    bool scaling =
        next->code() == OpCode::kMulScalar || next->code() == OpCode::kDivScalar || next->code() == OpCode::kAddScalar;
    bool by_parameter = next->code() == OpCode::kMul && next->inputs.size() == 2 &&
                        is_parameter(ctx, ctx.producer_, next->inputs[next->inputs[0] == v ? 1 : 0]);
    bool moves = next->inputs.size() == 1 && moves_values(*next);
    if (!(scaling && next->inputs.size() == 1) && !by_parameter && !moves) return factor;
    v = next->outputs[0];
  }
  return factor;
}

double SimModel::precision_rel_error(Precision precision) const {
  switch (precision) {
    case Precision::kBf16: return profile_.bf16_rel_error;
    case Precision::kTf32:
    case Precision::kFp16: return profile_.tf32_rel_error;
    case Precision::kFp32: return profile_.fp32_rel_error;
  }
  return profile_.fp32_rel_error;
}

Result<CorrectnessPrediction> SimModel::predict_correctness(const TaskContext& ctx, const Plan& plan,
                                                            const Tolerance& tol) const {
  CorrectnessPrediction c;
  c.rel_error = profile_.fp32_rel_error;
  double tolerance = std::min(tol.atol, tol.rtol);
  ExprEnv env;
  env.symbols = ctx.env_.symbols;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& b : plan.buffers) {
    std::vector<int64_t> s;
    for (const auto& d : b.shape) {
      Result<int64_t> v = eval_expr(d, env);
      if (!v.ok()) return Status(v.status().code(), "sim: buffer '" + b.name + "': " + v.status().message());
      s.push_back(*v);
    }
    shapes[b.name] = std::move(s);
  }
  env.buffer_shape = [&shapes](const std::string& name) -> Result<std::vector<int64_t>> {
    auto it = shapes.find(name);
    if (it == shapes.end()) return Status(invalid_argument("no buffer '" + name + "'"));
    return it->second;
  };
  auto fail = [&](const std::string& why) {
    if (c.correct) c.error = why;  // the first failure is the one reported
    c.correct = false;
  };
  // Buffers the device cannot hold fail as the live allocation would: out of memory. Sizes are
  // computed with overflow checks (10^22 elements is not a small buffer wrapped around).
  for (const auto& b : plan.buffers) {
    Result<int64_t> bytes = buffer_bytes(shapes[b.name], b.dtype);
    std::string why;
    if (!bytes.ok())
      why = bytes.status().message();
    else if (profile_.memory_bytes > 0 && *bytes > profile_.memory_bytes)
      why = std::to_string(*bytes) + " bytes, more than the device's " + std::to_string(profile_.memory_bytes);
    if (why.empty()) continue;
    if (c.correct) c.rejected = "out_of_memory";
    fail("buffer " + b.name + ": out of memory: " + why);
  }
  for (const auto& step : plan.steps) {
    if (step.kind == StepKind::kLibrary && step.precision != Precision::kFp32) {
      double rel = precision_rel_error(step.precision), largest = 0;
      c.rel_error = std::max(c.rel_error, rel);
      double abs_error = product_abs_error(ctx, step.op, step.precision, /*library=*/true, &largest);
      const std::string what = "library step " + step.op.op + ": " + kPrecisions.name(step.precision) + " precision: ";
      char buf[200];
      if (rel > tolerance) {
        std::snprintf(buf, sizeof buf, "expected relative error %.1e exceeds the tolerance %.1e", rel, tolerance);
        fail(what + buf);
      } else if (step.precision == Precision::kFp16 && largest > kFp16Max) {
        std::snprintf(buf, sizeof buf, "outputs of up to ~%.1e overflow fp16 (largest finite 65504) to inf", largest);
        fail(what + buf);
      } else if (abs_error > tol.atol) {
        std::snprintf(buf, sizeof buf, "expected largest |error| %.1e near zero outputs exceeds atol %.1e", abs_error,
                      tol.atol);
        fail(what + buf);
      }
    }
    if (step.kind != StepKind::kKernel) continue;
    const PlanKernel* k = plan.find_kernel(step.kernel);
    if (!k) return invalid_argument("sim: plan step names unknown kernel '" + step.kernel + "'");
    // A launch the device refuses fails the candidate, as cuLaunchKernel would.
    // Each dimension is checked against CUDA's limits on its 64-bit value, as the live evaluator
    // checks it before narrowing it for cuLaunchKernel.
    std::array<int64_t, 3> grid{}, block{};
    for (size_t i = 0; i < 3; ++i) {
      VINCI_ASSIGN_OR_RETURN(block[i], eval_expr(step.block[i], env));
      VINCI_ASSIGN_OR_RETURN(grid[i], eval_expr(step.grid[i], env));
    }
    std::string refused = launch_dims_error(grid, block);
    int64_t threads = block[0] * block[1] * block[2];
    if (!refused.empty()) {
      fail("kernel " + k->name + ": launch refused: " + refused);
    } else if (threads > profile_.max_threads_per_block || k->shared_bytes > profile_.shared_bytes_per_block) {
      fail("kernel " + k->name + ": too many resources requested for launch (" + std::to_string(threads) +
           " threads, " + std::to_string(k->shared_bytes) + " bytes of shared memory)");
    }
    // Precision is physics, whatever the verdict says: tensor-core products (tf32, bf16, fp16) and
    // fast-math intrinsics. A kernel that says tensor cores without a precision is tf32.
    const Precision products = k->precision != Precision::kFp32 ? k->precision
                               : k->tensor_cores                ? Precision::kTf32
                                                                : Precision::kFp32;
    double err = precision_rel_error(products);
    if (knob_is(*k, "ew.math", "fast")) err = std::max(err, profile_.fast_math_rel_error);
    c.rel_error = std::max(c.rel_error, err);
    if (err > tolerance) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "expected relative error %.1e exceeds the tolerance %.1e", err, tolerance);
      fail("kernel " + k->name + ": " +
           (products != Precision::kFp32 ? kPrecisions.name(products) + std::string(" precision: ") : "fast math: ") +
           buf);
    } else if (products != Precision::kFp32 && !k->fused_values.empty()) {
      auto producer = ctx.producer_.find(k->fused_values[0]);
      double abs_error = producer == ctx.producer_.end()
                             ? 0
                             : product_abs_error(ctx, *producer->second, products, /*library=*/false, nullptr);
      if (abs_error > tol.atol) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "expected largest |error| %.1e near zero outputs exceeds atol %.1e", abs_error,
                      tol.atol);
        fail("kernel " + k->name + ": " + kPrecisions.name(products) + " precision: " + buf);
      }
    }
    if (k->verdict.guaranteed) continue;
    // The generator joins its reasons with "; " and adds their size conditions into one
    // fails_when. Precision risks are judged against the tolerance above; a size condition decides
    // tail and edge handling; a race is wrong (a re-run or a poisoned buffer shows it live); a
    // risk the model cannot classify is wrong too.
    const std::string& why = k->verdict.reason;
    auto has = [&](const char* w) { return why.find(w) != std::string::npos; };
    bool precision = has("precision") || has("tf32") || has("fast-math") || has("fast math");
    bool sized = has("tail") || has("edge") || has("bounds") || has("divide") || has("multiple");
    bool race = has("race");
    if (!k->verdict.fails_when.empty()) {
      Result<int64_t> v = eval_expr(k->verdict.fails_when, env);
      if (!v.ok()) return Status(v.status().code(), "sim: kernel " + k->name + ": fails_when: " + v.status().message());
      if (*v != 0)
        fail("kernel " + k->name + ": " + why + " (wrong when " + k->verdict.fails_when + " is nonzero; it is " +
             std::to_string(*v) + " at this size)");
    }
    if (race) fail("kernel " + k->name + ": " + why);
    if (!precision && !sized && !race)
      fail("kernel " + k->name + ": " + (why.empty() ? "risky (no reason given)" : why));
  }
  return c;
}

}  // namespace vinci
