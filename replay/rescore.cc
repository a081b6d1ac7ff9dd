#include "replay/rescore.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/compile/nvrtc.h"
#include "gpu/live/cuda_evaluator.h"
#include "gpu/sim/calibration.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "harness/record_sink.h"
#include "harness/records.h"
#include "harness/report.h"
#include "harness/trainer.h"
#include "harness/world.h"
#include "queue/queue_evaluator.h"
#include "recorder/object_store.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"
#include "replay/recorded_backbone.h"
#include "replay/run_data.h"

namespace vinci {

namespace {

using Clock = std::chrono::steady_clock;

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  return median(std::move(v));
}

// The recorded run's decisions, with the run's own backbone behind them for calls the log
// cannot answer. Parameter digests and losses are the recorded ones: the decisions, not a network
// trained on the new rewards, are what the new run keeps.
class RescoreBackbone : public Backbone {
 public:
  RescoreBackbone(std::unique_ptr<RecordedBackbone> recorded, Backbone* fallback)
      : recorded_(std::move(recorded)), fallback_(fallback) {}

  std::string kind() const override { return "recorded"; }
  Result<PolicySample> sample_policy(const PolicyInput& in, const RngKey& key, bool greedy) override {
    Result<PolicySample> r = recorded_->sample_policy(in, key, greedy);
    if (r.ok() || !unanswerable(r.status())) return r;
    ++fallbacks_;
    return fallback_->sample_policy(in, key, greedy);
  }
  Result<SelectionSample> sample_selection(const SelectionInput& in, const RngKey& key, bool greedy) override {
    Result<SelectionSample> r = recorded_->sample_selection(in, key, greedy);
    if (r.ok() || !unanswerable(r.status())) return r;
    ++fallbacks_;
    return fallback_->sample_selection(in, key, greedy);
  }
  Result<SummarySample> sample_summary(const SummaryInput& in, const RngKey& key, bool greedy) override {
    Result<SummarySample> r = recorded_->sample_summary(in, key, greedy);
    if (r.ok() || !unanswerable(r.status())) return r;
    ++fallbacks_;
    return fallback_->sample_summary(in, key, greedy);
  }
  Result<UpdateStats> update(const std::vector<Experience>& batch) override {
    VINCI_RETURN_IF_ERROR(fallback_->update(batch).status());
    return recorded_->update(batch);
  }
  Digest parameter_digest() const override { return recorded_->parameter_digest(); }
  // Supervised steps (the cold start) and checkpoints follow the recorded run too; the fallback
  // takes the same steps so that its answers come from a network trained like the run's.
  Result<RoleCrossEntropy> cross_entropy(const std::vector<Experience>& batch) override {
    return recorded_->cross_entropy(batch);
  }
  Result<UpdateStats> supervised_step(const std::vector<Experience>& batch, double lr) override {
    VINCI_RETURN_IF_ERROR(fallback_->supervised_step(batch, lr).status());
    return recorded_->supervised_step(batch, lr);
  }
  Status reset_optimizer() override {
    VINCI_RETURN_IF_ERROR(fallback_->reset_optimizer());
    return recorded_->reset_optimizer();
  }
  Result<std::string> checkpoint() const override { return recorded_->checkpoint(); }
  Status load_checkpoint(std::string_view bytes) override {
    VINCI_RETURN_IF_ERROR(fallback_->load_checkpoint(bytes));
    return recorded_->load_checkpoint(bytes);
  }
  uint64_t fallbacks() const { return fallbacks_.load(); }

 private:
  // The log has no answer for the call (a branch the run never took), or its answer does not fit
  // the call any more (a selection index past a candidate list the new measurements shortened).
  static bool unanswerable(const Status& s) {
    return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kMismatch;
  }

 public:
 private:
  std::unique_ptr<RecordedBackbone> recorded_;
  Backbone* fallback_;
  std::atomic<uint64_t> fallbacks_{0};
};

// Answers every evaluation with the plan's one new measurement, measuring plans it has not seen.
class RemeasuredEvaluator : public Evaluator {
 public:
  using Save = std::function<void(const std::string& task, const EvalResult&)>;
  RemeasuredEvaluator(std::map<Digest, EvalResult>* results, Evaluator* device, EvalRequest request, Save save)
      : results_(results), device_(device), request_(request), save_(std::move(save)) {}

