#include "gpu/live/live_eval.h"

#include <cuda.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <ATen/Context.h>
#ifdef VINCI_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/text.h"
#include "gpu/compile/cubin.h"
#include "gpu/compile/module_check.h"
#include "gpu/compile/module_runner.h"
#include "gpu/compile/nvrtc.h"
#include "gpu/compile/triton.h"
#include "gpu/executor.h"
#include "gpu/expr.h"
#include "gpu/kernelbench_module.h"
#include "gpu/live/fused_compare.h"
#include "gpu/live/live_compare.h"
#include "gpu/live/memory_budget.h"
#include "gpu/shapes.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "gpu/task_prompt.h"

namespace vinci {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// LiveOptions::profile_phases: charges the time since the last switch to the phase being left,
// after a device synchronization. Does nothing when off.
class PhaseTimer {
 public:
  PhaseTimer(bool on, std::map<std::string, double>* out) : on_(on), out_(out) {}
  ~PhaseTimer() { to(nullptr); }
  void to(const char* phase) {
    if (!on_) return;
    cuCtxSynchronize();
    Clock::time_point now = Clock::now();
    if (current_) (*out_)[current_] += std::chrono::duration<double, std::milli>(now - since_).count();
    current_ = phase;
    since_ = now;
  }
  // After a failure that may have left the context unusable: stop synchronizing.
  void abandon() { on_ = false; }

 private:
  bool on_;
  std::map<std::string, double>* out_;
  const char* current_ = nullptr;
  Clock::time_point since_;
};

std::string cu_error(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(static_cast<int>(r))) +
         (text ? std::string(" (") + text + ")" : "");
}

// Why a candidate failed: the reason for the user, a short tag for flags and tests, and whether
// the CUDA context survived.
struct Failure {
  std::string tag;  // illegal_access, hang, launch_refused, not_written, wrong_result, ...
  std::string reason;
  bool context_lost = false;
};

class CandidateFailed : public std::exception {
 public:
  explicit CandidateFailed(Failure f) : f_(std::move(f)) {}
  const char* what() const noexcept override { return f_.reason.c_str(); }
  const Failure& failure() const { return f_; }

 private:
  Failure f_;
};

// The task's own side (its reference, inputs or weights) ran out of device memory: not the
// candidate's failure. LiveDevice::evaluate frees the worker's caches and tries once more, then
// records the task as skipped.
class ReferenceOutOfMemory : public std::exception {
 public:
  explicit ReferenceOutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

bool is_out_of_memory(const std::string& what) {
  return what.find("out of memory") != std::string::npos || what.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos;
}

void throw_if_out_of_memory(const std::string& what, const std::string& whose) {
  if (is_out_of_memory(what)) throw ReferenceOutOfMemory(whose + " ran out of device memory: " + what);
}
void throw_if_out_of_memory(const c10::Error& e, const std::string& whose) {
  throw_if_out_of_memory(e.what_without_backtrace(), whose);
}
// For a Status the task's side returned (libtorch's errors caught below it).
void throw_if_out_of_memory(const Status& s, const std::string& whose) {
  if (!s.ok()) throw_if_out_of_memory(s.message(), whose);
}

// The longest FP32 reference (with its comparison) that is run again in float64 after a miss.
constexpr double kFloat64ReferenceMaxMs = 200;

// Which kind of miss an output outside the tolerance is: the output and the FP32 reference against
// the float64 reference (gpu/live/live_compare.h, float64_check). KernelBench's verdict stands.
std::string float64_diagnosis(const TaskInstance& inst, const std::vector<torch::Tensor>& x, const torch::Tensor& out,
                              const torch::Tensor& ref, const Tolerance& tol) {
  Result<at::Tensor> ref64 = inst.run_float64(x);
  if (!ref64.ok()) return "no float64 reference (" + ref64.status().message() + ")";
  try {
    return float64_text(float64_check(out, ref, *ref64, tol), tol);
  } catch (const c10::Error& e) {
    return std::string("no float64 comparison (") + e.what_without_backtrace() + ")";
  }
}

[[noreturn]] void fail(std::string tag, std::string reason, bool context_lost = false) {
  throw CandidateFailed(Failure{std::move(tag), std::move(reason), context_lost});
}

// A CUDA error after a launch: the sticky ones lose the context.
[[noreturn]] void fail_cuda(const std::string& what, CUresult r) {
  std::string tag = "cuda_error";
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: tag = "illegal_access"; break;
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT: tag = "trap"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: tag = "out_of_memory"; break;
    default: break;
  }
  fail(tag, what + ": " + cu_error(r), true);
}

// Bit-for-bit equality (NaN payloads included), so "unchanged" and "identical" mean exactly that.
bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (is_float(a)) return torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
  return torch::equal(a.contiguous(), b.contiguous());
}

// The poison a candidate's own buffers start from: NaN for floats, the smallest int64 for indices.
// Every buffer a candidate may write sits between two guard zones of this many bytes, filled with
// a pattern no kernel computes by chance (a NaN payload). A kernel that writes a little past the
// end of a buffer (a missing tail check: up to a block's worth of items, 1024 threads x 8 items x
// 4-wide vectors x 4 bytes = 128 KiB) writes into a zone, and the zones are checked after every
// run of the candidate: the verdict no longer depends on what the allocator put next to the buffer.
constexpr int64_t kGuardBytes = 256 << 10;
constexpr int32_t kGuardWord = 0x7fa5a5a5;

struct GuardedBuffer {
  std::string name;
  torch::Tensor whole;  // guard, buffer, guard
  int64_t guard_words = 0, buffer_words = 0;
};

// A buffer of shape and dtype inside its guard zones; the buffer is filled with fill_from (a copy
// of it) or with the poison of its dtype. Zones must stay whole: guards_intact().
torch::Tensor guarded(const std::string& name, const std::vector<int64_t>& shape, torch::ScalarType dtype,
                      const torch::Tensor& fill_from, std::vector<GuardedBuffer>* guards) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  if (elem != 4 && elem != 8) {  // no dtype of vinci's tasks: a plain buffer, unguarded
    if (fill_from.defined()) return fill_from.clone();
    return torch::full(shape, 0, torch::TensorOptions().device(torch::kCUDA).dtype(dtype));
  }
  const int64_t guard_elems = kGuardBytes / elem;
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  torch::Tensor whole = torch::empty({numel + 2 * guard_elems}, opts);
  whole.view(torch::kInt32).fill_(kGuardWord);
  torch::Tensor buffer = whole.narrow(0, guard_elems, numel).view(shape);
  if (fill_from.defined()) {
    buffer.copy_(fill_from);
  } else if (dtype == torch::kInt64) {
    buffer.fill_(std::numeric_limits<int64_t>::min());
  } else {
    buffer.fill_(std::nan(""));
  }
  guards->push_back({name, whole, kGuardBytes / 4, numel * elem / 4});
  return buffer;
}

// Fills a buffer with the poison of its dtype: NaN for floats, the smallest int64 for indices,
// 0xff bytes for anything else (Triton's global scratch).
void poison(torch::Tensor& t) {
  if (is_float(t)) {
    t.fill_(std::nan(""));
  } else if (t.scalar_type() == torch::kInt64) {
    t.fill_(std::numeric_limits<int64_t>::min());
  } else {
    t.view(torch::kUInt8).fill_(0xff);
  }
}

bool overlaps(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  auto lo_a = reinterpret_cast<uintptr_t>(a.data_ptr());
  auto lo_b = reinterpret_cast<uintptr_t>(b.data_ptr());
  uintptr_t hi_a = lo_a + a.numel() * a.element_size();
  uintptr_t hi_b = lo_b + b.numel() * b.element_size();
  return lo_a < hi_b && lo_b < hi_a;
}

// A task at its sizes, as a cache key: "L1_019/B=8/D=1001".
std::string instance_key(const TaskInstance& inst) {
  std::string key = inst.task().id;
  for (const auto& [k, v] : inst.sizes()) key += "/" + k + "=" + std::to_string(v);
  return key;
}

// A step that launches a Triton kernel: its function and what its launch needs beyond the
// arguments (Triton's convention: the arguments, then the global and the profile scratch pointers).
struct TritonStep {
  CUfunction function = nullptr;
  unsigned shared = 0;              // dynamic shared memory, bytes
  int64_t global_scratch_size = 0;  // bytes per program
};

// One device global of a loaded module (a `__device__` variable: memory that outlives a launch)
// and a copy of its bytes as the module was loaded.
struct DeviceGlobal {
  std::string name;
  CUdeviceptr at = 0;
  size_t bytes = 0;
  CUdeviceptr pristine = 0;
};

struct LoadedPlan {
  std::map<std::string, CUfunction> functions;
  std::map<size_t, TritonStep> triton;  // by step index
  std::vector<CUmodule> modules;
  std::vector<DeviceGlobal> globals;  // of every module: reset before each run of the candidate
  // Set when the context is lost: unloading would wait for a kernel that never ends (a hang);
  // the worker exits instead and the driver reclaims everything.
  bool abandon = false;
  LoadedPlan() = default;
  LoadedPlan(const LoadedPlan&) = delete;
  LoadedPlan& operator=(const LoadedPlan&) = delete;
  ~LoadedPlan() {
    if (abandon) return;
    for (const DeviceGlobal& g : globals) cuMemFree(g.pristine);
    for (CUmodule m : modules) cuModuleUnload(m);
  }

  // Records the device globals of a module just loaded from image (a cubin) and copies their
  // state at load, so that every run of the candidate starts from it (reset_globals): a plan must
  // not remember in `__device__` variables what an earlier run computed. "" when done, else why
  // the globals cannot be tracked (the candidate is then not run).
  std::string track_globals(CUmodule module, std::string_view image) {
    Result<std::vector<CubinGlobalSection>> sections = cubin_global_sections(image);
    if (!sections.ok()) return "its device globals cannot be listed: " + sections.status().message();
    for (const CubinGlobalSection& s : *sections) {
      for (const auto& symbol : s.symbols) {
        DeviceGlobal g;
        g.name = symbol.first;
        CUresult r = cuModuleGetGlobal(&g.at, &g.bytes, module, g.name.c_str());
        if (r != CUDA_SUCCESS)
          return "its device global '" + g.name + "' (" + s.section +
                 ") cannot be located to be reset between runs: " + cu_error(r);
        if (g.bytes == 0) continue;
        r = cuMemAlloc(&g.pristine, g.bytes);
        if (r != CUDA_SUCCESS)
          return "no memory for a copy of its device global '" + g.name + "' (" + std::to_string(g.bytes) +
                 " bytes): " + cu_error(r);
        globals.push_back(g);
        r = cuMemcpyDtoD(g.pristine, g.at, g.bytes);
        if (r != CUDA_SUCCESS) return "cannot copy its device global '" + g.name + "': " + cu_error(r);
      }
    }
    return "";
  }
};

