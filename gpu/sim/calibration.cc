#include "gpu/sim/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <utility>

#include "core/atomic_file.h"
#include "core/parallel.h"
#include "gpu/codegen/codegen.h"
#include "gpu/sim/sim_model.h"

namespace vinci {
namespace {

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    double avg = 0.5 * static_cast<double>(i + j);  // ties share the mean of their positions
    for (size_t k = i; k <= j; ++k) r[idx[k]] = avg;
    i = j + 1;
  }
  return r;
}

// Samples grouped by (task, sizes): each group shares one prepared context.
struct Group {
  const Task* task = nullptr;
  SizeMap sizes;
  std::vector<size_t> samples;
  double measured_reference_us = 0;  // the mean of the samples' log-reference, exponentiated
};

class Fitter {
 public:
  Fitter(const std::vector<CalibrationSample>& samples, const CalibrationOptions& options)
      : samples_(samples),
        fit_reference_(options.fit_reference),
        objective_(options.objective),
        reprice_everything_(options.reprice_everything) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto& s = samples[i];
      auto it = std::find_if(groups_.begin(), groups_.end(),
                             [&](const Group& g) { return g.task == s.task && g.sizes == s.sizes; });
      if (it == groups_.end()) {
        groups_.push_back({s.task, s.sizes, {}, 0});
        it = groups_.end() - 1;
      }
      it->samples.push_back(i);
    }
    for (auto& g : groups_) {
      double logsum = 0;
      int n = 0;
      for (size_t i : g.samples)
        if (samples_[i].measured_reference_us > 0) logsum += std::log(samples_[i].measured_reference_us), ++n;
      g.measured_reference_us = n ? std::exp(logsum / n) : 0;
    }
    for (const auto& s : samples_) sample_reads_.push_back(figures_read(s.plan));
  }

  // How one step's time follows from the launch figures and its efficiency term (see
  // StepPrediction): what a trial of those figures needs to price the step again.
  struct StepTape {
    bool library = false;
    bool empty_launch = false;
    int launches = 0;
    double body_us = 0;
    double DeviceProfile::*efficiency = nullptr;
    int cast_launches = 0;
    double cast_body_us = 0;
  };
  using Tape = std::shared_ptr<const std::vector<StepTape>>;

  static Tape tape_of(const PlanPrediction& p) {
    auto t = std::make_shared<std::vector<StepTape>>();
    for (const StepPrediction& s : p.steps)
      t->push_back(
          {!s.own_kernel, s.empty_launch, s.launches, s.body_us, s.efficiency, s.cast_launches, s.cast_body_us});
    return t;
  }

  // The time SimModel::predict (or reprice, for a reference) gives under `p`, from a tape of a
  // profile that differs from `p` in launch figures and efficiency terms alone: the model's own
  // kernel_exec_us and library_exec_us, so the same bits.
  static double replay(const std::vector<StepTape>& tape, const DeviceProfile& p) {
    double time_us = 0;
    for (const StepTape& s : tape) {
      double launch_us, exec_us;
      if (!s.library) {
        launch_us = p.kernel_launch_us;
        exec_us = kernel_exec_us(p, s.empty_launch, s.body_us, p.*s.efficiency);
      } else {
        launch_us = s.launches * (p.kernel_launch_us + p.library_dispatch_us);
        exec_us = library_exec_us(p, s.launches, s.body_us, p.*s.efficiency, s.cast_launches, s.cast_body_us);
      }
      time_us += launch_us + exec_us;
    }
    return time_us;
  }

  // Predicted plan times and each group's reference, under a profile, with the tapes they came
  // from.
  struct Prediction {
    std::vector<double> plan_us;
    std::vector<double> reference_us;  // per group
    std::vector<Tape> plan_tape, reference_tape;
  };

  // With `base` (a profile and its prediction), a plan or reference that reads none of the
  // figures `profile` changes keeps the base's time; one whose changed figures are launch figures
  // and efficiency terms alone is replayed from the base's tape; the rest are priced again. Each
  // is the time pricing everything again gives, bit for bit (see figures_read and replay).
  // REQUIRES: profile and base->profile differ in calibration_parameters() figures alone.
  Result<Prediction> predict(const DeviceProfile& profile,
                             const std::pair<DeviceProfile, Prediction>* base = nullptr) const {
    SimModel model(profile);
    Prediction out;
    out.plan_us.assign(samples_.size(), 0);
    out.plan_tape.assign(samples_.size(), nullptr);
    if (contexts_.empty())
      for (const auto& g : groups_) {
        VINCI_ASSIGN_OR_RETURN(TaskContext c, model.prepare(*g.task, g.sizes));
        contexts_.push_back(std::move(c));
      }
    uint32_t changed = base ? figures_changed(base->first, profile) : kReadsAll;
    // Groups are independent (each owns its context and its samples' slots): priced on every
    // core, the loss then sums them in a fixed order, so the fit is the same for any core count.
    out.reference_us.assign(groups_.size(), 0);
    out.reference_tape.assign(groups_.size(), nullptr);
    VINCI_RETURN_IF_ERROR(parallel_for(threads_, groups_.size(), [&](size_t gi) -> Status {
      const Group& g = groups_[gi];
      TaskContext& ctx = contexts_[gi];
      uint32_t ref = changed & kReferenceReads;
      if (ref & kReadsBody) {
        VINCI_RETURN_IF_ERROR(model.reprice(&ctx));
        out.reference_us[gi] = ctx.reference().time_us;
        out.reference_tape[gi] = tape_of(ctx.reference());
      } else {  // predict() never reads the context's reference: it may stay stale
        out.reference_tape[gi] = base->second.reference_tape[gi];
        out.reference_us[gi] = ref ? replay(*out.reference_tape[gi], profile) : base->second.reference_us[gi];
      }
      for (size_t i : g.samples) {
        uint32_t reads = changed & sample_reads_[i];
        if (!(reads & kReadsBody)) {
          out.plan_tape[i] = base->second.plan_tape[i];
          out.plan_us[i] = reads ? replay(*out.plan_tape[i], profile) : base->second.plan_us[i];
          continue;
        }
        Result<PlanPrediction> p = model.predict(ctx, samples_[i].plan);
        if (!p.ok())
          return Status(p.status().code(), "calibration sample " + std::to_string(i) + " (task " + g.task->id +
                                               "): " + p.status().message());
        out.plan_us[i] = p->time_us;
        out.plan_tape[i] = tape_of(*p);
      }
      return Status();
    }));
    return out;
  }

  // The loss under `profile`. Every profile after the first must differ from the last accepted
  // one (accept()) in calibration_parameters() figures alone: the search's trials do.
  Result<double> loss(const DeviceProfile& profile) {
    ++evaluations_;
    VINCI_ASSIGN_OR_RETURN(Prediction p, predict(profile, base_ && !reprice_everything_ ? &*base_ : nullptr));
    double sum = 0;
    int n = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t i : groups_[g].samples) {
        const CalibrationSample& s = samples_[i];
        double e = std::log(p.plan_us[i] / s.measured_us);
        if (objective_ == CalibrationOptions::Objective::kSpeedups && s.measured_reference_us > 0)
          e = std::log((p.reference_us[g] / p.plan_us[i]) / (s.measured_reference_us / s.measured_us));
        sum += e * e;
        ++n;
      }
    }
    if (fit_reference_)
      for (size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g].measured_reference_us > 0) {
          double e = std::log(p.reference_us[g] / groups_[g].measured_reference_us);
          sum += e * e;
          ++n;
        }
    last_.emplace(profile, std::move(p));
    if (!base_) base_ = last_;
    return sum / n;
  }

  // Per-task Spearman of predicted vs measured speedups. The measured speedup uses the measured
  // reference where there is one; without it, 1 / time ranks the plans the same way.
  Result<std::vector<TaskFit>> correlations(const DeviceProfile& profile) const {
    VINCI_ASSIGN_OR_RETURN(Prediction p, predict(profile));
    std::vector<TaskFit> out;
    for (size_t g = 0; g < groups_.size(); ++g) {
      TaskFit f;
      f.task_id = groups_[g].task->id;
      for (const auto& [k, v] : groups_[g].sizes) f.sizes += (f.sizes.empty() ? "" : ",") + k + "=" + std::to_string(v);
      std::vector<double> pred, meas;
      for (size_t i : groups_[g].samples) {
        pred.push_back(p.reference_us[g] / p.plan_us[i]);
        double ref = samples_[i].measured_reference_us > 0 ? samples_[i].measured_reference_us : 1.0;
        meas.push_back(ref / samples_[i].measured_us);
      }
      f.plans = static_cast<int>(pred.size());
      f.spearman_after = spearman(pred, meas);
      out.push_back(f);
    }
    return out;
  }

  int evaluations() const { return evaluations_; }

  // The profile of the last loss() is the search's new point: later trials are priced against it.
  void accept() { base_ = std::move(last_); }

 private:
  // Which calibration figures a prediction can read, as bits. A plan's time reads the efficiency
  // term of its kernels' families alone (gpu/sim/sim_model.cc: kernel_step picks one term by family;
  // a custom kernel, a family the model has no term for, eff_custom), a gemm kernel alone reads
  // the wmma fraction, and a tf32 library product alone library_tf32_fraction; the eager
  // reference (library steps in fp32) reads no kernel term. The launch figures and L2 bandwidth
  // and in-flight bytes are read by every step. Efficiency terms and launch figures enter a
  // step's time after its body (StepPrediction::body_us): a change of those alone is replayed.
  static constexpr uint32_t kReadsElementwise = 1, kReadsRowReduction = 2, kReadsGemmEfficiency = 4, kReadsCustom = 8,
                            kReadsLibraryEfficiency = 16, kReadsLaunch = 32, kReadsWmma = 64, kReadsLibraryTf32 = 128,
                            kReadsEveryBody = 256, kReadsAll = 511;
  // Figures a step's body reads: a change of one prices the step again.
  static constexpr uint32_t kReadsBody = kReadsWmma | kReadsLibraryTf32 | kReadsEveryBody;
  static constexpr uint32_t kReferenceReads = kReadsLibraryEfficiency | kReadsLaunch | kReadsEveryBody;

  static uint32_t figure_bits(double DeviceProfile::*field) {
    using P = DeviceProfile;
    if (field == &P::eff_elementwise) return kReadsElementwise;
    if (field == &P::eff_row_reduction) return kReadsRowReduction;
    if (field == &P::eff_gemm_cuda_core || field == &P::eff_gemm_tensor_core) return kReadsGemmEfficiency;
    if (field == &P::eff_custom) return kReadsCustom;
    if (field == &P::eff_library_gemm || field == &P::eff_library_other) return kReadsLibraryEfficiency;
    if (field == &P::kernel_launch_us || field == &P::library_dispatch_us || field == &P::kernel_floor_us)
      return kReadsLaunch;
    if (field == &P::wmma_fraction) return kReadsWmma;
    if (field == &P::library_tf32_fraction) return kReadsLibraryTf32;
    return kReadsEveryBody;
  }

  static uint32_t figures_changed(const DeviceProfile& a, const DeviceProfile& b) {
    uint32_t bits = 0;
    for (const auto& p : calibration_parameters())
      if (a.*(p.field) != b.*(p.field)) bits |= figure_bits(p.field);
    return bits;
  }

  static uint32_t figures_read(const Plan& plan) {
    uint32_t bits = kReadsLaunch | kReadsEveryBody;
    for (const PlanStep& step : plan.steps) {
      if (step.kind != StepKind::kKernel) {
        bits |= kReadsLibraryEfficiency | (step.precision == Precision::kTf32 ? kReadsLibraryTf32 : 0);
        continue;
      }
      const PlanKernel* k = plan.find_kernel(step.kernel);
      if (!k) return kReadsAll;
      if (k->family == KernelFamily::kGemm)
        bits |= kReadsGemmEfficiency | kReadsWmma;
      else if (k->family == KernelFamily::kRowReduction)
        bits |= kReadsRowReduction;
      else if (k->family == KernelFamily::kElementwise)
        bits |= kReadsElementwise;
      else
        bits |= kReadsCustom;
    }
    return bits;
  }

  const std::vector<CalibrationSample>& samples_;
  bool fit_reference_;
  CalibrationOptions::Objective objective_;
  bool reprice_everything_;
  mutable std::vector<TaskContext> contexts_;  // one a group, prepared once, repriced per profile
  int32_t threads_ = hardware_threads(8);
  std::vector<Group> groups_;
  std::vector<uint32_t> sample_reads_;  // figures_read of each sample's plan
  std::optional<std::pair<DeviceProfile, Prediction>> base_, last_;
  int evaluations_ = 0;
};

