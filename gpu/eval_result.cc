#include "gpu/eval_result.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/text.h"
#include "gpu/executor.h"
#include "recorder/address.h"

namespace vinci {
namespace {

// NaN compares unequal to itself; records compare equal when both hold NaN in the same place.
bool same_double(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

bool same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_double(a[i], b[i])) return false;
  return true;
}

Result<Digest> digest_of(capnp::Data::Reader d, const char* field) {
  if (d.size() == 0) return Digest();
  if (d.size() != 16)
    return corruption(std::string("measurement: field '") + field + "': expected a 16-byte address, found " +
                      std::to_string(d.size()) + " bytes");
  return Digest::from_bytes(d.begin());
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

bool operator==(const TrialResult& a, const TrialResult& b) {
  return a.correct == b.correct && same_double(a.max_abs_err, b.max_abs_err) &&
         same_double(a.mean_abs_err, b.mean_abs_err) && a.distribution == b.distribution && a.seed == b.seed;
}

bool operator==(const EvalResult& a, const EvalResult& b) {
  return a.evaluator == b.evaluator && a.device == b.device && a.plan == b.plan && a.compiled == b.compiled &&
         a.compile_log == b.compile_log && a.compile_log_address == b.compile_log_address && a.correct == b.correct &&
         a.trials == b.trials && same_doubles(a.kernel_times_us, b.kernel_times_us) &&
         same_doubles(a.reference_times_us, b.reference_times_us) && a.statistic == b.statistic &&
         same_double(a.kernel_us, b.kernel_us) && same_double(a.reference_us, b.reference_us) &&
         same_double(a.speedup, b.speedup) && same_double(a.time_coverage, b.time_coverage) && a.decoy == b.decoy &&
         a.flags == b.flags && a.error == b.error && a.settings == b.settings && a.size == b.size &&
         a.kernel_output == b.kernel_output && a.kernel_output_dropped == b.kernel_output_dropped;
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  size_t n = samples.size();
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(n / 2), samples.end());
  double hi = samples[n / 2];
  if (n % 2) return hi;
  double lo = *std::max_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(n / 2));
  return 0.5 * (lo + hi);
}

void apply_adaptive_timing(const AdaptiveTiming& rule, std::vector<double>* kernel_us,
                           std::vector<double>* reference_us, std::map<std::string, std::string>* settings) {
  const size_t cap = std::min(kernel_us->size(), reference_us->size());
  size_t n = cap;
  std::string why = "cap";
  for (size_t k = 1; k < cap; ++k) {
    if (!adaptive_check_due(rule, static_cast<int>(k))) continue;  // the GPU worker's points too
    std::vector<double> c(kernel_us->begin(), kernel_us->begin() + static_cast<std::ptrdiff_t>(k));
    std::vector<double> r(reference_us->begin(), reference_us->begin() + static_cast<std::ptrdiff_t>(k));
    SpeedupInterval s = speedup_interval(rule, c, r);
    if (s.stop) {
      n = k;
      why = s.why;
      break;
    }
  }
  kernel_us->resize(n);
  reference_us->resize(n);
  record_adaptive_timing(rule, static_cast<int>(cap), static_cast<int>(n), why, settings);
}

bool adaptive_check_due(const AdaptiveTiming& rule, int taken) {
  const int first = std::max(rule.min_samples, 1);
  return taken >= first && (taken - first) % std::max(rule.step, 1) == 0;
}

double spot_check_share(const EvalRequest& request, int final_checks) {
  const double fixed = 1.0 / kSpotCheckEvery;
  if (!request.adaptive) return fixed;
  const int ordinary = request.samples - final_checks;  // the fixed protocol's ordinary rounds
  const int before_first_look = std::min(std::max(request.adaptive_rule.min_samples, 1), ordinary);
  if (before_first_look <= 0) return fixed;
  return std::min(1.0, std::max(fixed, fixed * ordinary / before_first_look));
}

bool spot_checked(uint64_t key, double share) {
  if (share >= 1) return true;
  // The top 53 bits as a uniform draw in [0, 1).
  return static_cast<double>(key >> 11) * 0x1.0p-53 < share;
}