  // A plan the run never measured (a branch the new measurements opened: what follows from another
  // rollout's win) is measured here and saved with the others, so --reuse takes it up too.
  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest&) override {
    std::lock_guard<std::mutex> lock(mu_);
    Digest a = plan_address(plan);
    auto it = results_->find(a);
    if (it != results_->end()) return it->second;
    VINCI_ASSIGN_OR_RETURN(EvalResult r, device_->evaluate(task, plan, request_));
    ++new_plans_;
    save_(task.id, r);
    return results_->emplace(a, std::move(r)).first->second;
  }
  std::string name() const override { return device_->name(); }
  uint64_t new_plans() const { return new_plans_; }

 private:
  std::mutex mu_;
  std::map<Digest, EvalResult>* results_;
  Evaluator* device_;
  EvalRequest request_;
  Save save_;
  uint64_t new_plans_ = 0;
};

// --offline: the device a measurement file stands for. It measures nothing; a plan the file lacks
// is an error naming it.
class OfflineDevice : public Evaluator {
 public:
  OfflineDevice(std::string file, std::string device) : file_(std::move(file)), device_(std::move(device)) {}
  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest&) override {
    return not_found("--offline: plan " + plan_address(plan).hex() + " of task " + task.id + " is not in " + file_ +
                     " (measured on " + device_ +
                     " with this rescore's --trials and --samples); measure it with "
                     "--live, or --reuse the file without --offline");
  }
  std::string name() const override { return device_; }

 private:
  std::string file_, device_;
};

// A text field of a --reuse line; "" when it is missing or not text.
std::string text_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A --reuse file's lines, parsed, each with where it stands ("FILE:LINE"). A rescore stopped while
// writing leaves its last line cut short, without a newline: that line is dropped (its measurement
// is taken again). A bad line anywhere else is an error.
Result<std::vector<std::pair<std::string, nlohmann::json>>> read_reuse_lines(const std::string& path) {
  Result<std::string> text = read_file(path, kMeasurementFile);
  if (!text.ok()) return Status(text.status().code(), "--reuse: " + text.status().message());
  std::istringstream in(*text);
  std::vector<std::pair<std::string, nlohmann::json>> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string where = path + ":" + std::to_string(n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if ((j.is_discarded() || !j.is_object()) && in.eof()) {
      std::fprintf(stderr, "%s: the last line is cut short (a stopped rescore); it is measured again\n", where.c_str());
      break;
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("measurement"))
      return invalid_argument(where + ": not a rescore measurement line");
    rows.emplace_back(std::move(where), std::move(j));
  }
  return rows;
}

// The one device a measurement file's rows were measured on.
Result<std::string> measured_device(const std::string& path,
                                    const std::vector<std::pair<std::string, nlohmann::json>>& rows) {
  std::set<std::string> devices;
  for (const auto& [where, j] : rows) devices.insert(text_field(j, "device"));
  if (devices.size() == 1) return *devices.begin();
  std::string names;
  for (const auto& d : devices) names += (names.empty() ? "" : ", ") + d;
  return invalid_argument("--offline: " + path + " must hold the measurements of one device, found " +
                          (devices.empty() ? std::string("none") : names));
}

struct PlanSeen {
  std::string task;
  EvalResult recorded;  // the first recorded measurement of the plan
};