// Waits for everything queued so far, giving up after timeout_s: a candidate kernel that never
// returns must not hang the worker.
void wait_for(CUevent ev, double timeout_s, const std::string& what) {
  CUresult r = cuEventRecord(ev, nullptr);
  if (r != CUDA_SUCCESS) fail_cuda(what, r);
  Clock::time_point t0 = Clock::now();
  for (;;) {
    r = cuEventQuery(ev);
    if (r == CUDA_SUCCESS) return;
    if (r != CUDA_ERROR_NOT_READY) fail_cuda(what, r);
    if (ms_since(t0) > timeout_s * 1000)
      fail("hang",
           what + ": still running after " + format_number("%.6g", timeout_s) + " s (an endless loop or a deadlock)",
           true);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

struct LiveDevice::Impl {
  LiveOptions options;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string name;
  std::string arch;
  int64_t l2_bytes = 0;
  // Which GPU made a measurement, recorded in each one's settings (a queue's workers span many
  // GPUs): its UUID as nvidia-smi prints it, the kernel driver's version, the CUDA driver API's
  // version, and the SM and memory clocks the device reports (kHz; the peak, not a reading).
  std::map<std::string, std::string> identity;
  std::unique_ptr<NvrtcCompiler> nvrtc;
  std::unique_ptr<FusedCompare> fused;     // the output comparison in one pass (gpu/live/fused_compare.h)
  std::unique_ptr<TritonCompiler> triton;  // made on the first Triton plan
  std::unique_ptr<SimEvaluator> sim;       // for the roofline floor
  // KernelBench modules (docs/kernelbench_format.md, "Live evaluation"): built without the GPU by
  // the import check (its cache keeps each module's load_inline build), then run in a runner
  // process of their own on this device.
  std::unique_ptr<ModuleChecker> module_checker;
  std::unique_ptr<ModuleRunner> module_runner;
  std::string module_cache;         // the builds' folder
  bool module_cache_owned = false;  // made for this worker: removed when it ends
  std::set<Digest> modules_built;   // build keys whose import check passed in this worker
  // The worker's caches on the device: task instances (their weights) and CPU-drawn inputs,
  // bounded together by the ledger's budget (LiveOptions::cache_budget_fraction of the device's
  // memory), the least recently used evicted first. The instance an evaluation is using is never
  // evicted under it; inputs handed out stay alive while referenced.
  std::map<std::pair<std::string, int>, std::unique_ptr<TaskInstance>> instances;
  std::map<std::string, std::vector<torch::Tensor>> input_cache;  // CPU-drawn inputs, by task, sizes and seed
  CacheLedger ledger{0};                                          // both, by bytes (set at open)
  std::string instance_in_use;                                    // its ledger name
  torch::Tensor flush;                                            // the L2 flush buffer
  // Which negative controls pass a trial's check, by (task, trial seed, tolerance, sizes): the
  // controls depend on the inputs and the reference alone, not on the candidate.
  std::map<std::string, std::map<std::string, bool>> control_cache;
  // The guard zones of the candidate's own buffers (values_for) and of its input copies.
  std::vector<GuardedBuffer> guards, input_guards;

  // Fails out_of_bounds_write when a run of the candidate wrote into a guard zone.
  void check_guards(const std::string& what) {
    for (const auto* list : {&input_guards, &guards}) {
      for (const GuardedBuffer& g : *list) {
        torch::Tensor words = g.whole.view(torch::kInt32);
        torch::Tensor before = words.narrow(0, 0, g.guard_words);
        torch::Tensor after = words.narrow(0, g.guard_words + g.buffer_words, g.guard_words);
        bool below = !torch::all(before == kGuardWord).item<bool>();
        bool above = !torch::all(after == kGuardWord).item<bool>();
        if (below || above) {
          fail("out_of_bounds_write", what + ": the candidate wrote " + (above ? "past the end" : "before the start") +
                                          " of its buffer '" + g.name + "' (into the " +
                                          std::to_string(kGuardBytes >> 10) + " KiB guard zone " +
                                          (above ? "after" : "before") + " it)");
        }
      }
    }
  }
  CUevent start = nullptr, end = nullptr, sync = nullptr;

  // How a schedule runs: kWatch waits on every launch with the timeout; kCheck also confirms each
  // kernel wrote something (it copies the kernel's buffers first: the first run only); kProfile
  // times every step with events; kTimed just launches.
  enum class Mode { kCheck, kWatch, kProfile, kTimed };

  static int64_t bytes_of(const std::vector<torch::Tensor>& ts) {
    int64_t n = 0;
    for (const auto& t : ts) n += static_cast<int64_t>(t.numel() * t.element_size());
    return n;
  }

  static std::string instance_name(const std::pair<std::string, int>& key) {
    return "instance:" + key.first + "/" + std::to_string(key.second);
  }

  // Evicts the least recently used entries until the caches fit their budget (the instance in use
  // stays).
  void evict_to_budget() {
    for (const std::string& name : ledger.over_budget(instance_in_use)) {
      ledger.remove(name);
      if (name.rfind("inputs:", 0) == 0) {
        input_cache.erase(name.substr(7));
        continue;
      }
      for (auto it = instances.begin(); it != instances.end(); ++it)
        if (instance_name(it->first) == name) {
          instances.erase(it);
          break;
        }
    }
  }

  // Drops every cache and hands libtorch's cached device blocks back to the driver: before an
  // evaluation is retried after running out of memory.
  void release_memory() {
    instances.clear();
    input_cache.clear();
    ledger.clear();
    control_cache.clear();
#ifdef VINCI_TORCH_CUDA
    c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  }

  Result<TaskInstance*> instance(const Task& task, SizeName size) {
    auto key = std::make_pair(task.id, static_cast<int>(size));
    instance_in_use = instance_name(key);
    auto it = instances.find(key);
    if (it != instances.end() && &it->second->task() == &task) {
      ledger.touch(instance_in_use);
      return it->second.get();
    }
    instances.erase(key);
    ledger.remove(instance_in_use);
    Result<TaskInstance> inst = [&]() -> Result<TaskInstance> {
      try {
        return TaskInstance::create(task, size, "cuda");
      } catch (const c10::Error& e) {
        throw_if_out_of_memory(e, "the task's weights");
        throw;
      }
    }();
    throw_if_out_of_memory(inst.status(), "the task's weights");
    if (!inst.ok()) return inst.status();
    auto& slot = instances[key];
    slot = std::make_unique<TaskInstance>(std::move(*inst));
    std::vector<torch::Tensor> weights;
    for (const auto& [n, w] : slot->weights()) weights.push_back(w);
    ledger.add(instance_in_use, bytes_of(weights));
    TaskInstance* out = slot.get();
    evict_to_budget();
    return out;
  }

  // The candidate's values for one run: its copies of inputs and weights, and its own buffers
  // freshly poisoned.
  std::map<std::string, torch::Tensor> values_for(const Task& task, const Plan& plan, const SizeMap& sizes,
                                                  const std::vector<torch::Tensor>& inputs,
                                                  const std::map<std::string, torch::Tensor>& weights) {
    std::map<std::string, torch::Tensor> v;
    guards.clear();
    for (size_t i = 0; i < task.inputs.size(); ++i) v[task.inputs[i].name] = inputs[i];
    for (const auto& [n, w] : weights) v[n] = w;
    for (const auto& b : plan.buffers) {
      if (b.role != "intermediate" && b.role != "output") continue;
      Result<std::vector<int64_t>> shape = eval_shape(b.shape, sizes);
      if (!shape.ok()) fail("bad_plan", "buffer " + b.name + ": " + shape.status().message());
      // Sizes with overflow checks: 10^22 elements must not wrap to a small allocation.
      Result<int64_t> bytes = buffer_bytes(*shape, b.dtype);
      if (!bytes.ok()) fail("out_of_memory", "buffer " + b.name + ": out of memory: " + bytes.status().message());
      if (*bytes > (int64_t{1} << 40))
        fail("out_of_memory", "buffer " + b.name + " " + shape_text(*shape) + " is larger than any GPU");
      try {
        v[b.name] =
            guarded(b.name, *shape, b.dtype == "i64" ? torch::kInt64 : torch::kFloat32, torch::Tensor(), &guards);
      } catch (const c10::Error& e) {
        fail("out_of_memory", "buffer " + b.name + " " + shape_text(*shape) + ": " + e.what_without_backtrace());
      }
    }
    return v;
  }

  // Queues the reset of every device global of the plan to its state at load, on the default
  // stream, so the next run cannot read what an earlier one left there.
  void reset_globals(const LoadedPlan& loaded) {
    for (const DeviceGlobal& g : loaded.globals) {
      CUresult r = cuMemcpyDtoDAsync(g.at, g.pristine, g.bytes, nullptr);
      if (r != CUDA_SUCCESS) fail_cuda("resetting the device global '" + g.name + "'", r);
    }
  }

  // Where a Triton launch's global scratch lives in a run's values: a name no plan buffer can
  // have (buffer names are identifiers).
  static std::string scratch_key(size_t step) { return "\x01triton_scratch/" + std::to_string(step); }

  // Runs the plan's schedule once over values; returns the output. step_ms (kProfile) gets each
  // step's time.
  torch::Tensor run(const Plan& plan, const LoadedPlan& loaded, const TaskInstance& inst,
                    std::map<std::string, torch::Tensor>& values, Mode mode, std::vector<double>* step_ms = nullptr) {
    ExprEnv env;
    env.symbols = inst.sizes();
    env.buffer_shape = [&](const std::string& b) -> Result<std::vector<int64_t>> {
      auto it = values.find(b);
      if (it == values.end()) return not_found("buffer " + b);
      return it->second.sizes().vec();
    };
    if (mode != Mode::kTimed) reset_globals(loaded);  // the timed loop resets outside the timed span
    std::vector<CUevent> marks;
    if (mode == Mode::kProfile) {
      marks.resize(plan.steps.size() + 1);
      for (auto& e : marks) cuEventCreate(&e, CU_EVENT_DEFAULT);
      cuEventRecord(marks[0], nullptr);
    }
    for (size_t si = 0; si < plan.steps.size(); ++si) {
      const PlanStep& step = plan.steps[si];
      if (step.kind == StepKind::kLibrary) {
        std::vector<at::Tensor> in;
        for (const auto& n : step.op.inputs) {
          auto it = values.find(n);
          if (it == values.end()) fail("bad_plan", "step " + std::to_string(si) + ": no value '" + n + "'");
          in.push_back(it->second);
        }
        // A library step may let cuBLAS use TF32 for its product (the reference's policy, matrix
        // products in FP32, is restored right after), or compute it in BF16 or FP16.
        Result<std::vector<at::Tensor>> out = [&] {
          struct Tf32 {
            explicit Tf32(bool on) : on(on) {
              if (on) at::globalContext().setAllowTF32CuBLAS(true);
            }
            ~Tf32() {
              if (on) at::globalContext().setAllowTF32CuBLAS(false);
            }
            bool on;
          } guard(step.precision == Precision::kTf32);
          return inst.run_op(step.op, in, step_type(step.precision));
        }();
        if (!out.ok())
          fail(is_out_of_memory(out.status().message()) ? "out_of_memory" : "bad_plan",
               "step " + std::to_string(si) + ": " + out.status().message());
        for (size_t i = 0; i < out->size(); ++i) values[step.op.outputs[i]] = (*out)[i].contiguous();
      } else {
        std::string what = "kernel " + step.kernel + " (step " + std::to_string(si) + ")";
        auto tri = loaded.triton.find(si);
        auto fn = loaded.functions.find(step.kernel);
        if (tri == loaded.triton.end() && fn == loaded.functions.end()) fail("bad_plan", what + ": not loaded");
        std::vector<uint64_t> storage(step.args.size());
        std::vector<void*> params;
        std::vector<std::pair<std::string, torch::Tensor>> written;  // kCheck: own buffers before
        for (size_t i = 0; i < step.args.size(); ++i) {
          const PlanArg& a = step.args[i];
          if (!a.buffer.empty()) {
            auto it = values.find(a.buffer);
            if (it == values.end()) fail("bad_plan", what + ": no buffer '" + a.buffer + "'");
            storage[i] = reinterpret_cast<uint64_t>(it->second.data_ptr());
            const PlanBuffer* pb = plan.find_buffer(a.buffer);
            if (mode == Mode::kCheck && pb && (pb->role == "intermediate" || pb->role == "output"))
              written.emplace_back(a.buffer, it->second.clone());
          } else {
            Result<int64_t> v = eval_expr(a.i64, env);
            if (!v.ok()) fail("bad_plan", what + ": argument " + std::to_string(i) + ": " + v.status().message());
            storage[i] = static_cast<uint64_t>(*v);
          }
          params.push_back(&storage[i]);
        }
        // Triton's trailing parameters: the global scratch (grid * size bytes, when the kernel
        // asks for any) and the profile scratch (never: such kernels are refused at load).
        uint64_t scratch[2] = {0, 0};
        // Every dimension is checked against CUDA's limits on its 64-bit value before it is
        // narrowed to the driver's unsigned int (2^32 blocks must not launch as 0, nor 2^32 + 1
        // as 1).
        std::array<int64_t, 3> grid64{}, block64{};
        for (size_t i = 0; i < 3; ++i) {
          static const char* kAxis[3] = {"x", "y", "z"};
          Result<int64_t> g = eval_expr(step.grid[i], env);
          if (!g.ok()) fail("launch_refused", what + ": grid " + kAxis[i] + ": " + g.status().message());
          Result<int64_t> b = eval_expr(step.block[i], env);
          if (!b.ok()) fail("launch_refused", what + ": block " + kAxis[i] + ": " + b.status().message());
          grid64[i] = *g;
          block64[i] = *b;
        }
        std::string refused = launch_dims_error(grid64, block64);
        if (!refused.empty()) fail("launch_refused", what + ": launch refused: " + refused);
        unsigned grid[3], block[3];
        for (size_t i = 0; i < 3; ++i) {
          grid[i] = static_cast<unsigned>(grid64[i]);
          block[i] = static_cast<unsigned>(block64[i]);
        }
        CUfunction function = nullptr;
        unsigned shared = 0;
        if (tri != loaded.triton.end()) {
          function = tri->second.function;
          shared = tri->second.shared;
          if (tri->second.global_scratch_size > 0) {
            double want = static_cast<double>(grid64[0]) * static_cast<double>(grid64[1]) *
                          static_cast<double>(grid64[2]) * static_cast<double>(tri->second.global_scratch_size);
            if (want > static_cast<double>(int64_t{1} << 40))
              fail("out_of_memory", what + ": Triton's global scratch of " + format_number("%.6g", want) +
                                        " bytes is larger than any GPU");
            int64_t bytes = static_cast<int64_t>(want);
            // The scratch is one of the candidate's own buffers: kept in values (so the timed loop
            // poisons it before every sample like the others), poisoned when it is made.
            torch::Tensor& scratch_buffer = values[scratch_key(si)];
            if (!scratch_buffer.defined() || scratch_buffer.numel() != bytes) {
              try {
                scratch_buffer =
                    torch::empty({bytes}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kUInt8));
              } catch (const c10::Error& e) {
                values.erase(scratch_key(si));
                fail("out_of_memory", what + ": Triton's global scratch of " + std::to_string(bytes) +
                                          " bytes: " + e.what_without_backtrace());
              }
              poison(scratch_buffer);
            }
            scratch[0] = reinterpret_cast<uint64_t>(scratch_buffer.data_ptr());
          }
          params.push_back(&scratch[0]);
          params.push_back(&scratch[1]);
        } else {
          function = fn->second;
        }
        CUresult r = cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, nullptr,
                                    params.data(), nullptr);
        if (r != CUDA_SUCCESS) {
          // Refused launches (too many threads or registers, bad grid) leave the context usable.
          if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
            fail("launch_refused", what + ": launch refused: " + cu_error(r));
          fail_cuda(what, r);
        }
        if (mode == Mode::kCheck || mode == Mode::kWatch) wait_for(sync, options.launch_timeout_s, what);
        if (mode == Mode::kCheck) {
          bool any = written.empty();
          for (const auto& [n, before] : written) {
            if (!bitwise_equal(before, values.at(n))) any = true;
          }
          if (!any)
            fail("kernel_idle", what +
                                    " wrote none of its output buffers: it did no work (outputs must come "
                                    "from the candidate's own kernels)");
        }
      }
      if (mode == Mode::kProfile) cuEventRecord(marks[si + 1], nullptr);
    }
    if (mode == Mode::kProfile) {
      CUresult r = cuEventSynchronize(marks.back());
      if (r != CUDA_SUCCESS) fail_cuda("profiled run", r);
      for (size_t i = 0; i + 1 < marks.size(); ++i) {
        float ms = 0;
        cuEventElapsedTime(&ms, marks[i], marks[i + 1]);
        step_ms->push_back(ms);
      }
      for (auto& e : marks) cuEventDestroy(e);
    }
    auto it = values.find(plan.output);
    if (it == values.end()) fail("bad_plan", "the output '" + plan.output + "' was never produced");
    return it->second;
  }

  Result<std::vector<torch::Tensor>> inputs(const TaskInstance& inst, int64_t trial, uint64_t root_seed,
                                            std::string* source) {
    InputDistribution dist = trial_distribution(trial);
    return draw_inputs(inst, dist, input_seed(root_seed, inst.task().id, trial, dist), source);
  }

  Result<std::vector<torch::Tensor>> draw_inputs(const TaskInstance& inst, InputDistribution dist, uint64_t seed,
                                                 std::string* source) {
    VINCI_ASSIGN_OR_RETURN(int64_t n, inst.input_elements());
    bool on_cpu = n <= options.cpu_input_limit;
    *source = on_cpu ? "cpu" : "cuda";
    try {
      if (!on_cpu) {
        Result<std::vector<torch::Tensor>> drawn = inst.make_inputs_on_device(dist, seed);
        throw_if_out_of_memory(drawn.status(), "the task's inputs");
        return drawn;
      }
      // CPU draws cost more than the evaluation of a small task: keep them (on the device) within
      // the cache budget. They are never handed to a candidate, only copied.
      std::string key = instance_key(inst) + "/" + std::to_string(seed);
      auto it = input_cache.find(key);
      if (it != input_cache.end()) {
        ledger.touch("inputs:" + key);
        return it->second;
      }
      Result<std::vector<torch::Tensor>> drawn = inst.make_inputs(dist, seed);
      throw_if_out_of_memory(drawn.status(), "the task's inputs");
      VINCI_ASSIGN_OR_RETURN(std::vector<torch::Tensor> x, std::move(drawn));
      input_cache[key] = x;
      ledger.add("inputs:" + key, bytes_of(x));
      evict_to_budget();
      return x;
    } catch (const c10::Error& e) {
      throw_if_out_of_memory(e, "the task's inputs");
      throw;
    }
  }

  // The reference's output for x; a reference that runs out of memory is not the candidate's
  // failure (ReferenceOutOfMemory).
  static Result<at::Tensor> reference(const TaskInstance& inst, const std::vector<torch::Tensor>& x) {
    Result<at::Tensor> out = [&] {
      try {
        return inst.run(x);
      } catch (const c10::Error& e) {
        throw_if_out_of_memory(e, "the reference");
        throw;
      }
    }();
    throw_if_out_of_memory(out.status(), "the reference");
    return out;
  }

  void flush_l2() {
    flush.fill_(static_cast<float>(flush.numel() & 7));  // a write, so no line of the inputs stays
  }

  // One timed sample of fn: events on the default stream around it, a whole-device synchronise
  // before the end event, the host clock around everything.
  template <typename Fn>
  std::pair<double, double> timed(Fn&& fn, const char* what) {
    flush_l2();
    CUresult r = cuCtxSynchronize();
    if (r != CUDA_SUCCESS) fail_cuda(what, r);
    Clock::time_point t0 = Clock::now();
    cuEventRecord(start, nullptr);
    fn();
    r = cuCtxSynchronize();
    if (r != CUDA_SUCCESS) fail_cuda(what, r);
    cuEventRecord(end, nullptr);
    r = cuEventSynchronize(end);
    if (r != CUDA_SUCCESS) fail_cuda(what, r);
    double host_ms = ms_since(t0);
    float ms = 0;
    r = cuEventElapsedTime(&ms, start, end);
    if (r != CUDA_SUCCESS) fail_cuda(what, r);
    return {ms * 1000.0, host_ms * 1000.0};
  }

  // Negative controls: outputs that know nothing of the inputs must fail the check. One that
  // passes every trial's check (of every distribution tried) is flagged: the tolerance cannot tell
  // it from a right answer on this task. What each control does is cached by (task, trial seed,
  // tolerance, sizes): it depends on the inputs and the reference alone, not on the candidate.
  void negative_controls(const TaskInstance& inst, const TrialResult& tr, int t, const std::vector<torch::Tensor>& x,
                         const at::Tensor& ref, double ref_sum, const Tolerance& tol,
                         std::map<std::string, bool>* control_passes) {
    const Task& task = inst.task();
    std::string control_key = instance_key(inst) + "/" + std::to_string(tr.seed) + "/" + tr.distribution + "/" +
                              format_number("%.17g", tol.atol) + "," + format_number("%.17g", tol.rtol);
    auto cached_controls = control_cache.find(control_key);
    if (cached_controls != control_cache.end()) {
      for (const auto& [what, passes] : cached_controls->second)
        (*control_passes)[what] = (t == 0 ? true : (*control_passes)[what]) && passes;
      return;
    }
    std::vector<std::pair<std::string, torch::Tensor>> controls = {
        // Broadcast scalars: no memory of the output's size.
        {"zeros", torch::zeros({}, ref.options()).expand(ref.sizes())},
        {"a constant",
         torch::full({}, is_float(ref) ? ref_sum / static_cast<double>(std::max<int64_t>(1, ref.numel())) : 0.0,
                     ref.options())
             .expand(ref.sizes())}};
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].numel() == ref.numel() && x[i].scalar_type() == ref.scalar_type())
        controls.emplace_back("the input '" + task.inputs[i].name + "'", x[i].reshape(ref.sizes()));
    std::map<std::string, bool>& entry = control_cache[control_key];
    for (const auto& [what, control] : controls) {
      Comparison cc = fused->compare(control, ref, tol, 0);
      entry[what] = cc.allclose;
      (*control_passes)[what] = (t == 0 ? true : (*control_passes)[what]) && cc.allclose;
    }
  }

  // The flags of the controls that passed every trial.
  void flag_weak_tolerance(const std::map<std::string, bool>& control_passes, EvalResult* r) const {
    for (const auto& [what, passes] : control_passes)
      if (passes)
        r->flags.push_back("weak tolerance: " + what + " passes allclose in every trial" +
                           (options.norm_tolerance > 0 ? " (the relative L2 bound rejects it)" : ""));
  }

  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request, LiveStats* stats);
  Result<EvalResult> evaluate_module(const Task& task, const Plan& plan, const EvalRequest& request,
                                     const Tolerance& tol, EvalResult r, LiveStats* stats);
  torch::Tensor module_forward(ModuleSession& session, int slot, bool reuse, const std::vector<torch::Tensor>& x,
                               const at::Tensor& ref, const std::string& what, EvalResult* r);
  void time_module(const Task& task, ModuleSession& session, const TaskInstance& inst, const Plan& plan,
                   const Tolerance& tol, const EvalRequest& request, EvalResult* r);

  // The inputs one timed round reads: drawn like trial 0's (U[0,1), KernelBench's), each from its
  // own keyed stream, so no trial's inputs (nor any output a trial left in freed memory) is
  // among them.
  struct TimingSet {
    std::vector<torch::Tensor> reference;  // the draws: only the reference reads them
    std::vector<torch::Tensor> candidate;  // the candidate's guarded copies
  };

  // The samples of one timing pass.
  struct TimingPass {
    std::vector<double> kernel_us, reference_us, host_kernel_us;
    int checked = 0;         // candidate samples whose output was compared with the reference's
    std::string stopped_by;  // "width", "cap" or "budget": why the rounds stopped
  };

  // One pass of timed rounds (docs/live_evaluator.md, "Timing"). Round i times the candidate on
  // timing set i mod sets.size() and the reference once, the order alternating. Before each
  // candidate sample, outside the timed span: the candidate's own buffers (outputs, intermediates,
  // Triton scratch) are poisoned again, its device globals reset to their state at load, and its
  // inputs switched to the round's set, so nothing a sample computed reaches the next one. The last
  // round of each set, and a keyed one in kSpotCheckEvery of the others, time the reference on the
  // candidate's set and compare the candidate's timed output with it: a candidate cannot know which
  // samples are checked. Both medians are over the same rotation of sets. With adaptive timing
  // (docs/live_evaluator.md, "Adaptive timing") the rule looks at the samples taken so far at its
  // points (20, 30, ...) and, once it stops, only the final checked rounds follow (one per set);
  // its spot checks are more frequent (spot_check_share), so stopping early checks no fewer rounds.
  TimingPass time_rounds(const Task& task, const Plan& plan, const LoadedPlan& loaded, const TaskInstance& inst,
                         const std::vector<TimingSet>& sets, std::map<std::string, torch::Tensor>& values,
                         const std::map<std::string, torch::Tensor>& own, const Tolerance& tol,
                         const EvalRequest& request, int pass) {
    TimingPass t;
    const int n_sets = static_cast<int>(sets.size());
    const int final_checks = std::min(n_sets, request.samples);
    const double spot_share = spot_check_share(request, final_checks);
    torch::Tensor out, ref_out;
    // The last reference output and its set, kept until the next reference sample replaces it:
    // poisoned before a candidate sample that reads the same set, so no correct output of the
    // candidate's inputs is in memory while it runs. Outside check rounds the reference reads the
    // set before the candidate's (s - 1), so with three sets or more that never happens, and
    // whatever the reference left in freed memory (its intermediates too) is of other inputs.
    torch::Tensor stale_ref;
    int stale_set = -1;
    auto prepare = [&](int s) {
      if (stale_set == s && stale_ref.defined()) poison(stale_ref);
      const TimingSet& set = sets[static_cast<size_t>(s)];
      for (size_t i = 0; i < task.inputs.size(); ++i) values[task.inputs[i].name] = set.candidate[i];
      for (const auto& [name, buffer] : own) {
        torch::Tensor b = buffer;
        poison(b);
        values[name] = b;
      }
      reset_globals(loaded);
    };
    auto run_reference = [&](int s) {
      Result<at::Tensor> ref = reference(inst, sets[static_cast<size_t>(s)].reference);
      if (!ref.ok()) fail("reference", ref.status().message());
      ref_out = *ref;
      stale_ref = ref_out;
      stale_set = s;
    };
    double timed_ms = 0;
    auto candidate_sample = [&](int s) {
      prepare(s);
      auto [ev, host] = timed([&] { out = run(plan, loaded, inst, values, Mode::kTimed); }, "timed candidate run");
      t.kernel_us.push_back(ev);
      t.host_kernel_us.push_back(host);
      timed_ms += host / 1000;
    };
    auto reference_sample = [&](int s) {
      auto [ev, host] = timed([&] { run_reference(s); }, "timed reference run");
      t.reference_us.push_back(ev);
      timed_ms += host / 1000;
    };
    auto round = [&](int i, bool check) {
      const int s = i % n_sets;
      if (check) {
        candidate_sample(s);
        reference_sample(s);
        Comparison c = fused->compare(out, ref_out, tol, options.norm_tolerance);
        ++t.checked;
        if (!c.ok)
          fail("timed_wrong_result", "timed sample " + std::to_string(t.kernel_us.size()) +
                                         (pass ? " (re-measured)" : "") + " on timing input set " + std::to_string(s) +
                                         ": the output of a timed run is wrong, though every correctness trial "
                                         "passed: " +
                                         c.why);
      } else if (i % 2 == 0) {
        candidate_sample(s);
        reference_sample((s + n_sets - 1) % n_sets);
      } else {
        reference_sample((s + n_sets - 1) % n_sets);
        candidate_sample(s);
      }
      out = torch::Tensor();
      ref_out = torch::Tensor();
    };
    for (int i = 0; i < options.warmups; ++i) {  // untimed
      prepare(i % n_sets);
      run(plan, loaded, inst, values, Mode::kTimed);
      run_reference((i + n_sets - 1) % n_sets);
      ref_out = torch::Tensor();
    }
    int i = 0;
    t.stopped_by = "cap";
    for (; i < request.samples - final_checks; ++i) {
      // A budget caps the samples of very slow candidates (at least 5 rounds are always taken).
      if (options.timing_budget_ms > 0 && i >= 5 && timed_ms > options.timing_budget_ms) {
        t.stopped_by = "budget";
        break;
      }
      if (request.adaptive && adaptive_check_due(request.adaptive_rule, i)) {
        SpeedupInterval si = speedup_interval(request.adaptive_rule, t.kernel_us, t.reference_us);
        if (si.stop) {
          t.stopped_by = si.why;
          break;
        }
      }
      uint64_t key =
          input_seed(request.seed, task.id + "/timing-check/" + std::to_string(pass), i, InputDistribution::kUniform01);
      round(i, spot_checked(key, spot_share));
    }
    for (int j = 0; j < final_checks; ++j, ++i) round(i, true);
    check_guards("the timed samples");
    return t;
  }

  // Times a correct candidate against the reference into r: the timing sets, a profiled run for the
  // time coverage, one pass of rounds (time_rounds), and a second pass when the first is not
  // believable. A median below the device profile's floor for the task, or event times the host
  // clock contradicts, is measured again; if the second pass says the same, the candidate is
  // rejected (below_floor, timer_mismatch) and earns nothing.
  // What one evaluation's data take on the device, in bytes: for the number of timing sets.
  struct DataBytes {
    int64_t input_bytes = 0;   // one draw of the task's inputs
    int64_t output_bytes = 0;  // the output
    int64_t own_bytes = 0;     // the candidate's own buffers (output and intermediates)
  };

  void time_plan(const Task& task, const Plan& plan, const LoadedPlan& loaded, const TaskInstance& inst,
                 size_t n_inputs, const DataBytes& sizes, const std::map<std::string, torch::Tensor>& weights,
                 const Tolerance& tol, const EvalRequest& request, EvalResult* r) {
    std::string source;
    // Sets: options.timing_input_sets, fewer (down to one) where they would not fit beside what a
    // timed round needs: the candidate's own buffers, and the reference's output, a stale one and
    // its working tensors (counted as three outputs). Each set holds its draws and the candidate's
    // copies.
    int n_sets = std::max(1, options.timing_input_sets);
    {
      int64_t set_bytes = 2 * sizes.input_bytes;
      int64_t round_bytes = sizes.own_bytes + 3 * sizes.output_bytes;
#ifdef VINCI_TORCH_CUDA
      if (set_bytes > (int64_t{1} << 30)) c10::cuda::CUDACachingAllocator::emptyCache();  // so free is free
#endif
      size_t free_bytes = 0, total_bytes = 0;
      if (cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
        const int64_t usable = static_cast<int64_t>(static_cast<double>(free_bytes) * 0.9);
        while (n_sets > 1 && n_sets * set_bytes + round_bytes > usable) --n_sets;
      }
    }
    std::vector<TimingSet> sets;
    input_guards.clear();
    for (int j = 0; j < n_sets; ++j) {
      uint64_t seed = input_seed(request.seed, task.id + "/timing", j, InputDistribution::kUniform01);
      Result<std::vector<torch::Tensor>> x = draw_inputs(inst, InputDistribution::kUniform01, seed, &source);
      if (!x.ok()) fail("reference", "the timing inputs: " + x.status().message());
      if (x->size() != n_inputs) fail("reference", "the timing inputs: a draw of another arity");
      TimingSet set;
      for (size_t i = 0; i < x->size(); ++i)
        set.candidate.push_back(guarded(task.inputs[i].name + " (timing set " + std::to_string(j) + ")",
                                        (*x)[i].sizes().vec(), (*x)[i].scalar_type(), (*x)[i], &input_guards));
      set.reference = std::move(*x);
      sets.push_back(std::move(set));
    }
    auto values = values_for(task, plan, inst.sizes(), sets[0].candidate, weights);
    // The candidate's own buffers: those values_for made (outputs and intermediates), and the
    // Triton scratch the profiled run makes below; poisoned before every sample. Never what a
    // library step produced: its value is made anew each run, and may be a view of an input or a
    // weight (a reshape), which poisoning would overwrite.
    std::map<std::string, torch::Tensor> own;
    for (const auto& b : plan.buffers)
      if (b.role == "intermediate" || b.role == "output") own[b.name] = values.at(b.name);
    std::vector<double> steps;
    run(plan, loaded, inst, values, Mode::kProfile, &steps);
    double own_ms = 0, all = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      all += steps[i];
      if (plan.steps[i].kind == StepKind::kKernel) own_ms += steps[i];
    }
    r->time_coverage = all > 0 ? own_ms / all : 0;
    for (size_t si = 0; si < plan.steps.size(); ++si) {
      auto it = values.find(scratch_key(si));
      if (it != values.end()) own[it->first] = it->second;
    }
    Result<const TaskContext*> ctx = sim->context(task, request.size);
    const double floor_us = ctx.ok() ? (*ctx)->bound().floor_us : 0;
    std::string first_doubt, stopped_by;
    int checked = 0;
    for (int pass = 0;; ++pass) {
      TimingPass t = time_rounds(task, plan, loaded, inst, sets, values, own, tol, request, pass);
      checked += t.checked;
      stopped_by = t.stopped_by;
      r->kernel_times_us = t.kernel_us;
      r->reference_times_us = t.reference_us;
      r->finalize();
      // The host clock brackets the events: event time past it, or far below it, means the events
      // did not time the work.
      double hk = median(t.host_kernel_us);
      std::string doubt;
      if (r->kernel_us > hk * 1.02 + 2 || (r->kernel_us < 0.5 * hk && hk - r->kernel_us > 200)) {
        doubt = "timer_mismatch";
        first_doubt += (first_doubt.empty() ? "" : "; ") + std::string("events ") +
                       format_number("%.1f", r->kernel_us) + " us, host clock " + format_number("%.1f", hk) + " us";
      } else if (floor_us > 0 && r->kernel_us * options.roofline_margin < floor_us) {
        doubt = "below_floor";
        first_doubt += (first_doubt.empty() ? "" : "; ") + std::string("median ") +
                       format_number("%.4g", r->kernel_us) + " us, the floor " + format_number("%.4g", floor_us) +
                       " us";
      }
      if (doubt.empty()) {
        if (pass > 0) r->flags.push_back("re-measured: the first pass was not believable (" + first_doubt + ")");
        break;
      }
      if (pass > 0)
        fail(doubt, doubt == "below_floor"
                        ? "faster than the device profile's floor for this task in two passes of fresh-state "
                          "timing (" +
                              first_doubt + "): not a speedup the task allows"
                        : "the CUDA events and the host clock disagree in two passes (" + first_doubt +
                              "): the events did not time the work");
    }
    r->settings["inputs"] = source;
    r->settings["timing"] = "fresh state: own buffers poisoned and device globals reset before every sample";
    r->settings["timing_input_sets"] = std::to_string(sets.size());
    r->settings["timing_checked_samples"] = std::to_string(checked);
    if (request.adaptive)
      record_adaptive_timing(request.adaptive_rule, request.samples, static_cast<int>(r->kernel_times_us.size()),
                             stopped_by, &r->settings);
  }

  // Compiles (Triton, in its own process, cached by content) and loads every Triton launch of the
  // plan at the instance's sizes. false, with the reason in log, when a kernel does not compile or
  // cannot be launched as compiled; an error when Triton itself is missing.
  Result<bool> compile_triton(const Plan& plan, const TaskInstance& inst, LoadedPlan* loaded, std::string* log,
                              std::map<std::string, std::string>* settings, LiveStats* stats) {
    if (!triton) {
      TritonOptions to;
      to.cache_dir = options.nvrtc_cache_dir;
      to.timeout_s = options.triton_timeout_s;
      to.arch = std::atoi(arch.substr(3).c_str());
      triton = std::make_unique<TritonCompiler>(to);
    }
    VINCI_ASSIGN_OR_RETURN(std::string version, triton->version());
    (*settings)["triton_version"] = version;
    (*settings)["triton_sandbox"] = triton->sandbox_description();
    (*settings)["triton_compile_timeout_s"] = format_number("%.6g", options.triton_timeout_s);
    ExprEnv env;
    env.symbols = inst.sizes();
    env.buffer_shape = [&](const std::string& b) -> Result<std::vector<int64_t>> {
      const PlanBuffer* pb = plan.find_buffer(b);
      if (!pb) return not_found("buffer " + b);
      return eval_shape(pb->shape, inst.sizes());
    };
    std::map<Digest, CUmodule> modules;
    for (size_t si = 0; si < plan.steps.size(); ++si) {
      const PlanStep& step = plan.steps[si];
      if (step.kind != StepKind::kKernel) continue;
      const PlanKernel* k = plan.find_kernel(step.kernel);
      if (!k || k->language != kLanguageTriton) continue;
      std::string what = "kernel " + k->name + " (step " + std::to_string(si) + ")";
      Result<TritonCompileRequest> req = triton_request(plan, step, env, triton->options().arch);
      if (!req.ok()) {
        *log += what + ": " + req.status().message();
        return false;
      }
      int64_t misses = triton->misses();
      Result<std::shared_ptr<const CompiledTriton>> bin = triton->compile(*req);
      if (!bin.ok()) {
        if (bin.status().code() != StatusCode::kInvalidArgument) return bin.status();
        *log += what + ": " + bin.status().message();
        return false;
      }
      if (triton->misses() > misses) {
        stats->compile_ms += (*bin)->compile_ms;
        ++stats->kernels_compiled;
      }
      const TritonKernelMeta& meta = (*bin)->meta;
      (*settings)["triton_options"] = meta.options;
      std::string unsupported = triton_meta_unsupported(meta);
      if (unsupported.empty() && meta.num_warps != step.triton.num_warps)
        unsupported = "it was compiled for " + std::to_string(meta.num_warps) + " warps, the launch asks for " +
                      std::to_string(step.triton.num_warps);
      if (!unsupported.empty()) {
        *log += what + ": vinci cannot launch it: " + unsupported;
        return false;
      }
      CUmodule module = nullptr;
      auto m = modules.find((*bin)->key);
      if (m != modules.end()) {
        module = m->second;
      } else {
        CUresult cr = cuModuleLoadData(&module, (*bin)->cubin.data());
        if (cr != CUDA_SUCCESS) {
          *log += what + ": the driver refused the Triton module: " + cu_error(cr);
          return false;
        }
        loaded->modules.push_back(module);
        modules[(*bin)->key] = module;
        std::string untracked = loaded->track_globals(module, (*bin)->cubin);
        if (!untracked.empty()) {
          *log += what + ": " + untracked;
          return false;
        }
      }
      TritonStep ts;
      CUresult cr = cuModuleGetFunction(&ts.function, module, meta.name.c_str());
      if (cr != CUDA_SUCCESS) {
        *log += what + ": no entry point '" + meta.name + "' in the Triton cubin: " + cu_error(cr);
        return false;
      }
      if (meta.shared > 48 * 1024) {
        cr = cuFuncSetAttribute(ts.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(meta.shared));
        if (cr != CUDA_SUCCESS) {
          *log += what + ": it needs " + std::to_string(meta.shared) +
                  " bytes of shared memory, which the device "
                  "refuses: " +
                  cu_error(cr);
          return false;
        }
      }
      ts.shared = static_cast<unsigned>(meta.shared);
      ts.global_scratch_size = meta.global_scratch_size;
      loaded->triton[si] = ts;
    }
    return true;
  }
};