double mean_spearman(const std::vector<TaskFit>& fits, bool after) {
  double sum = 0;
  int n = 0;
  for (const auto& f : fits) {
    // Only tasks where both fits rank the plans, so before and after average the same tasks.
    if (f.plans >= 3 && !std::isnan(f.spearman_before) && !std::isnan(f.spearman_after))
      sum += after ? f.spearman_after : f.spearman_before, ++n;
  }
  return n ? sum / n : 0;
}

}  // namespace

const std::vector<CalibrationParameter>& calibration_parameters() {
  using P = DeviceProfile;
  static const std::vector<CalibrationParameter> kParams = [] {
    std::vector<CalibrationParameter> v;
    for (const auto& t : efficiency_terms()) v.push_back({std::string("efficiency.") + t.name, t.field, 0.02, 50});
    // Launch costs are measured facts of the GPU and driver (3-5 us a launch): full-size sweeps,
    // where a launch is a small share of a plan's time, cannot pin them, and a fit left free
    // moves them to absorb what the model lacks (to 16 us), which then decides every small-size
    // run. They stay within what microbenchmarks allow.
    v.push_back({"launch.kernel_us", &P::kernel_launch_us, 2, 6});
    v.push_back({"launch.library_dispatch_us", &P::library_dispatch_us, 1, 6});
    v.push_back({"launch.kernel_floor_us", &P::kernel_floor_us, 0.5, 3});
    v.push_back({"memory.inflight_bytes_per_sm", &P::inflight_bytes_per_sm, 256, 1 << 20});
    // L2 bandwidth is not fitted: the committed sweeps do not pin it (fits ending anywhere from
    // 3.3e12 to 1e13 B/s judge the held-out plans alike), so it keeps the starting profile's figure.
    v.push_back({"compute.wmma_fraction", &P::wmma_fraction, 0.05, 1});
    v.push_back({"compute.library_tf32_fraction", &P::library_tf32_fraction, 0.05, 1});
    return v;
  }();
  return kParams;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  VINCI_REQUIRE(a.size() == b.size(), "spearman: " << a.size() << " vs " << b.size() << " values");
  if (a.size() < 2) return std::nan("");
  std::vector<double> ra = ranks(a), rb = ranks(b);
  double n = static_cast<double>(a.size());
  double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : std::nan("");
}