std::string drift_report(const std::string& run_dir, const std::string& out_dir, const Experiment& exp,
                         const std::map<Digest, PlanSeen>& seen, const std::map<Digest, EvalResult>& now,
                         const std::string& device, uint64_t fallbacks, FastPCompare compare) {
  std::ostringstream md;
  md << "# Drift: `" << run_dir << "` re-measured on " << device << "\n\n";
  md << "The new run is `" << out_dir << "`. Speedups are over the plans each task's measurements name; "
     << "\"both\" counts plans correct in the recorded run and here.\n\n";
  // Per task: the plans' speedups recorded vs now.
  std::map<std::string, std::vector<std::pair<const EvalResult*, const EvalResult*>>> by_task;
  for (const auto& [a, s] : seen) {
    auto it = now.find(a);
    if (it != now.end()) by_task[s.task].emplace_back(&s.recorded, &it->second);
  }
  md << "| task | plans | correct recorded | correct here | both | median speedup recorded | median here | "
        "median ratio here/recorded | Spearman |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  int n_all = 0, rec_ok_all = 0, now_ok_all = 0, both_all = 0;
  std::vector<double> ratios_all;
  for (const auto& [task, pairs] : by_task) {
    int rec_ok = 0, now_ok = 0;
    std::vector<double> rs, ns, ratios, brs, bns;
    for (const auto& [r, n] : pairs) {
      rec_ok += r->correct;
      now_ok += n->correct;
      if (r->correct) rs.push_back(r->speedup);
      if (n->correct) ns.push_back(n->speedup);
      if (r->correct && n->correct && r->speedup > 0) {
        ratios.push_back(n->speedup / r->speedup);
        brs.push_back(r->speedup);
        bns.push_back(n->speedup);
      }
    }
    double sp = brs.size() >= 3 ? spearman(brs, bns) : std::nan("");
    md << "| " << task << " | " << pairs.size() << " | " << rec_ok << " | " << now_ok << " | " << ratios.size() << " | "
       << format_number("%.3g", median_of(rs)) << " | " << format_number("%.3g", median_of(ns)) << " | "
       << format_number("%.3g", median_of(ratios)) << " | " << format_number("%.2f", sp) << " |\n";
    n_all += static_cast<int>(pairs.size());
    rec_ok_all += rec_ok;
    now_ok_all += now_ok;
    both_all += static_cast<int>(ratios.size());
    ratios_all.insert(ratios_all.end(), ratios.begin(), ratios.end());
  }
  md << "| **all** | " << n_all << " | " << rec_ok_all << " | " << now_ok_all << " | " << both_all << " | | | "
     << format_number("%.3g", median_of(ratios_all)) << " | |\n\n";

  Result<RunData> before = read_run_data(run_dir);
  Result<RunData> after = read_run_data(out_dir);
  if (before.ok() && after.ok() && !before->eval.empty() && !after->eval.empty()) {
    const auto& b = before->eval.rbegin()->second;
    const auto& a = after->eval.rbegin()->second;
    md << "## fast_p of the final evaluation (held-out tasks, step " << before->eval.rbegin()->first << ")\n\n"
       << fast_p_compare_line(compare) << ".\n\n";
    md << "| turn | level | p | recorded | here | change |\n|---|---|---:|---:|---:|---:|\n";
    for (TurnMode m : {TurnMode::kLast, TurnMode::kBest}) {
      std::vector<FastP> fb = fast_p(b, exp.thresholds, m, Denominator::kAll, compare);
      std::vector<FastP> fa = fast_p(a, exp.thresholds, m, Denominator::kAll, compare);
      for (size_t i = 0; i < fb.size() && i < fa.size(); ++i) {
        md << "| " << (m == TurnMode::kLast ? "last" : "best") << " | "
           << (fb[i].level ? "L" + std::to_string(fb[i].level) : std::string("all")) << " | "
           << format_number("%g", fb[i].threshold) << " | " << format_number("%.1f", 100 * fb[i].value()) << " | "
           << format_number("%.1f", 100 * fa[i].value()) << " | "
           << format_number("%+.1f", 100 * (fa[i].value() - fb[i].value())) << " |\n";
      }
    }
    md << "\n## Verdicts that flip (last turn of the final evaluation)\n\n";
    int flips = 0;
    for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
      TurnOutcome ob = pick_turn(b[i].turns, TurnMode::kLast);
      TurnOutcome oa = pick_turn(a[i].turns, TurnMode::kLast);
      for (double p : exp.thresholds) {
        bool pb = fast_p_passes(ob, p, compare), pa = fast_p_passes(oa, p, compare);
        if (pb == pa) continue;
        ++flips;
        md << "- " << b[i].task << " at p = " << format_number("%g", p) << ": " << (pb ? "pass" : "fail") << " -> "
           << (pa ? "pass" : "fail") << " (recorded " << (ob.correct ? number_beside(ob.speedup, p) + "x" : "wrong")
           << ", here " << (oa.correct ? number_beside(oa.speedup, p) + "x" : "wrong") << ")\n";
      }
    }
    if (!flips) md << "None.\n";
  }
  md << "\nBackbone calls the recorded run could not answer (its own backbone answered): " << fallbacks << ".\n";
  return md.str();
}

// --out names the new run's folder, which must not exist yet.
Status check_out_dir(const std::string& out_dir) {
  if (out_dir.empty()) return invalid_argument("--out: expected a new run folder, found an empty string");
  struct stat st;
  if (::stat(out_dir.c_str(), &st) == 0)
    return invalid_argument("rescore: " + out_dir + " already exists (choose a new --out; --reuse " + out_dir +
                            "/measurements.jsonl takes up what it measured)");
  return Status();
}