LiveDevice::LiveDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LiveDevice::~LiveDevice() {
  if (!impl_) return;
  if (impl_->start) cuEventDestroy(impl_->start);
  if (impl_->end) cuEventDestroy(impl_->end);
  if (impl_->sync) cuEventDestroy(impl_->sync);
  impl_->module_runner.reset();
  impl_->module_checker.reset();
  if (impl_->module_cache_owned) remove_folder(impl_->module_cache);
}

const std::string& LiveDevice::device_name() const { return impl_->name; }
const std::string& LiveDevice::arch() const { return impl_->arch; }
int64_t LiveDevice::l2_bytes() const { return impl_->l2_bytes; }

Result<std::unique_ptr<LiveDevice>> LiveDevice::open(const LiveOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  CUresult r = cuInit(0);
  if (r != CUDA_SUCCESS) return failed_precondition("no CUDA driver or GPU here: cuInit: " + cu_error(r));
  if (!torch::cuda::is_available())
    return failed_precondition("this libtorch has no CUDA (or sees no GPU): the live evaluator needs a CUDA build");
  // Torch creates the primary context; the driver calls here use the same one.
  torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA));
  r = cuDeviceGet(&impl->device, 0);
  if (r != CUDA_SUCCESS) return failed_precondition("cuDeviceGet: " + cu_error(r));
  r = cuDevicePrimaryCtxRetain(&impl->context, impl->device);
  if (r != CUDA_SUCCESS) return failed_precondition("cuDevicePrimaryCtxRetain: " + cu_error(r));
  cuCtxSetCurrent(impl->context);
  char name[256] = {0};
  cuDeviceGetName(name, sizeof name, impl->device);
  impl->name = name;
  int major = 0, minor = 0, l2 = 0;
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, impl->device);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, impl->device);
  cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, impl->device);
  impl->arch = "sm_" + std::to_string(major) + std::to_string(minor);
  impl->l2_bytes = l2;
  {
    CUuuid uuid;
    if (cuDeviceGetUuid(&uuid, impl->device) == CUDA_SUCCESS) {
      char text[64];
      const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
      std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                    b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
      impl->identity["gpu_uuid"] = text;
    }
    int version = 0;
    if (cuDriverGetVersion(&version) == CUDA_SUCCESS)
      impl->identity["cuda_driver"] = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  ..." -> 580.82.07
    if (FILE* f = std::fopen("/proc/driver/nvidia/version", "r")) {
      char line[512] = {0};
      if (std::fgets(line, sizeof line, f)) {
        std::string l = line;
        size_t at = l.find("Kernel Module");
        if (at != std::string::npos) {
          at = l.find_first_not_of(' ', at + 13);
          size_t end = l.find(' ', at);
          if (at != std::string::npos) impl->identity["driver"] = l.substr(at, end - at);
        }
      }
      std::fclose(f);
    }
    int sm_khz = 0, mem_khz = 0;
    if (cuDeviceGetAttribute(&sm_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, impl->device) == CUDA_SUCCESS && sm_khz > 0)
      impl->identity["sm_clock_khz"] = std::to_string(sm_khz);
    if (cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, impl->device) == CUDA_SUCCESS &&
        mem_khz > 0)
      impl->identity["memory_clock_khz"] = std::to_string(mem_khz);
  }
  NvrtcOptions no;
  no.arch = impl->arch;
  no.cache_dir = options.nvrtc_cache_dir;
  impl->nvrtc = std::make_unique<NvrtcCompiler>(no);
  VINCI_ASSIGN_OR_RETURN(impl->fused, FusedCompare::create(*impl->nvrtc));
  VINCI_ASSIGN_OR_RETURN(
      DeviceProfile profile,
      load_device_profile(options.profile_path.empty() ? profile_path("h200") : options.profile_path));
  impl->sim = std::make_unique<SimEvaluator>(std::move(profile));
  // The reference's precision policy: matrix products stay FP32 under both; cuDNN may use TF32
  // under KernelBench's (PyTorch's default), not under fp32.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(options.reference_precision == ReferencePrecision::kKernelbench);
  int64_t flush_elems = static_cast<int64_t>(std::max(1.0, options.l2_flush_multiple) * std::max(l2, 1 << 20) / 4);
  impl->flush = torch::empty({flush_elems}, torch::TensorOptions().device(torch::kCUDA));
  size_t free_bytes = 0, total_bytes = 0;
  cuMemGetInfo(&free_bytes, &total_bytes);
  impl->ledger = CacheLedger(
      static_cast<int64_t>(std::clamp(options.cache_budget_fraction, 0.0, 1.0) * static_cast<double>(total_bytes)));
  cuEventCreate(&impl->start, CU_EVENT_DEFAULT);
  cuEventCreate(&impl->end, CU_EVENT_DEFAULT);
  cuEventCreate(&impl->sync, CU_EVENT_DISABLE_TIMING);
  return std::unique_ptr<LiveDevice>(new LiveDevice(std::move(impl)));
}