Result<CalibrationReport> calibrate(const DeviceProfile& start, const std::vector<CalibrationSample>& samples,
                                    const CalibrationOptions& options) {
  if (samples.empty()) return invalid_argument("calibration: no samples");
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!samples[i].task) return invalid_argument("calibration sample " + std::to_string(i) + ": no task");
    if (!(samples[i].measured_us > 0) || !std::isfinite(samples[i].measured_us))
      return invalid_argument("calibration sample " + std::to_string(i) + ": measured time must be > 0, found " +
                              std::to_string(samples[i].measured_us));
  }
  std::vector<const CalibrationParameter*> params;
  for (const auto& p : calibration_parameters())
    if (options.parameters.empty() ||
        std::find(options.parameters.begin(), options.parameters.end(), p.name) != options.parameters.end())
      params.push_back(&p);
  for (const auto& name : options.parameters)
    if (std::none_of(params.begin(), params.end(), [&](const CalibrationParameter* p) { return p->name == name; }))
      return invalid_argument("calibration: unknown parameter '" + name + "'");

  Fitter fitter(samples, options);
  CalibrationReport report;
  DeviceProfile cur = start;
  for (const auto* p : params) report.before[p->name] = cur.*(p->field);
  VINCI_ASSIGN_OR_RETURN(double best, fitter.loss(cur));
  report.loss_before = best;
  VINCI_ASSIGN_OR_RETURN(std::vector<TaskFit> fits_before, fitter.correlations(cur));

  double step = options.initial_step;
  while (report.rounds < options.max_rounds && step >= options.min_step) {
    ++report.rounds;
    bool moved = false;
    for (const auto* p : params) {
      // Keep going in a direction while it helps: a coordinate line search on a log grid.
      for (double dir : {1.0, -1.0}) {
        for (;;) {
          DeviceProfile trial = cur;
          double v = std::clamp(cur.*(p->field) * std::exp(dir * step), p->lo, p->hi);
          if (v == cur.*(p->field)) break;
          trial.*(p->field) = v;
          VINCI_ASSIGN_OR_RETURN(double l, fitter.loss(trial));
          if (!(l < best - 1e-15)) break;
          best = l;
          cur = trial;
          fitter.accept();
          moved = true;
        }
      }
    }
    if (!moved) step *= 0.5;
  }
  report.fitted = cur;
  report.loss_after = best;
  for (const auto* p : params) report.after[p->name] = cur.*(p->field);
  VINCI_ASSIGN_OR_RETURN(std::vector<TaskFit> fits_after, fitter.correlations(cur));
  for (size_t i = 0; i < fits_after.size(); ++i) fits_after[i].spearman_before = fits_before[i].spearman_after;
  std::sort(fits_after.begin(), fits_after.end(), [](const TaskFit& a, const TaskFit& b) {
    return a.task_id != b.task_id ? a.task_id < b.task_id : a.sizes < b.sizes;
  });
  report.tasks = fits_after;
  report.spearman_before = mean_spearman(report.tasks, false);
  report.spearman_after = mean_spearman(report.tasks, true);
  report.evaluations = fitter.evaluations();
  return report;
}