void record_adaptive_timing(const AdaptiveTiming& rule, int cap, int used, const std::string& why,
                            std::map<std::string, std::string>* settings) {
  (*settings)["timing_rule"] = "adaptive: level " + shortest_exact_number(rule.level) + ", width " +
                               shortest_exact_number(rule.rel_width) + ", from " + std::to_string(rule.min_samples) +
                               " samples every " + std::to_string(rule.step) + " to " + std::to_string(cap);
  (*settings)["samples_used"] = std::to_string(used);
  (*settings)["timing_stopped_by"] = why;
}

void EvalResult::finalize() {
  std::sort(flags.begin(), flags.end());
  flags.erase(std::unique(flags.begin(), flags.end()), flags.end());
  compile_log_address = compile_log.empty() ? Digest() : hash_tagged(kCompileLogKind, compile_log);
  statistic = "median";
  kernel_us = median(kernel_times_us);
  reference_us = median(reference_times_us);
  speedup = correct && kernel_us > 0 ? reference_us / kernel_us : 0.0;
}

void to_measurement(const EvalResult& r, schema::Measurement::Builder b) {
  b.setEvaluator(r.evaluator);
  b.setDevice(r.device);
  b.setPlan(AddressBytes(r.plan).data());
  b.setCompiled(r.compiled);
  if (!r.compile_log_address.is_zero()) {
    b.setCompileLog(AddressBytes(r.compile_log_address).data());
  }
  b.setCorrect(r.correct);
  auto trials = b.initTrials(static_cast<unsigned>(r.trials.size()));
  for (size_t i = 0; i < r.trials.size(); ++i) {
    auto t = trials[static_cast<unsigned>(i)];
    t.setCorrect(r.trials[i].correct);
    t.setMaxAbsErr(r.trials[i].max_abs_err);
    t.setMeanAbsErr(r.trials[i].mean_abs_err);
    t.setDistribution(r.trials[i].distribution);
    t.setSeed(r.trials[i].seed);
  }
  auto kt = b.initKernelTimesUs(static_cast<unsigned>(r.kernel_times_us.size()));
  for (size_t i = 0; i < r.kernel_times_us.size(); ++i) kt.set(static_cast<unsigned>(i), r.kernel_times_us[i]);
  auto rt = b.initReferenceTimesUs(static_cast<unsigned>(r.reference_times_us.size()));
  for (size_t i = 0; i < r.reference_times_us.size(); ++i) rt.set(static_cast<unsigned>(i), r.reference_times_us[i]);
  b.setStatistic(r.statistic);
  b.setKernelUs(r.kernel_us);
  b.setReferenceUs(r.reference_us);
  b.setSpeedup(r.speedup);
  b.setTimeCoverage(r.time_coverage);
  b.setDecoy(r.decoy);
  auto flags = b.initFlags(static_cast<unsigned>(r.flags.size()));
  for (size_t i = 0; i < r.flags.size(); ++i) flags.set(static_cast<unsigned>(i), r.flags[i]);
  b.setError(r.error);
  std::map<std::string, std::string> settings = r.settings;
  if (!r.kernel_output.empty() || r.kernel_output_dropped > 0) settings[kKernelOutputKey] = r.kernel_output;
  if (r.kernel_output_dropped > 0) settings[kKernelOutputDroppedKey] = std::to_string(r.kernel_output_dropped);
  auto kv = b.initSettings(static_cast<unsigned>(settings.size()));
  unsigned i = 0;
  for (const auto& [k, v] : settings) {  // std::map: sorted by key, as the schema asks
    kv[i].setKey(k);
    kv[i].setValue(v);
    ++i;
  }
  b.setSize(r.size);
}