Result<EvalResult> LiveDevice::evaluate(const Task& task, const Plan& plan, const EvalRequest& request,
                                        LiveStats* stats) {
  LiveStats local;
  if (!stats) stats = &local;
  Clock::time_point t0 = Clock::now();
  // Running out of memory is an outcome, never the end of a sweep: the first time, the worker's
  // caches (and libtorch's cached blocks) are released and the evaluation runs again; if the task's
  // own side still does not fit, the task is skipped with its reason; if the candidate's does, the
  // candidate is rejected (out_of_memory), as it was the first time.
  std::string skipped;
  for (int attempt = 0;; ++attempt) {
    MemoryOutcome outcome = MemoryOutcome::kFine;
    Result<EvalResult> r = invalid_argument("not evaluated");
    try {
      r = impl_->evaluate(task, plan, request, stats);
      if (stats->context_lost)
        outcome = MemoryOutcome::kContextLost;
      else if (r.ok() && std::find(r->flags.begin(), r->flags.end(), "rejected: out_of_memory") != r->flags.end())
        outcome = MemoryOutcome::kCandidateOom;
    } catch (const ReferenceOutOfMemory& e) {
      outcome = MemoryOutcome::kTaskOom;
      skipped = e.what();
    }
    if (retry_after(attempt, outcome)) {
      impl_->release_memory();
      *stats = LiveStats();
      continue;
    }
    if (outcome != MemoryOutcome::kTaskOom) {
      stats->eval_ms = ms_since(t0);
      return r;
    }
    break;
  }
  EvalResult r;
  r.evaluator = "cuda";
  r.device = impl_->name;
  r.plan = plan_address(plan);
  r.size = size_name(request.size);
  r.compiled = true;
  r.error = "task skipped: " + skipped + " (after the worker's caches were released and the evaluation tried again)";
  r.flags.push_back("skipped: out_of_memory");
  add_unreached_trials(&r, task.id, request);
  r.finalize();
  stats->eval_ms = ms_since(t0);
  return r;
}