// The completed run a rescore re-derives, and the experiment it becomes: the recorded config with
// the rescore's device, in a world of the run's suite, seed library and backbone.
struct RecordedRun {
  RunLocation loc;
  ManifestInfo manifest;
  Experiment exp;
  World world;
};

Result<RecordedRun> open_recorded_run(const std::string& run_dir, const RescoreOptions& options) {
  RecordedRun run;
  run.loc = RunLocation::of(run_dir);
  VINCI_ASSIGN_OR_RETURN(run.manifest, read_manifest(run.loc.manifest_path));
  if (!run.manifest.completed)
    return failed_precondition("run " + run_dir + " did not finish: rescore needs a completed run");
  if (!options.force) {
    VINCI_RETURN_IF_ERROR(check_numeric_settings(run.manifest.environment, capture_environment(), run_dir,
                                                 " (use --force to rescore anyway)"));
  }
  // The new run's config is the recorded one with these keys set (it is recorded as such).
  std::vector<std::string> overrides = {std::string("device.kind=") + kDeviceKinds.name(options.device)};
  if (options.device == DeviceKind::kSim && !options.profile.empty())
    overrides.push_back("device.profile=" + options.profile);
  VINCI_ASSIGN_OR_RETURN(
      run.exp, experiment_from_text(run.manifest.config_text, run.loc.manifest_path + " (config)", overrides));
  Experiment sim_exp = run.exp;  // the suite, seed library and backbone; no device is started here
  sim_exp.device = DeviceKind::kSim;
  sim_exp.queue.clear();
  // A language model's decisions are kept as recorded: its replies come from the log by call key.
  VINCI_ASSIGN_OR_RETURN(run.world, build_world(sim_exp, ModelCalls::kRecordedDecisions, run_dir));
  return run;
}

// The run's distinct plans and their first recorded measurement.
Result<std::map<Digest, PlanSeen>> recorded_plans(const std::string& run_dir) {
  std::map<Digest, PlanSeen> seen;
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (!r.isMeasurement()) continue;
    VINCI_ASSIGN_OR_RETURN(EvalResult e, read_measurement(r.getMeasurement()));
    if (e.plan == Digest() || seen.count(e.plan)) continue;  // a turn without a candidate
    PlanSeen s;
    s.task = r.getTask().cStr();
    s.recorded = std::move(e);
    seen.emplace(s.recorded.plan, std::move(s));
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage()) return corruption("run " + run_dir + ": " + reader->damage()->to_string());
  return seen;
}

struct PlanToMeasure {
  const Task* task;
  Plan plan;
  Digest address;
};

// Each plan the run measured, read from the run's store, with the task of the suite it is for.
Result<std::vector<PlanToMeasure>> plans_to_measure(const std::string& run_dir, const std::string& store_dir,
                                                    const std::map<Digest, PlanSeen>& seen, const TaskSuite& suite) {
  ObjectStore parent_store(store_dir);
  std::vector<PlanToMeasure> plans;
  for (const auto& [a, s] : seen) {
    const Task* task = suite.find(s.task);
    if (!task) return not_found("run " + run_dir + " measured task '" + s.task + "', which this suite lacks");
    VINCI_ASSIGN_OR_RETURN(StoredObject obj, parent_store.get(a));
    VINCI_ASSIGN_OR_RETURN(Plan plan, parse_plan(obj.bytes));
    Digest address = plan_address(plan);
    plans.push_back({task, std::move(plan), address});
  }
  return plans;
}

// What takes the new measurements, started, and the device name they are filed under.
struct MeasuringDevice {
  std::unique_ptr<Evaluator> evaluator;
  std::string name;
  CudaEvaluator* cuda = nullptr;  // the evaluator when it is the live GPU in this process
};