Result<EvalResult> from_measurement(schema::Measurement::Reader r,
                                    const std::function<Result<std::string>(const Digest&)>& compile_log_text) {
  EvalResult e;
  e.evaluator = r.getEvaluator();
  e.device = r.getDevice();
  VINCI_ASSIGN_OR_RETURN(e.plan, digest_of(r.getPlan(), "plan"));
  e.compiled = r.getCompiled();
  VINCI_ASSIGN_OR_RETURN(e.compile_log_address, digest_of(r.getCompileLog(), "compileLog"));
  if (!e.compile_log_address.is_zero() && compile_log_text) {
    VINCI_ASSIGN_OR_RETURN(e.compile_log, compile_log_text(e.compile_log_address));
    if (hash_tagged(kCompileLogKind, e.compile_log) != e.compile_log_address)
      return mismatch("measurement: compile log text does not hash to its address " + e.compile_log_address.hex());
  }
  e.correct = r.getCorrect();
  for (auto t : r.getTrials())
    e.trials.push_back({t.getCorrect(), t.getMaxAbsErr(), t.getMeanAbsErr(), t.getDistribution(), t.getSeed()});
  for (double v : r.getKernelTimesUs()) e.kernel_times_us.push_back(v);
  for (double v : r.getReferenceTimesUs()) e.reference_times_us.push_back(v);
  e.statistic = r.getStatistic();
  e.kernel_us = r.getKernelUs();
  e.reference_us = r.getReferenceUs();
  e.speedup = r.getSpeedup();
  e.time_coverage = r.getTimeCoverage();
  e.decoy = r.getDecoy();
  for (auto f : r.getFlags()) e.flags.push_back(f);
  e.error = r.getError();
  for (auto kv : r.getSettings()) e.settings[kv.getKey()] = kv.getValue();
  auto out = e.settings.find(kKernelOutputKey);
  if (out != e.settings.end()) {
    e.kernel_output = out->second;
    e.settings.erase(out);
  }
  auto dropped = e.settings.find(kKernelOutputDroppedKey);
  if (dropped != e.settings.end()) {
    e.kernel_output_dropped = std::strtoll(dropped->second.c_str(), nullptr, 10);
    e.settings.erase(dropped);
  }
  e.size = r.getSize();
  return e;
}

nlohmann::json eval_result_to_json(const EvalResult& r) {
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : r.trials)
    trials.push_back({{"correct", t.correct},
                      {"maxAbsErr", number(t.max_abs_err)},
                      {"meanAbsErr", number(t.mean_abs_err)},
                      {"distribution", t.distribution},
                      {"seed", std::to_string(t.seed)}});  // 64-bit: a string, as record_json does
  auto samples = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(number(x));
    return a;
  };
  nlohmann::json settings = nlohmann::json::array();
  for (const auto& [k, v] : r.settings) settings.push_back({{"key", k}, {"value", v}});
  nlohmann::json j = {{"evaluator", r.evaluator},
                      {"device", r.device},
                      {"plan", r.plan.hex()},
                      {"compiled", r.compiled},
                      {"compileLog", r.compile_log},
                      {"correct", r.correct},
                      {"trials", trials},
                      {"kernelTimesUs", samples(r.kernel_times_us)},
                      {"referenceTimesUs", samples(r.reference_times_us)},
                      {"statistic", r.statistic},
                      {"kernelUs", number(r.kernel_us)},
                      {"referenceUs", number(r.reference_us)},
                      {"speedup", number(r.speedup)},
                      {"timeCoverage", number(r.time_coverage)},
                      {"decoy", r.decoy},
                      {"flags", r.flags},
                      {"error", r.error},
                      {"settings", settings},
                      {"size", r.size}};
  if (!r.kernel_output.empty() || r.kernel_output_dropped > 0) {
    j["kernelOutput"] = r.kernel_output;
    j["kernelOutputDroppedBytes"] = r.kernel_output_dropped;
  }
  return j;
}

void add_unreached_trials(EvalResult* r, const std::string& task_id, const EvalRequest& request) {
  for (int t = static_cast<int>(r->trials.size()); t < request.trials; ++t) {
    TrialResult tr;
    InputDistribution dist = trial_distribution(t);
    tr.distribution = distribution_name(dist);
    tr.seed = input_seed(request.seed, task_id, t, dist);
    tr.max_abs_err = tr.mean_abs_err = std::nan("");
    r->trials.push_back(tr);
  }
}

Result<ReferencePrecision> parse_reference_precision(const std::string& name) {
  Result<ReferencePrecision> p = kReferencePrecisions.parse(name);
  if (p.ok()) return p;
  return invalid_argument(
      "reference precision: expected kernelbench (PyTorch's defaults: cuDNN may use TF32, "
      "matmul FP32) or fp32 (TF32 off everywhere), found '" +
      name + "'");
}

Tolerance tolerance_for(const Task& task, const EvalRequest& request) {
  // Strict mode: current KernelBench's fp32 tolerance (docs/method.md, Evaluation); a task that
  // already asks for less keeps its own.
  constexpr double kStrictFp32 = 1e-4;
  if (request.strict) return {std::min(task.atol, kStrictFp32), std::min(task.rtol, kStrictFp32)};
  return {task.atol, task.rtol};
}

}  // namespace vinci