Result<EvalResult> LiveDevice::Impl::evaluate(const Task& task, const Plan& plan, const EvalRequest& request,
                                              LiveStats* stats) {
  if (request.trials < 1 || request.samples < 1)
    return invalid_argument("eval request: trials and samples must be >= 1, found " + std::to_string(request.trials) +
                            " and " + std::to_string(request.samples));
  if (plan.task_id != task.id)
    return invalid_argument("plan is for task '" + plan.task_id + "', evaluated on '" + task.id + "'");
  torch::NoGradGuard no_grad;
  Tolerance tol = tolerance_for(task, request);
  EvalResult r;
  r.evaluator = "cuda";
  r.device = name;
  r.plan = plan_address(plan);
  r.size = size_name(request.size);
  r.settings = {{"arch", arch},
                {"l2_flush_bytes", std::to_string(flush.numel() * 4)},
                {"launch_timeout_s", format_number("%.6g", options.launch_timeout_s)},
                {"norm_tolerance", format_number("%.6g", options.norm_tolerance)},
                {"reference", std::string("libtorch ") + TORCH_VERSION +
                                  (options.reference_precision == ReferencePrecision::kFp32
                                       ? " eager, tf32 off"
                                       : " eager, cudnn tf32 allowed, matmul fp32")},
                {"reference_precision", kReferencePrecisions.name(options.reference_precision)},
                {"samples", std::to_string(request.samples)},
                {"strict", request.strict ? "true" : "false"},
                {"tolerance", format_number("%.6g", tol.atol) + "," + format_number("%.6g", tol.rtol)},
                {"trials", std::to_string(request.trials)},
                {"warmups", std::to_string(options.warmups)}};
  if (options.timing_budget_ms > 0) r.settings["timing_budget_ms"] = format_number("%.6g", options.timing_budget_ms);
  for (const auto& [k, v] : identity) r.settings[k] = v;

  add_limit_settings(options.limits, &r.settings);
  if (!record_limit_verdict(&r, plan, options.limits)) return r;
  if (plan.is_module()) return evaluate_module(task, plan, request, tol, std::move(r), stats);

  PhaseTimer phase(options.profile_phases, &stats->phase_ms);
  // 1. Compile and load.
  phase.to("compile");
  Status valid = validate_plan(plan, task);
  LoadedPlan loaded;
  std::string log;
  bool compiled = valid.ok();
  if (!valid.ok()) {
    log = valid.message();
    r.flags.push_back("rejected: invalid_plan");
  }
  for (size_t i = 0; compiled && i < plan.kernels.size(); ++i) {
    const PlanKernel& k = plan.kernels[i];
    if (k.language == kLanguageTriton) continue;  // compiled per launch below
    int64_t misses = nvrtc->misses();
    Result<std::shared_ptr<const CompiledKernel>> bin = nvrtc->compile(k.source, k.name + ".cu");
    if (!bin.ok()) {
      compiled = false;
      log += "kernel " + k.name + ": " + bin.status().message();
      break;
    }
    if (nvrtc->misses() > misses) {
      stats->compile_ms += (*bin)->compile_ms;
      ++stats->kernels_compiled;
    }
    if (!(*bin)->log.empty()) log += "kernel " + k.name + ": " + (*bin)->log;
    CUmodule module = nullptr;
    CUresult cr = cuModuleLoadData(&module, (*bin)->image.data());
    if (cr != CUDA_SUCCESS) {
      compiled = false;
      log += "kernel " + k.name + ": the driver refused the module: " + cu_error(cr);
      break;
    }
    loaded.modules.push_back(module);
    std::string untracked = loaded.track_globals(module, (*bin)->image);  // a cubin: the worker compiles for sm_XX
    if (!untracked.empty()) {
      compiled = false;
      log += "kernel " + k.name + ": " + untracked;
      break;
    }
    CUfunction fn = nullptr;
    cr = cuModuleGetFunction(&fn, module, k.name.c_str());
    if (cr != CUDA_SUCCESS) {
      compiled = false;
      log += "kernel " + k.name + ": no entry point '" + k.name + "' (extern \"C\" __global__): " + cu_error(cr);
      break;
    }
    loaded.functions[k.name] = fn;
  }
  if (compiled && has_triton_kernels(plan)) {
    VINCI_ASSIGN_OR_RETURN(TaskInstance * tinst, instance(task, request.size));
    VINCI_ASSIGN_OR_RETURN(compiled, compile_triton(plan, *tinst, &loaded, &log, &r.settings, stats));
  }
  if (!record_compile_verdict(&r, plan, compiled, log)) return r;

  phase.to("setup");
  VINCI_ASSIGN_OR_RETURN(TaskInstance * inst, instance(task, request.size));
  std::map<std::string, torch::Tensor> weights;
  for (const auto& [n, w] : inst->weights()) weights[n] = w.clone();
  for (const auto& b : plan.buffers) {
    if (b.name == plan.output && (b.role == "input" || b.role == "weight")) {
      r.error = "the output '" + plan.output + "' is the " + b.role + " buffer itself: outputs must not alias inputs";
      r.flags.push_back("rejected: output_aliases_input");
      r.finalize();
      return r;
    }
  }

  std::map<std::string, bool> control_passes;  // negative control -> passed every trial so far
  std::string input_source;
  std::vector<torch::Tensor> trial0_candidate_inputs;
  torch::Tensor trial0_output, trial0_reference;
  bool library_not_repeatable = false;  // see the repeat check of trial 0
  size_t timing_inputs = 0;             // how many inputs a timing set has
  size_t trial0_input_guards = 0;       // input_guards of trial 0's copies
  DataBytes data_bytes;
  try {
    // 2. Correctness.
    for (int t = 0; t < request.trials; ++t) {
      InputDistribution dist = trial_distribution(t);
      TrialResult tr;
      tr.distribution = distribution_name(dist);
      tr.seed = input_seed(request.seed, task.id, t, dist);
      phase.to("inputs");
      VINCI_ASSIGN_OR_RETURN(std::vector<torch::Tensor> x, inputs(*inst, t, request.seed, &input_source));
      // Odd trials write new data into the candidate's inputs of trial 0 (same addresses): an
      // output cached by input address shows there.
      bool same_addresses = t % 2 == 1 && !trial0_candidate_inputs.empty();
      std::vector<torch::Tensor> cx;
      if (t == 0) input_guards.clear();
      for (size_t i = 0; i < x.size(); ++i) {
        if (same_addresses) {
          cx.push_back(trial0_candidate_inputs[i].copy_(x[i]));
        } else {
          cx.push_back(guarded(task.inputs[i].name, x[i].sizes().vec(), x[i].scalar_type(), x[i], &input_guards));
        }
      }
      auto values = values_for(task, plan, inst->sizes(), cx, weights);
      // The candidate runs first: nothing of this trial's reference is in memory yet.
      phase.to("candidate");
      torch::Tensor out = run(plan, loaded, *inst, values, t == 0 ? Mode::kCheck : Mode::kWatch);
      phase.to("checks");
      check_guards("trial " + std::to_string(t));
      // The zones around this trial's own copies of the inputs are checked: drop them, so the
      // copies do not outlive the trial (trial 0's stay for the odd trials).
      if (t == 0) trial0_input_guards = input_guards.size();
      if (!same_addresses) input_guards.resize(std::min(input_guards.size(), trial0_input_guards));
      for (size_t i = 0; i < x.size(); ++i)
        if (!bitwise_equal(cx[i], x[i]))
          fail("writes_input", "the candidate modified its input '" + task.inputs[i].name + "'");
      for (const auto& [n, w] : inst->weights())
        if (!bitwise_equal(weights.at(n), w)) fail("writes_input", "the candidate modified the weight '" + n + "'");
      for (size_t i = 0; i < cx.size(); ++i)
        if (overlaps(out, cx[i]))
          fail("output_aliases_input", "the output shares memory with the input '" + task.inputs[i].name + "'");
      for (const auto& [n, w] : weights)
        if (overlaps(out, w)) fail("output_aliases_input", "the output shares memory with the weight '" + n + "'");
      // What the reference does not need is freed before it runs (the largest tasks' inputs and
      // outputs are 8 GiB each): the candidate's buffers but its output, and its copies of the
      // inputs past trial 0 (trial 0's are kept for the odd trials' same-address writes).
      values.clear();
      guards.clear();  // checked above; they hold the buffers
      if (t > 0 && !same_addresses) cx.clear();
      phase.to("reference");
      Clock::time_point reference_start = Clock::now();
      Result<at::Tensor> ref = reference(*inst, x);
      if (!ref.ok()) return internal_error("task " + task.id + ": the reference failed: " + ref.status().message());
      phase.to("checks");
      double ref_sum = 0;
      Comparison c = fused->compare(out, *ref, tol, options.norm_tolerance, &ref_sum);
      double reference_ms = ms_since(reference_start);  // the comparison's result synchronized
      tr.correct = c.ok;
      tr.max_abs_err = c.max_abs;
      tr.mean_abs_err = c.mean_abs;
      r.trials.push_back(tr);
      negative_controls(*inst, tr, t, x, *ref, ref_sum, tol, &control_passes);
      if (!c.ok) {
        std::string where = "trial " + std::to_string(t) + " (" + tr.distribution + " inputs" +
                            (same_addresses ? ", new data at the same input addresses" : "") + ")";
        if (same_addresses && trial0_output.defined() && bitwise_equal(out, trial0_output))
          fail("caching", where +
                              ": the output is trial 0's, bit for bit, though the inputs changed: an output "
                              "cached by input address");
        std::string why = c.why;
        if (c.tag == "wrong_result" && !c.allclose && is_float(*ref)) {
          phase.to("float64 reference");
          // Double precision runs many times slower than FP32 on tensor-core and cuDNN paths: a
          // long reference is not run again in float64, where it could outlast the time limit.
          why += "; " + (reference_ms <= kFloat64ReferenceMaxMs
                             ? float64_diagnosis(*inst, x, out, *ref, tol)
                             : "no float64 reference (the FP32 reference and the check took " +
                                   format_number("%.0f", reference_ms) + " ms, more than " +
                                   format_number("%.0f", kFloat64ReferenceMaxMs) + ")");
        }
        fail(c.tag, where + ": " + why);
      }
      if (t == 0) {
        // A second run on the same inputs, at the same addresses, must be bit-identical.
        auto again = values_for(task, plan, inst->sizes(), cx, weights);
        phase.to("candidate");
        torch::Tensor out2 = run(plan, loaded, *inst, again, Mode::kWatch);
        phase.to("checks");
        check_guards("the repeat of trial 0");
        bool repeatable = bitwise_equal(out, out2);
        if (!repeatable && std::any_of(plan.steps.begin(), plan.steps.end(),
                                       [](const PlanStep& s) { return s.kind == StepKind::kLibrary; })) {
          // The plan's library steps are the reference's own ops; where those are not
          // repeatable (cuDNN's transposed convolutions accumulate with atomics), neither is any
          // plan built on them, a plan of library steps only included: the repeat must then
          // agree within the tolerance instead.
          Result<at::Tensor> ref2 = reference(*inst, x);
          if (!ref2.ok())
            return internal_error("task " + task.id + ": the reference failed: " + ref2.status().message());
          if (!bitwise_equal(*ref, *ref2)) {
            Comparison again_c = fused->compare(out2, *ref, tol, options.norm_tolerance);
            if (again_c.ok) {
              repeatable = true;
              library_not_repeatable = true;
              r.flags.push_back(
                  "reference not repeatable: the plan's library steps neither; its repeat was compared "
                  "within the tolerance");
            }
          }
        }
        if (!repeatable)
          fail("nondeterministic",
               "a second run on the same inputs gave a different output (max difference " +
                   format_number("%.6g", is_float(out) ? (out - out2).abs().nan_to_num(1e30).max().item<double>() : 1) +
                   "): a race, or a read of memory the candidate never wrote");
        trial0_candidate_inputs = cx;
        trial0_output = out;
        if (library_not_repeatable) trial0_reference = *ref;  // else only the bitwise check reads trial 0
      }
    }
    // The same data at new addresses must give the same output.
    {
      std::vector<torch::Tensor> x0, moved;
      phase.to("inputs");
      VINCI_ASSIGN_OR_RETURN(x0, inputs(*inst, 0, request.seed, &input_source));
      for (auto& t : x0) moved.push_back(t.clone());
      auto values = values_for(task, plan, inst->sizes(), moved, weights);
      phase.to("candidate");
      torch::Tensor out = run(plan, loaded, *inst, values, Mode::kWatch);
      phase.to("checks");
      bool same = bitwise_equal(out, trial0_output);
      if (!same && library_not_repeatable) same = fused->compare(out, trial0_reference, tol, options.norm_tolerance).ok;
      if (!same)
        fail("caching",
             "trial 0's inputs at new addresses gave a different output: the output depends on where the "
             "inputs are, not only what they are");
      timing_inputs = x0.size();
      data_bytes.input_bytes = bytes_of(x0);
      data_bytes.output_bytes = static_cast<int64_t>(trial0_output.numel() * trial0_output.element_size());
      for (const GuardedBuffer& g : guards) data_bytes.own_bytes += g.buffer_words * 4;
    }
    trial0_output = torch::Tensor();  // not needed past the trials: its memory is the timing's
    trial0_reference = torch::Tensor();
    trial0_candidate_inputs.clear();
    flag_weak_tolerance(control_passes, &r);
    r.correct = true;

    // 3. Timing, from a fresh state every sample (time_plan).
    phase.to("timing");
    time_plan(task, plan, loaded, *inst, timing_inputs, data_bytes, weights, tol, request, &r);
    r.finalize();
    return r;
  } catch (const CandidateFailed& e) {
    phase.abandon();
    r.correct = false;
    r.kernel_times_us.clear();
    r.reference_times_us.clear();
    r.error = e.failure().reason;
    r.flags.push_back("rejected: " + e.failure().tag);
    stats->context_lost = e.failure().context_lost;
    loaded.abandon = stats->context_lost;
  } catch (const c10::Error& e) {
    phase.abandon();
    std::string what = e.what_without_backtrace();
    bool oom = is_out_of_memory(what);
    r.correct = false;
    r.kernel_times_us.clear();
    r.reference_times_us.clear();
    r.error = (oom ? "out of memory: " : "libtorch error during the candidate's run: ") + what;
    r.flags.push_back(oom ? "rejected: out_of_memory" : "rejected: cuda_error");
    // A CUDA error surfacing through libtorch may be sticky: start afresh.
    stats->context_lost = !oom || cuCtxSynchronize() != CUDA_SUCCESS;
    loaded.abandon = stats->context_lost;
  }
  add_unreached_trials(&r, task.id, request);  // trials not reached count as failed
  r.finalize();
  return r;
}