Result<MeasuringDevice> start_device(const RescoreOptions& options, const Experiment& exp,
                                     const std::vector<std::pair<std::string, nlohmann::json>>& reuse_rows) {
  MeasuringDevice device;
  if (options.offline) {
    if (options.reuse.empty()) return invalid_argument("rescore: --offline takes every measurement from --reuse FILE");
    if (!options.queue.empty()) return invalid_argument("rescore: --offline measures nothing: no --queue");
    VINCI_ASSIGN_OR_RETURN(device.name, measured_device(options.reuse, reuse_rows));
    device.evaluator = std::make_unique<OfflineDevice>(options.reuse, device.name);
  } else if (!options.queue.empty()) {
    std::string path = options.device == DeviceKind::kSim && !options.profile.empty() ? options.profile
                       : !exp.device_profile.empty()                                  ? exp.device_profile
                                                                                      : profile_path("h200");
    VINCI_ASSIGN_OR_RETURN(std::string profile_text, read_file(path, kDeviceProfileFile));
    QueueOptions qo;
    qo.url = options.queue;
    qo.attempts = exp.queue_attempts;
    EvaluatorSpec spec = options.device == DeviceKind::kCuda ? cuda_spec(profile_text, options.cuda.reference_precision,
                                                                         PlanLimits(), options.cuda.timing_budget_s)
                                                             : sim_spec(profile_text, exp.noise, PlanLimits());
    auto q = std::make_unique<QueueEvaluator>(qo, std::move(spec));
    Status started = q->start();
    if (!started.ok()) return Status(started.code(), "--queue: " + started.message());
    // The same name as in process for the sim (the profile is what prices); the GPUs that measured
    // are in each measurement's settings.
    device.name = options.device == DeviceKind::kSim ? "sim profile " + path : "cuda workers of queue " + options.queue;
    device.evaluator = std::move(q);
  } else if (options.device == DeviceKind::kCuda) {
    CudaEvaluatorOptions co = options.cuda;
    if (co.task_dir.empty()) co.task_dir = exp.task_dir.empty() ? default_task_dir() : exp.task_dir;
    auto c = std::make_unique<CudaEvaluator>(co);
    VINCI_RETURN_IF_ERROR(c->start());
    device.name = c->device_name();
    device.cuda = c.get();
    device.evaluator = std::move(c);
  } else {
    std::string path = !options.profile.empty()      ? options.profile
                       : !exp.device_profile.empty() ? exp.device_profile
                                                     : profile_path("h200");
    VINCI_ASSIGN_OR_RETURN(DeviceProfile profile, load_device_profile(path));
    device.name = "sim profile " + path;
    SimEvaluatorOptions so;
    so.noise = exp.noise;
    device.evaluator = std::make_unique<SimEvaluator>(std::move(profile), so);
  }
  return device;
}

EvalRequest rescore_request(const RescoreOptions& options, const Experiment& exp) {
  EvalRequest req;
  req.size = exp.size;
  req.seed = options.seed;
  req.trials = options.trials > 0 ? options.trials : exp.trials;
  req.samples = options.samples > 0 ? options.samples : exp.timing_samples;
  return req;
}

// Measurements of an earlier rescore (one that stopped, say) on the same device and request, and
// the task each is of.
Status take_reused(const std::vector<std::pair<std::string, nlohmann::json>>& reuse_rows,
                   const std::string& device_name, const std::string& request_text,
                   std::map<Digest, EvalResult>* results, std::map<Digest, std::string>* task_of) {
  for (const auto& [where, j] : reuse_rows) {
    if (text_field(j, "device") != device_name || text_field(j, "request") != request_text) continue;
    std::string bytes;
    const nlohmann::json& hex = j["measurement"];
    if (!hex.is_string() || !hex_decode(hex.get<std::string>(), &bytes))
      return invalid_argument(where + ": the measurement is not hex");
    VINCI_ASSIGN_OR_RETURN(EvalResult r, decode_eval_result(bytes, text_field(j, "compile_log")));
    // Plans the run never measured stay too: an earlier re-drive measured them on a branch it
    // opened, and this one opens the same branch from the same measurements.
    task_of->emplace(r.plan, text_field(j, "task"));
    results->emplace(r.plan, std::move(r));
  }
  return Status();
}