Status read_json_lines(const std::string& path, const std::string& what,
                       const std::function<Status(const std::string& where, const nlohmann::json& j)>& line) {
  Result<std::string> file = read_file(path, kMeasurementFile);
  if (!file.ok()) return Status(file.status().code(), what + " " + file.status().message());
  std::istringstream in(*file);
  std::string text;
  for (int n = 1; std::getline(in, text); ++n) {
    std::string where = path + ":" + std::to_string(n);
    size_t first = text.find_first_not_of(" \t\r");
    if (first == std::string::npos || text[first] == '#') continue;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(where + ": expected a JSON object");
    VINCI_RETURN_IF_ERROR(line(where, j));
  }
  return Status();
}

Result<std::vector<CalibrationSample>> load_calibration_samples(const std::string& path, const TaskSuite& suite) {
  std::vector<CalibrationSample> out;
  VINCI_RETURN_IF_ERROR(
      read_json_lines(path, "calibration samples", [&](const std::string& where, const nlohmann::json& j) -> Status {
        auto str = [&](const char* key) -> Result<std::string> {
          auto it = j.find(key);
          if (it == j.end() || !it->is_string())
            return Status(invalid_argument(where + ": key '" + key + "': expected a string"));
          return it->get<std::string>();
        };
        auto num = [&](const char* key, bool required) -> Result<double> {
          auto it = j.find(key);
          if (it == j.end() && !required) return 0.0;
          if (it == j.end() || !it->is_number() || !(it->get<double>() > 0))
            return Status(invalid_argument(where + ": key '" + key + "': expected a positive number"));
          return it->get<double>();
        };
        VINCI_ASSIGN_OR_RETURN(std::string id, str("task"));
        VINCI_ASSIGN_OR_RETURN(std::string size, str("size"));
        const Task* task = suite.find(id);
        if (!task) return invalid_argument(where + ": key 'task': no task '" + id + "' in the suite");
        auto sizes = task->sizes.find(size);
        if (sizes == task->sizes.end())
          return invalid_argument(where + ": key 'size': task " + id + " has no '" + size + "' sizes");
        CalibrationSample s;
        s.task = task;
        s.sizes = sizes->second;
        VINCI_ASSIGN_OR_RETURN(s.measured_us, num("kernel_us", true));
        VINCI_ASSIGN_OR_RETURN(s.measured_reference_us, num("reference_us", false));
        if (j.contains("plan")) {
          Result<Plan> p = plan_from_json(j["plan"]);
          if (!p.ok()) return invalid_argument(where + ": key 'plan': " + p.status().message());
          s.plan = *p;
        } else {
          std::map<std::string, std::string> knobs;
          auto it = j.find("knobs");
          if (it == j.end() || !it->is_object())
            return invalid_argument(where + ": expected key 'plan' or 'knobs' (an object)");
          for (const auto& [k, v] : it->items()) {
            if (!v.is_string()) return invalid_argument(where + ": key 'knobs." + k + "': expected a string");
            knobs[k] = v.get<std::string>();
          }
          Result<Plan> p = generate_plan(*task, knobs);
          if (!p.ok()) return invalid_argument(where + ": key 'knobs': " + p.status().message());
          s.plan = *p;
        }
        if (s.plan.task_id != task->id)
          return invalid_argument(where + ": key 'plan': the plan is for task '" + s.plan.task_id + "', not '" + id +
                                  "'");
        out.push_back(std::move(s));
        return Status();
      }));
  if (out.empty()) return invalid_argument(path + ": no samples");
  return out;
}

std::string calibration_report_text(const CalibrationReport& r) {
  std::ostringstream os;
  char buf[256];
  os << "parameter                         before          after\n";
  for (const auto& [name, before] : r.before) {
    std::snprintf(buf, sizeof buf, "%-30s %12.5g %14.5g\n", name.c_str(), before, r.after.at(name));
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "loss (mean squared log error)  %12.5g %14.5g\n", r.loss_before, r.loss_after);
  os << buf;
  std::snprintf(buf, sizeof buf, "spearman (mean over tasks)     %12.4f %14.4f\n", r.spearman_before, r.spearman_after);
  os << buf << "task       plans  spearman before   after  sizes\n";
  for (const auto& t : r.tasks) {
    std::snprintf(buf, sizeof buf, "%-10s %5d  %15.4f %7.4f  %s\n", t.task_id.c_str(), t.plans, t.spearman_before,
                  t.spearman_after, t.sizes.c_str());
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "rounds %d, loss evaluations %d\n", r.rounds, r.evaluations);
  os << buf;
  return os.str();
}

}  // namespace vinci