namespace {

const char* module_dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "float32";
    case torch::kDouble: return "float64";
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kLong: return "int64";
    case torch::kInt: return "int32";
    case torch::kShort: return "int16";
    case torch::kChar: return "int8";
    case torch::kByte: return "uint8";
    case torch::kBool: return "bool";
    default: return "unsupported";
  }
}

bool module_dtype(const std::string& name, torch::ScalarType* t) {
  static const std::map<std::string, torch::ScalarType> kTypes = {
      {"float32", torch::kFloat},     {"float64", torch::kDouble}, {"float16", torch::kHalf},
      {"bfloat16", torch::kBFloat16}, {"int64", torch::kLong},     {"int32", torch::kInt},
      {"int16", torch::kShort},       {"int8", torch::kChar},      {"uint8", torch::kByte},
      {"bool", torch::kBool}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return false;
  *t = it->second;
  return true;
}

// The longest kernels of a profile, for a message: "name 12.3 us, ...".
std::string top_kernels(std::vector<ModuleKernel> kernels, size_t n) {
  std::sort(kernels.begin(), kernels.end(), [](const ModuleKernel& a, const ModuleKernel& b) { return a.us > b.us; });
  std::string out;
  for (size_t i = 0; i < kernels.size() && i < n; ++i)
    out += (i ? "; " : "") + kernels[i].name.substr(0, 120) + " " + format_number("%.1f", kernels[i].us) + " us";
  return out;
}

}  // namespace