// Compiles what is left to measure in parallel first; the evaluator then finds it in the cache.
void precompile_unmeasured(const CudaEvaluator& cuda, const std::string& cache_dir,
                           const std::vector<PlanToMeasure>& plans, const std::map<Digest, EvalResult>& results) {
  std::vector<std::pair<std::string, std::string>> sources;
  for (const auto& p : plans)
    if (!results.count(p.address))
      for (const auto& k : p.plan.kernels) sources.emplace_back(k.name + ".cu", k.source);
  NvrtcOptions no;
  no.arch = cuda.arch();
  no.cache_dir = cache_dir;
  NvrtcCompiler compiler(no);
  precompile(compiler, sources, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// <out>/measurements.jsonl. Every measurement is appended as it is taken: GPU time is not lost if
// the re-drive fails, and --reuse takes it up again.
class MeasurementLog {
 public:
  MeasurementLog(const std::string& path, std::string device, std::string request)
      : out_(path, std::ios::app), device_(std::move(device)), request_(std::move(request)) {}

  void save(const std::string& task, const EvalResult& r) {
    out_ << nlohmann::json{{"task", task},
                           {"plan", r.plan.hex()},
                           {"device", device_},
                           {"request", request_},
                           {"measurement", hex_encode(encode_eval_result(r))},
                           {"compile_log", r.compile_log}}
                .dump()
         << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
  std::string device_, request_;
};

// Measures each plan that `results` lacks, once, saving each measurement as it comes; returns how
// many it measured.
Result<uint64_t> measure_plans(const std::vector<PlanToMeasure>& plans, Evaluator& device, const EvalRequest& req,
                               const RescoreOptions& options, const RescoreProgress& progress, MeasurementLog& log,
                               std::map<Digest, EvalResult>& results) {
  uint64_t done = 0, measured_first = 0;
  std::mutex done_mu;
  auto measure = [&](size_t i) -> Status {
    const auto& [task, plan, address] = plans[i];
    {
      std::lock_guard<std::mutex> lock(done_mu);
      ++done;
      if (results.count(address)) return Status();
    }
    VINCI_ASSIGN_OR_RETURN(EvalResult r, device.evaluate(*task, plan, req));
    std::lock_guard<std::mutex> lock(done_mu);
    log.save(task->id, r);
    ++measured_first;
    if (progress) {
      char line[200];
      std::snprintf(line, sizeof line, "%s %s %s %.3gx", task->id.c_str(), r.plan.hex().substr(0, 8).c_str(),
                    r.correct ? "ok" : "wrong", r.speedup);
      progress(done, plans.size(), line);
    }
    results.emplace(r.plan, std::move(r));
    return Status();
  };
  if (options.queue.empty()) {
    for (size_t i = 0; i < plans.size(); ++i) VINCI_RETURN_IF_ERROR(measure(i));
  } else {
    // Through the queue, many at once: the workers measure in parallel. measurements.jsonl is in
    // the order answers come; the re-drive reads the results by plan, so the new run does not
    // depend on that order.
    std::atomic<size_t> next{0};
    std::vector<Status> status(plans.size());
    std::vector<std::thread> pool;
    int n = std::max(1, std::min<int>(options.queue_in_flight, static_cast<int>(plans.size())));
    for (int t = 0; t < n; ++t)
      pool.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < plans.size();) status[i] = measure(i);
      });
    for (auto& t : pool) t.join();
    for (const Status& st : status) VINCI_RETURN_IF_ERROR(st);
  }
  return measured_first;
}

ManifestInfo rescore_manifest(const std::string& run_dir, const RescoreOptions& options, const RecordedRun& run,
                              const std::string& device_name) {
  ManifestInfo m;
  m.name = run.manifest.name;
  m.config_path = run.manifest.config_path;
  m.config_text = run.exp.effective_toml;
  m.seed = run.manifest.seed;
  m.world = RunWorld::kRescore;
  m.environment = capture_environment();
  m.parent_run = run_dir + " " + run.manifest.run_digest.hex();
  m.annotations["rescore.device"] = device_name;
  if (options.offline) m.annotations["rescore.measurements"] = options.reuse;
  return m;
}

// The run re-driven into options.out_dir from the new measurements, with its report: rep gains the
// re-drive's counts, the new log's digest and the drift report.
Status redrive(const std::string& run_dir, const RescoreOptions& options, RecordedRun& run, Evaluator& device,
               const EvalRequest& req, MeasurementLog& log, const std::map<Digest, PlanSeen>& seen,
               std::map<Digest, EvalResult>& results, RescoreReport* rep) {
  VINCI_ASSIGN_OR_RETURN(auto recorded, RecordedBackbone::open(run_dir));
  RescoreBackbone sim_backbone(std::move(recorded), run.world.backbone.get());
  // A language model's parameters are its identity; its answers come from the recorded transport.
  Backbone& backbone = run.world.model ? *run.world.backbone : static_cast<Backbone&>(sim_backbone);
  RemeasuredEvaluator evaluator(&results, &device, req,
                                [&log](const std::string& task, const EvalResult& r) { log.save(task, r); });
  VINCI_ASSIGN_OR_RETURN(auto writer,
                         RunWriter::create(options.out_dir, rescore_manifest(run_dir, options, run, rep->device)));
  WriteSink sink(writer.get());
  Result<TrainerOutput> out = run_experiment(run.exp, run.world.suite, evaluator, backbone, run.world.seed_library,
                                             sink, nullptr, run.world.model.get(), run.world.trainer.trainer.get());
  if (!out.ok()) {
    (void)writer->flush();
    return Status(out.status().code(), "rescore: re-driving the run failed: " + out.status().message() +
                                           " (the partial run is in " + options.out_dir + ")");
  }
  // The log's closing record, then drift.md (which reads the new run), then the manifest marked
  // complete: a rescore stopped anywhere before its end leaves an unfinished run, never a
  // complete one without its report.
  {
    capnp::MallocMessageBuilder end;
    init_run_end(end, writer->record_count(), writer->digest());
    VINCI_RETURN_IF_ERROR(writer->append(end).status());
    VINCI_RETURN_IF_ERROR(writer->checkpoint());
  }
  rep->measured_redrive = evaluator.new_plans();
  rep->fallback_calls = sim_backbone.fallbacks();
  rep->records = writer->record_count();
  rep->digest = writer->digest();
  rep->drift_markdown = drift_report(run_dir, options.out_dir, run.exp, seen, results, rep->device, rep->fallback_calls,
                                     options.fast_p_inclusive ? FastPCompare::kInclusive : FastPCompare::kStrict);
  VINCI_RETURN_IF_ERROR(write_file_atomic(options.out_dir + "/drift.md", rep->drift_markdown));
  return writer->mark_complete();
}

}  // namespace

Result<RescoreReport> rescore_run(const std::string& run_dir, const RescoreOptions& options,
                                  const RescoreProgress& progress) {
  Clock::time_point start = Clock::now();
  pin_numeric_settings();
  VINCI_RETURN_IF_ERROR(check_out_dir(options.out_dir));
  VINCI_ASSIGN_OR_RETURN(RecordedRun run, open_recorded_run(run_dir, options));

  // 1. The run's distinct plans and their first recorded measurement.
  VINCI_ASSIGN_OR_RETURN(auto seen, recorded_plans(run_dir));
  VINCI_ASSIGN_OR_RETURN(auto plans, plans_to_measure(run_dir, run.loc.store_dir, seen, run.world.suite));

  // 2. Measure each once.
  std::vector<std::pair<std::string, nlohmann::json>> reuse_rows;
  if (!options.reuse.empty()) {
    VINCI_ASSIGN_OR_RETURN(reuse_rows, read_reuse_lines(options.reuse));
  }
  VINCI_ASSIGN_OR_RETURN(MeasuringDevice device, start_device(options, run.exp, reuse_rows));
  EvalRequest req = rescore_request(options, run.exp);
  std::map<Digest, EvalResult> results;
  std::map<Digest, std::string> task_of;  // the task of each plan taken from --reuse
  std::string request_text = encode_eval_request("", Plan(), req);
  VINCI_RETURN_IF_ERROR(take_reused(reuse_rows, device.name, request_text, &results, &task_of));
  uint64_t reused = results.size();
  if (device.cuda && !options.cuda.nvrtc_cache_dir.empty())
    precompile_unmeasured(*device.cuda, options.cuda.nvrtc_cache_dir, plans, results);
  // NEW/objects: the new run's objects stay inside the folder --out names (RunLocation finds them
  // there), never in a store beside it.
  VINCI_RETURN_IF_ERROR(make_dirs(options.out_dir + "/objects"));
  MeasurementLog log(options.out_dir + "/measurements.jsonl", device.name, request_text);
  for (const auto& [a, r] : results) log.save(task_of.at(a), r);
  VINCI_ASSIGN_OR_RETURN(uint64_t measured_first,
                         measure_plans(plans, *device.evaluator, req, options, progress, log, results));
  RescoreReport rep;
  rep.distinct_plans = plans.size();
  rep.device = device.name;
  rep.measure_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rep.measured = measured_first;
  rep.reused = reused;

  // 3. Re-drive into the new run.
  VINCI_RETURN_IF_ERROR(redrive(run_dir, options, run, *device.evaluator, req, log, seen, results, &rep));
  rep.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rep;
}

}  // namespace vinci