// One forward of the module in its runner on CPU copies of x, kept in slot (reuse: written into
// the slot's tensors, the same addresses); its output, back on this device. The module's failure
// is a CandidateFailed with the runner's kind.
torch::Tensor LiveDevice::Impl::module_forward(ModuleSession& session, int slot, bool reuse,
                                               const std::vector<torch::Tensor>& x, const at::Tensor& ref,
                                               const std::string& what, EvalResult* r) {
  std::vector<ModuleTensor> sent;
  for (const torch::Tensor& t : x) {
    ModuleTensor m;
    m.dtype = module_dtype_name(t.scalar_type());
    m.shape = t.sizes().vec();
    m.bytes = static_cast<int64_t>(t.numel() * t.element_size());
    sent.push_back(m);
  }
  // Each input is copied from the device straight into the memory the runner reads.
  auto fill = [&](size_t i, char* dst) {
    if (x[i].numel() == 0) return;
    torch::from_blob(dst, x[i].sizes(), torch::TensorOptions().dtype(x[i].scalar_type())).copy_(x[i]);
  };
  torch::Tensor out;
  auto take = [&](const ModuleTensor& o, const char* bytes, std::string* why) -> bool {
    torch::ScalarType dtype;
    if (!module_dtype(o.dtype, &dtype)) {
      *why = "the output's dtype is " + o.dtype + ", which vinci does not compare";
      return false;
    }
    int64_t n = 1;
    for (int64_t d : o.shape) {
      if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
        *why = "the output's shape " + shape_text(o.shape) + " is not a shape";
        return false;
      }
      n *= d;
    }
    if (n * static_cast<int64_t>(c10::elementSize(dtype)) != o.bytes) {
      *why = "the output's " + std::to_string(o.bytes) + " bytes do not fill its shape " + shape_text(o.shape);
      return false;
    }
    // Copied out of the shared memory at once (to the reference's device): the runner can write
    // there until its process ends, and what is compared is this copy.
    torch::TensorOptions opts = torch::TensorOptions().dtype(dtype);
    out = n == 0 ? torch::empty(o.shape, opts.device(ref.device()))
                 : torch::from_blob(const_cast<char*>(bytes), o.shape, opts)
                       .to(ref.device(), dtype, /*non_blocking=*/false, /*copy=*/true);
    return true;
  };
  // Room for a float64 output of a float32 reference: a wrong dtype is then compared and named.
  const int64_t cap = 2 * static_cast<int64_t>(ref.numel() * ref.element_size()) + 4096;
  Result<ModuleRunAnswer> a = session.run(slot, reuse, sent, take, cap, fill);
  if (!a.ok()) fail("module_runner", what + ": " + a.status().message());
  if (!a->ok) fail(a->kind, what + ": " + a->error);
  if (!a->threads.empty()) {
    std::string flag = "threads: the module's process has threads its forward left running (";
    for (size_t i = 0; i < a->threads.size() && i < 8; ++i) flag += (i ? ", " : "") + a->threads[i];
    flag += ")";
    if (std::find(r->flags.begin(), r->flags.end(), flag) == r->flags.end()) r->flags.push_back(flag);
  }
  return out;
}

// Times a correct module against the reference (docs/kernelbench_format.md, "Timing a module"):
// a checked run and a profiled run on timing inputs drawn as plans' first timing set is, the time
// coverage from the profile, then the module's samples in its runner and the reference's here,
// each sample after an L2 flush and a device-wide synchronization; a second pass when the first
// is not believable (the host clock, the floor), as for plans.
void LiveDevice::Impl::time_module(const Task& task, ModuleSession& session, const TaskInstance& inst, const Plan& plan,
                                   const Tolerance& tol, const EvalRequest& request, EvalResult* r) {
  std::string source;
  uint64_t seed = input_seed(request.seed, task.id + "/timing", 0, InputDistribution::kUniform01);
  Result<std::vector<torch::Tensor>> x = draw_inputs(inst, InputDistribution::kUniform01, seed, &source);
  if (!x.ok()) fail("reference", "the timing inputs: " + x.status().message());
  Result<at::Tensor> ref = reference(inst, *x);
  if (!ref.ok()) fail("reference", ref.status().message());
  torch::Tensor out = module_forward(session, 3, false, *x, *ref, "the timing inputs", r);
  Comparison c = fused->compare(out, *ref, tol, options.norm_tolerance);
  if (!c.ok) fail("timed_wrong_result", "the timing inputs: the output is wrong, though every trial passed: " + c.why);
  out = torch::Tensor();

  Result<ModuleProfile> prof = session.profile(3);
  if (!prof.ok()) fail("module_runner", "the profiled run: " + prof.status().message());
  if (!prof->ok) fail(prof->kind, "the profiled run: " + prof->error);
  const std::vector<std::string> own = module_kernel_names(plan.module);
  double own_us = 0, all_us = 0;
  for (const ModuleKernel& k : prof->kernels) {
    all_us += k.us;
    if (is_own_kernel(k.name, own)) own_us += k.us;
  }
  r->time_coverage = all_us > 0 ? own_us / all_us : 0;
  r->decoy = own_us <= 0;
  if (r->decoy)
    r->flags.push_back("decoy: no kernel of its own ran (" +
                       (prof->kernels.empty() ? std::string("the profiler saw no kernel")
                                              : "the device's time went to " + top_kernels(prof->kernels, 3)) +
                       ")");

  Result<const TaskContext*> ctx = sim->context(task, request.size);
  const double floor_us = ctx.ok() ? (*ctx)->bound().floor_us : 0;
  const int64_t flush_bytes = flush.numel() * 4;
  std::string first_doubt;
  for (int pass = 0;; ++pass) {
    Result<ModuleTiming> tm = session.time(3, request.samples, options.warmups, flush_bytes);
    if (!tm.ok()) fail("module_runner", "timing: " + tm.status().message());
    if (!tm->ok) fail(tm->kind, "timing: " + tm->error);
    const double overhead = median(tm->overhead_us);
    std::vector<double> kernel, beyond;
    double device_total = 0;
    for (size_t i = 0; i < tm->device_us.size(); ++i) {
      kernel.push_back(std::max(tm->stream_us[i], tm->device_us[i] - overhead));
      beyond.push_back(tm->device_us[i] - overhead - tm->stream_us[i]);
      device_total += tm->device_us[i];
    }
    // The runner's numbers are the module's process's: they cannot add up to more time than
    // passed on this side.
    if (device_total > tm->wall_us)
      fail("timer_mismatch", "the runner reported " + format_number("%.0f", device_total) + " us of samples in " +
                                 format_number("%.0f", tm->wall_us) + " us: its timing was tampered with");
    std::vector<double> reference_us;
    for (int i = 0; i < options.warmups; ++i) (void)reference(inst, *x);
    for (int i = 0; i < request.samples; ++i) {
      auto [ev, host] = timed(
          [&] {
            Result<at::Tensor> again = reference(inst, *x);
            if (!again.ok()) fail("reference", again.status().message());
          },
          "timed reference run");
      (void)host;
      reference_us.push_back(ev);
    }
    r->kernel_times_us = kernel;
    r->reference_times_us = reference_us;
    r->finalize();
    // The worker's clock brackets each sample from outside the module's process: the events may
    // fall short of it by the bracket's own cost (a ping: a socket round trip and a device-wide
    // synchronization), no more.
    double hk = median(tm->host_us), wk = median(tm->worker_us), ping = median(tm->ping_us);
    std::string doubt;
    if (r->kernel_us > hk * 1.02 + 2 || wk - r->kernel_us > 2 * ping + 0.05 * wk + 30) {
      doubt = "timer_mismatch";
      first_doubt += (first_doubt.empty() ? "" : "; ") + std::string("events ") + format_number("%.1f", r->kernel_us) +
                     " us, the runner's clock " + format_number("%.1f", hk) + " us, the worker's " +
                     format_number("%.1f", wk) + " us with " + format_number("%.1f", ping) + " us for an empty bracket";
    } else if (floor_us > 0 && r->kernel_us * options.roofline_margin < floor_us) {
      doubt = "below_floor";
      first_doubt += (first_doubt.empty() ? "" : "; ") + std::string("median ") + format_number("%.4g", r->kernel_us) +
                     " us, the floor " + format_number("%.4g", floor_us) + " us";
    }
    if (doubt.empty()) {
      if (pass > 0) r->flags.push_back("re-measured: the first pass was not believable (" + first_doubt + ")");
      double side = median(beyond);
      if (side > 0.1 * median(tm->stream_us) + 10)
        r->flags.push_back("side streams: " + format_number("%.1f", side) +
                           " us of each sample ran after the forward returned, outside the default stream "
                           "(counted in its time)");
      break;
    }
    if (pass > 0)
      fail(doubt, doubt == "below_floor" ? "faster than the device profile's floor for this task in two passes (" +
                                               first_doubt + "): not a speedup the task allows"
                                         : "the events and the runner's clock disagree in two passes (" + first_doubt +
                                               "): the events did not time the work");
  }
  r->settings["inputs"] = source;
  r->settings["timing"] =
      "module: its samples in its runner, each on inputs drawn for it, after an L2 flush, from a device-wide "
      "synchronization to an event after the next one; the reference's here";
  if (request.adaptive)  // said, never silently ignored
    r->settings["timing_rule"] =
        "fixed: a module's samples are taken in its runner in one call, so it takes --samples of each (adaptive "
        "timing stops plans early)";
}

Result<EvalResult> LiveDevice::Impl::evaluate_module(const Task& task, const Plan& plan, const EvalRequest& request,
                                                     const Tolerance& tol, EvalResult r, LiveStats* stats) {
  PhaseTimer phase(options.profile_phases, &stats->phase_ms);
  phase.to("compile");
  add_module_static_flags(plan.module, &r.flags);
  Status valid = validate_plan(plan, task);
  if (!valid.ok()) {
    r.flags.push_back("rejected: invalid_plan");
    record_compile_verdict(&r, plan, false, valid.message());
    return r;
  }
  VINCI_ASSIGN_OR_RETURN(std::string reference_text, task_as_pytorch(task, request.size));
  const ModuleBackend backend = module_backend(plan.module);
  if (!module_runner) {
    module_cache = options.module_cache_dir;
    if (module_cache.empty()) {
      std::string dir = "/tmp/vinci_module_builds_XXXXXX";
      if (!::mkdtemp(dir.data())) return io_error("module builds: mkdtemp: " + std::string(std::strerror(errno)));
      module_cache = dir;
      module_cache_owned = true;
    }
    ModuleCheckOptions co;
    co.cache_dir = module_cache;
    // No address-space limit, as for the runner: the check builds ModelNew on the CPU as
    // KernelBench does, and the largest tasks' weights (L3_002's 8.6 GB) pass any fixed bound. The
    // out-of-memory killer still takes the sandbox first.
    co.limits.memory_bytes = 0;
    module_checker = std::make_unique<ModuleChecker>(co);
    ModuleRunOptions ro;
    ro.call_timeout_s = options.module_call_timeout_s;
    // The shared memory the tensors cross in, page-locked in this worker's context (the runner
    // pins its mappings of it too): the device copies then run at the bus's speed.
    ro.pin = [](void* data, size_t size) {
      return cuMemHostRegister(data, size, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
    };
    ro.unpin = [](void* data) { (void)cuMemHostUnregister(data); };
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"))
      ro.env.push_back(std::string("CUDA_VISIBLE_DEVICES=") + visible);
    module_runner = std::make_unique<ModuleRunner>(ro);
  }
  // 1. The build: the import check, without the GPU, keeps what load_inline built. A module this
  // worker checked before (the same text, so the same build) is not checked again.
  r.settings["module_sandbox"] = module_runner->sandbox_description();
  VINCI_RETURN_IF_ERROR(module_checker->probe(backend));
  const Digest build_key = module_checker->build_key(plan.module, backend);
  if (modules_built.count(build_key) == 0) {
    Result<ModuleCheck> built = module_checker->check(plan.module, reference_text, backend);
    if (!built.ok()) return built.status();
    if (built->cache == "miss") stats->compile_ms += built->ms;
    if (!built->ok) {
      r.flags.push_back("rejected: " + built->kind);
      record_compile_verdict(&r, plan, false, built->kind + ": " + built->error);
      return r;
    }
    modules_built.insert(build_key);
  }
  std::string entry = module_cache + "/" + build_key.hex();
  struct stat st;
  if (::stat(entry.c_str(), &st) != 0) entry.clear();  // nothing was built (a module without load_inline)

  // 2. The runner: ModelNew built as KernelBench builds it, on this device.
  phase.to("setup");
  VINCI_ASSIGN_OR_RETURN(TaskInstance * inst, instance(task, request.size));
  uint64_t timing_seed = input_seed(request.seed, task.id + "/module-timing", 0, InputDistribution::kUniform01);
  VINCI_ASSIGN_OR_RETURN(std::unique_ptr<ModuleSession> session,
                         module_runner->start(plan.module, reference_text, backend, 42, entry, timing_seed));
  const ModuleLoad& load = session->load();
  r.settings["module_python_torch"] = load.torch_version;
  if (!load.ok) {
    r.flags.push_back("rejected: " + load.kind);
    record_compile_verdict(&r, plan, false, load.kind + ": " + load.error);
    return r;
  }
  r.compiled = true;

  // 3. Correctness: the trials of a plan, the runner's output compared here.
  std::map<std::string, bool> control_passes;
  std::string input_source;
  torch::Tensor trial0_output;
  at::Tensor trial0_reference;
  bool not_repeatable = false;
  try {
    for (int t = 0; t < request.trials; ++t) {
      InputDistribution dist = trial_distribution(t);
      TrialResult tr;
      tr.distribution = distribution_name(dist);
      tr.seed = input_seed(request.seed, task.id, t, dist);
      phase.to("inputs");
      VINCI_ASSIGN_OR_RETURN(std::vector<torch::Tensor> x, inputs(*inst, t, request.seed, &input_source));
      phase.to("reference");
      Result<at::Tensor> ref = reference(*inst, x);
      if (!ref.ok()) return internal_error("task " + task.id + ": the reference failed: " + ref.status().message());
      // Odd trials write new data into trial 0's tensors in the runner (the same addresses).
      bool same_addresses = t % 2 == 1;
      std::string where = "trial " + std::to_string(t) + " (" + tr.distribution + " inputs" +
                          (same_addresses ? ", new data at the same input addresses" : "") + ")";
      phase.to("candidate");
      torch::Tensor out =
          module_forward(*session, t == 0 || same_addresses ? 0 : 1, same_addresses, x, *ref, where, &r);
      phase.to("checks");
      double ref_sum = 0;
      Comparison c = fused->compare(out, *ref, tol, options.norm_tolerance, &ref_sum);
      tr.correct = c.ok;
      tr.max_abs_err = c.max_abs;
      tr.mean_abs_err = c.mean_abs;
      r.trials.push_back(tr);
      negative_controls(*inst, tr, t, x, *ref, ref_sum, tol, &control_passes);
      if (!c.ok) {
        if (same_addresses && trial0_output.defined() && bitwise_equal(out, trial0_output))
          fail("caching", where +
                              ": the output is trial 0's, bit for bit, though the inputs changed: an output "
                              "cached by input address");
        std::string why = c.why;
        if (c.tag == "wrong_result" && !c.allclose && is_float(*ref))
          why += "; " + float64_diagnosis(*inst, x, out, *ref, tol);
        fail(c.tag, where + ": " + why);
      }
      if (t == 0) {
        // The same inputs again, at the same addresses: the same output, bit for bit, unless the
        // reference itself is not repeatable (cuDNN's atomics), then within the tolerance.
        phase.to("candidate");
        torch::Tensor again = module_forward(*session, 0, true, x, *ref, "the repeat of trial 0", &r);
        phase.to("checks");
        if (!bitwise_equal(out, again)) {
          Result<at::Tensor> ref2 = reference(*inst, x);
          if (!ref2.ok())
            return internal_error("task " + task.id + ": the reference failed: " + ref2.status().message());
          if (!bitwise_equal(*ref, *ref2) && fused->compare(again, *ref, tol, options.norm_tolerance).ok) {
            not_repeatable = true;
            r.flags.push_back(
                "reference not repeatable: neither is the module; its repeat was compared within the tolerance");
          } else {
            fail("nondeterministic",
                 "a second run on the same inputs gave a different output: a race, or a read of memory the module "
                 "never wrote");
          }
        }
        trial0_output = out;
        if (not_repeatable) trial0_reference = *ref;
      }
    }
    {
      // Trial 0's data at new addresses: the same output.
      std::vector<torch::Tensor> x0;
      phase.to("inputs");
      VINCI_ASSIGN_OR_RETURN(x0, inputs(*inst, 0, request.seed, &input_source));
      phase.to("candidate");
      torch::Tensor out =
          module_forward(*session, 2, false, x0, trial0_output, "trial 0's inputs at new addresses", &r);
      phase.to("checks");
      bool same = bitwise_equal(out, trial0_output) ||
                  (not_repeatable && fused->compare(out, trial0_reference, tol, options.norm_tolerance).ok);
      if (!same)
        fail("caching",
             "trial 0's inputs at new addresses gave a different output: the output depends on where the inputs "
             "are, not only what they are");
    }
    trial0_output = torch::Tensor();
    trial0_reference = at::Tensor();
    flag_weak_tolerance(control_passes, &r);
    r.correct = true;
    // 4. Timing.
    phase.to("timing");
    time_module(task, *session, *inst, plan, tol, request, &r);
    r.settings["module_threads_before"] = std::to_string(load.threads);
    r.finalize();
    return r;
  } catch (const CandidateFailed& e) {
    phase.abandon();
    r.correct = false;
    r.kernel_times_us.clear();
    r.reference_times_us.clear();
    r.error = e.failure().reason;
    r.flags.push_back("rejected: " + e.failure().tag);
  } catch (const c10::Error& e) {
    // The module runs in its own process: an error here is this worker's, an output it cannot hold
    // or a reference that failed.
    phase.abandon();
    std::string what = e.what_without_backtrace();
    if (!is_out_of_memory(what)) return internal_error("task " + task.id + ": evaluating a module: " + what);
    r.correct = false;
    r.kernel_times_us.clear();
    r.reference_times_us.clear();
    r.error = "out of memory: " + what;
    r.flags.push_back("rejected: out_of_memory");
  }
  add_unreached_trials(&r, task.id, request);
  r.finalize();
  return r;
}

}  // namespace vinci
