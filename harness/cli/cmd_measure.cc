// `harness measure`: the task suite on a device, plan by plan, beside the simulator's predictions.
//
//   harness measure [--device cuda|sim] [--size full|small] [--plans N] [--task ID ...]
//                   [--level N] [--seed N] [--trials N] [--samples N] [--repeat N]
//                   [--out DIR] [--timeout S] [--nvrtc-cache DIR] [--no-calibrate]
//                   [--remeasure FILE ... [--stale-only]] [--from-measurements FILE ...]
//
// For every task (sorted by id): the generator's default plan and N generated plans (keyed random
// knob settings, duplicates dropped), each evaluated on the device and predicted by the sim
// evaluator. With --remeasure, a task's plans are instead those an earlier sweep's rows name
// (their knobs, through today's generator, labels kept), so a sweep whose code the generator no
// longer writes can be measured again row for row. Writes, in DIR (default measure-out/):
//   measurements.jsonl  one line per plan: the live and sim records side by side, and wall times
//                       (written as it goes, so an interrupted sweep keeps what it measured);
//   calibration.jsonl   the correct live plans in gpu/sim/calibration.h's sample format;
//   fitted_profile.toml the device profile calibrated to them (unless --no-calibrate);
//   report.md           per task: reference time, default plan, best generated plan, correctness;
//                       the share of guaranteed plans that are correct; Spearman rank correlation
//                       of predicted vs measured speedup per op family, before and after the fit;
//                       sim vs live correctness agreement; compile time, evaluator overhead and
//                       candidates per minute; with --repeat N, the spread of one kernel's median
//                       over N evaluations in a row for kernels of at least 100 us.
// Exit 0 when every guaranteed plan the device evaluated is correct, 1 otherwise, 2 on error.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/cli.h"
#include "core/rng.h"
#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/codegen/knobs.h"
#include "gpu/compile/nvrtc.h"
#include "gpu/eval_result.h"
#include "gpu/live/cuda_evaluator.h"
#include "gpu/sim/calibration.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_agreement.h"
#include "gpu/sim/sim_evaluator.h"
#include "harness/cli/commands.h"

namespace vinci {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

int fail(const std::string& what) {
  std::fprintf(stderr, "harness measure: %s\n", what.c_str());
  return 2;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

struct Row {
  const Task* task = nullptr;
  Plan plan;
  std::string label;  // default | g1..gN
  bool guaranteed = false;
  std::string family;
  EvalResult live, sim;
  double wall_ms = 0, compile_ms = 0, eval_ms = 0;
};

nlohmann::json row_json(const Row& r) {
  auto brief = [](const EvalResult& e) {
    return nlohmann::json{{"compiled", e.compiled},
                          {"correct", e.correct},
                          {"kernel_us", e.kernel_us},
                          {"reference_us", e.reference_us},
                          {"speedup", e.speedup},
                          {"error", e.error},
                          {"flags", e.flags},
                          {"time_coverage", e.time_coverage},
                          {"kernel_times_us", e.kernel_times_us},
                          {"reference_times_us", e.reference_times_us}};
  };
  auto live = brief(r.live);
  if (r.live.settings.count("timing_stopped_by")) live["timing_stopped_by"] = r.live.settings.at("timing_stopped_by");
  return {{"task", r.task->id},         {"size", r.live.size},
          {"label", r.label},           {"plan_address", r.live.plan.hex()},
          {"knobs", r.plan.knobs},      {"guaranteed", r.guaranteed},
          {"family", r.family},         {"live", live},
          {"sim", brief(r.sim)},        {"wall_ms", r.wall_ms},
          {"compile_ms", r.compile_ms}, {"eval_ms", r.eval_ms},
          {"device", r.live.device}};
}

// Spearman of predicted vs measured speedup over the rows (correct in both worlds).
struct FamilyCorrelation {
  int plans = 0;
  double pooled = std::nan("");
  double per_task_mean = std::nan("");
  int tasks = 0;
};

FamilyCorrelation correlate(const std::vector<const Row*>& rows, const std::function<double(const Row&)>& predicted) {
  FamilyCorrelation fc;
  std::vector<double> a, b;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> per_task;
  for (const Row* r : rows) {
    if (!r->live.correct || r->live.speedup <= 0) continue;
    double p = predicted(*r);
    if (!(p > 0)) continue;
    a.push_back(p);
    b.push_back(r->live.speedup);
    per_task[r->task->id].first.push_back(p);
    per_task[r->task->id].second.push_back(r->live.speedup);
  }
  fc.plans = static_cast<int>(a.size());
  if (a.size() >= 3) fc.pooled = spearman(a, b);
  double sum = 0;
  for (const auto& [id, v] : per_task) {
    if (v.first.size() < 3) continue;
    double s = spearman(v.first, v.second);
    if (std::isnan(s)) continue;
    sum += s;
    ++fc.tasks;
  }
  if (fc.tasks) fc.per_task_mean = sum / fc.tasks;
  return fc;
}

// A failure of one of the steps below: `what` is printed as it is (after "harness measure: ").
Status failure(std::string what) { return invalid_argument(std::move(what)); }

using LabelledPlans = std::vector<std::pair<std::string, Plan>>;

struct MeasureOptions {
  std::string device = "cuda", size = "full", out_dir = "measure-out", task_dir, nvrtc_cache, profile_file;
  std::string reference_precision_name = "kernelbench";  // --reference-precision, typed below
  ReferencePrecision reference_precision = ReferencePrecision::kKernelbench;
  std::vector<std::string> only, from_files, variants, again_files;
  std::string from, timing = "fixed";
  double timing_width = 0.01;
  int plans_per_task = 8, level = 0, trials = 5, samples = 30, repeat = 0;
  uint64_t seed = 1;
  double timeout = 600, budget = 0, timing_budget = 2;
  bool calibrate = true, stale_only = false;
  SizeName size_name = SizeName::kFull;
};

// Parses the command line into *o. Returns the exit code when the command ends here (--help, a
// bad option), nothing when it goes on.
std::optional<int> parse_measure_options(const std::vector<std::string>& args, MeasureOptions* o) {
  po::options_description named(
      "usage: harness measure [--device cuda|sim] [--size full|small] [--plans N] [--task ID ...]");
  named.add_options()("help,h", "print this help")("device", po::value<std::string>(&o->device)->default_value("cuda"),
                                                   "cuda (this machine's GPU) or sim")(
      "size", po::value<std::string>(&o->size)->default_value("full"), "task size: full or small")(
      "plans", po::value<int>(&o->plans_per_task)->default_value(8),
      "generated plans per task beside the default plan")("task", po::value<std::vector<std::string>>(&o->only),
                                                          "only these tasks (repeatable)")(
      "variant", po::value<std::vector<std::string>>(&o->variants),
      "KNOB=VALUE[,KNOB=VALUE...]: also the default plan with these knobs set (repeatable; a task whose "
      "space lacks every one of the knobs is skipped for it)")("level", po::value<int>(&o->level)->default_value(0),
                                                               "only tasks of this level (0: all)")(
      "from", po::value<std::string>(&o->from), "only tasks whose id sorts at or after this one (resume a sweep)")(
      "seed", po::value<uint64_t>(&o->seed)->default_value(1), "seed of the generated settings and the trial inputs")(
      "trials", po::value<int>(&o->trials)->default_value(5), "correctness trials per plan")(
      "samples", po::value<int>(&o->samples)->default_value(30),
      "timing samples per plan (each of kernel and reference)")(
      "timing", po::value<std::string>(&o->timing)->default_value("fixed"),
      "fixed: --samples of each; adaptive: in steps of 10 from 20 until the speedup's 99% interval is within "
      "--timing-width of it, --samples the cap (docs/live_evaluator.md, \"Adaptive timing\")")(
      "timing-width", po::value<double>(&o->timing_width)->default_value(0.01),
      "adaptive: the speedup's interval width relative to it at which sampling stops (0 to 1)")(
      "repeat", po::value<int>(&o->repeat)->default_value(0),
      "timing quality: evaluate N default plans of >= 100 us 10 times each")(
      "out", po::value<std::string>(&o->out_dir)->default_value("measure-out"), "output folder")(
      "timeout", po::value<double>(&o->timeout)->default_value(600),
      "cuda: seconds before an evaluation counts as a hang")(
      "nvrtc-cache", po::value<std::string>(&o->nvrtc_cache),
      "cuda: NVRTC cache folder; kernels are compiled into it in parallel first")(
      "reference-precision", po::value<std::string>(&o->reference_precision_name)->default_value("kernelbench"),
      "cuda: the reference's precision policy: kernelbench (default; PyTorch's defaults, cuDNN may use TF32) or fp32 "
      "(TF32 off)")("budget", po::value<double>(&o->budget)->default_value(0),
                    "stop starting new tasks after this many seconds (0: none)")(
      "timing-budget", po::value<double>(&o->timing_budget)->default_value(2),
      "cuda: seconds of timed runs per candidate at most (>= 5 samples)")(
      "profile", po::value<std::string>(&o->profile_file), "device profile for the sim predictions (default h200)")(
      "tasks", po::value<std::string>(&o->task_dir), "task folder (default data/tasks of this build)")(
      "no-calibrate", "skip fitting the sim profile to the measurements")(
      "from-measurements", po::value<std::vector<std::string>>(&o->from_files),
      "rebuild the report from earlier sweeps' measurements.jsonl (repeatable) instead of measuring")(
      "remeasure", po::value<std::vector<std::string>>(&o->again_files),
      "measure again the plans an earlier sweep's measurements.jsonl names (repeatable): each row's task, label "
      "and knobs, as this generator writes them; no default or generated plans beside them")(
      "stale-only", "with --remeasure: only the rows whose code this generator no longer writes");
  po::variables_map vm;
  if (auto rc = parse_options("harness measure", args, named, {}, &vm)) return *rc;
  o->calibrate = !vm.count("no-calibrate");
  o->stale_only = vm.count("stale-only") > 0;
  if (o->device != "cuda" && o->device != "sim")
    return fail("--device: expected cuda or sim, found '" + o->device + "'");
  Result<SizeName> size = parse_size_name(o->size);
  if (!size.ok()) return fail("--size: " + size.status().message());
  o->size_name = *size;
  if (o->plans_per_task < 0 || o->trials < 1 || o->samples < 1)
    return fail("--plans >= 0, --trials >= 1, --samples >= 1");
  Result<ReferencePrecision> rp = parse_reference_precision(o->reference_precision_name);
  if (!rp.ok()) return fail("--reference-precision: " + rp.status().message());
  o->reference_precision = *rp;
  if (o->timing != "fixed" && o->timing != "adaptive")
    return fail("--timing: expected fixed or adaptive, found '" + o->timing + "'");
  if (!(o->timing_width >= 0 && o->timing_width <= 1))
    return fail("--timing-width: expected a number from 0 to 1, found " + format_number("%g", o->timing_width));
  if (!o->again_files.empty() && (!vm["plans"].defaulted() || !o->variants.empty()))
    return fail("--remeasure takes its plans from its files: drop --plans and --variant");
  if (!o->again_files.empty() && !o->from_files.empty()) return fail("--remeasure and --from-measurements do not mix");
  if (o->stale_only && o->again_files.empty()) return fail("--stale-only needs --remeasure");
  return std::nullopt;
}

// How the sweep timed its candidates, for the report.
std::string timing_words(const MeasureOptions& o) {
  if (o.timing == "fixed") return std::to_string(o.samples) + " timing samples each of kernel and reference";
  return "adaptive timing (until the speedup's 99% interval is within " + shortest_exact_number(o.timing_width) +
         " of it, at most " + std::to_string(o.samples) + " samples each of kernel and reference)";
}

// The tasks the options select, sorted by id.
Result<std::vector<const Task*>> select_tasks(const MeasureOptions& o, const TaskSuite& suite) {
  std::vector<const Task*> tasks;
  std::set<std::string> wanted(o.only.begin(), o.only.end());
  for (const Task& t : suite.tasks) {
    if (!wanted.empty() && !wanted.count(t.id)) continue;
    if (o.level && t.level != o.level) continue;
    if (!o.from.empty() && t.id < o.from) continue;
    tasks.push_back(&t);
  }
  std::sort(tasks.begin(), tasks.end(), [](const Task* a, const Task* b) { return a->id < b->id; });
  for (const auto& id : wanted)
    if (!suite.find(id)) return failure("--task: no task '" + id + "' in the suite");
  return tasks;
}

// --remeasure: every selected task's plans are the rows' plans, in file order, labels kept. Tasks
// with no such row are dropped from *tasks.
Result<std::map<std::string, LabelledPlans>> remeasure_plans(const MeasureOptions& o, const TaskSuite& suite,
                                                             std::vector<const Task*>* tasks) {
  std::map<std::string, LabelledPlans> again;
  int rows = 0, current = 0;
  for (const std::string& file : o.again_files) {
    Status st = read_json_lines(file, "--remeasure", [&](const std::string& where, const nlohmann::json& j) -> Status {
      std::string key;
      try {
        key = "task";
        const Task* t = suite.find(j.at(key).get<std::string>());
        if (!t) return invalid_argument(where + ": no task '" + j.at(key).get<std::string>() + "' in the suite");
        key = "size";
        if (j.at(key).get<std::string>() != o.size)
          return invalid_argument(where + ": measured at size '" + j.at(key).get<std::string>() +
                                  "', this sweep is at '" + o.size + "' (--size)");
        if (std::find(tasks->begin(), tasks->end(), t) == tasks->end()) return Status();
        key = "knobs";
        auto knobs = j.at(key).get<std::map<std::string, std::string>>();
        key = "plan_address";
        std::string address = j.at(key).get<std::string>();
        key = "label";
        std::string label = j.at(key).get<std::string>();
        Result<Plan> p = generate_plan(*t, knobs);
        if (!p.ok()) return invalid_argument(where + ": key 'knobs': " + p.status().message());
        ++rows;
        if (o.stale_only && is_measured_plan(*p, knobs, address)) {
          ++current;
          return Status();
        }
        again[t->id].emplace_back(label, std::move(*p));
        return Status();
      } catch (const nlohmann::json::exception& e) {
        return invalid_argument(where + ": key '" + key + "': " + e.what());
      }
    });
    if (!st.ok()) return failure(st.to_string());
  }
  tasks->erase(std::remove_if(tasks->begin(), tasks->end(), [&](const Task* t) { return !again.count(t->id); }),
               tasks->end());
  std::fprintf(stderr, "harness measure: --remeasure: %d row(s) of the selected tasks, %d still current%s\n", rows,
               current, o.stale_only ? " (skipped: --stale-only)" : "");
  return again;
}

// --variant KNOB=VALUE[,KNOB=VALUE...]: each variant's knob values, checked against the knobs.
Result<std::vector<std::map<std::string, std::string>>> parse_variants(const std::vector<std::string>& variants) {
  std::vector<std::map<std::string, std::string>> out;
  for (const std::string& v : variants) {
    std::map<std::string, std::string> kv;
    std::vector<std::string> items;
    for (size_t at = 0; at <= v.size();) {
      size_t comma = std::min(v.find(',', at), v.size());
      items.push_back(v.substr(at, comma - at));
      at = comma + 1;
    }
    for (const std::string& item : items) {
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        return failure("--variant '" + v + "': expected KNOB=VALUE[,KNOB=VALUE...], found '" + item + "'");
      std::string knob = item.substr(0, eq);
      bool known = false;
      for (const char* fam : {"plan", "elementwise", "row_reduction", "gemm"})
        for (const Knob& k : family_knobs(fam))
          if (k.name == knob) {
            known = true;
            if (std::find(k.choices.begin(), k.choices.end(), item.substr(eq + 1)) == k.choices.end())
              return failure("--variant '" + v + "': knob " + knob + " has no choice '" + item.substr(eq + 1) + "'");
          }
      if (!known) return failure("--variant '" + v + "': no knob '" + knob + "'");
      kv[knob] = item.substr(eq + 1);
    }
    out.push_back(std::move(kv));
  }
  return out;
}

// One task's plans: the default, each variant, and N keyed random settings (duplicates dropped).
Result<LabelledPlans> task_plans(const MeasureOptions& o, const Task& t,
                                 const std::vector<std::map<std::string, std::string>>& variant_knobs) {
  LabelledPlans plans;
  std::set<Digest> seen;
  Result<Plan> d = default_plan(t);
  if (!d.ok()) return failure(t.id + ": " + d.status().to_string());
  plans.emplace_back("default", *d);
  seen.insert(plan_address(*d));
  KnobSpace space = knob_space(t);
  for (size_t vi = 0; vi < variant_knobs.size(); ++vi) {
    std::map<std::string, std::string> values;
    for (const auto& [k, v] : variant_knobs[vi])
      if (space.index_of(k) >= 0) values[k] = v;
    if (values.empty()) continue;
    Result<Plan> p = generate_plan(t, values);
    if (!p.ok()) return failure(t.id + ": --variant '" + o.variants[vi] + "': " + p.status().to_string());
    if (seen.insert(plan_address(*p)).second) plans.emplace_back("v:" + o.variants[vi], *p);
  }
  for (int i = 0, tries = 0; !space.knobs.empty() && i < o.plans_per_task && tries < o.plans_per_task * 20; ++tries) {
    Stream s(RngKey::root(o.seed).with("purpose", "measure").with("task", t.id).with("try", tries));
    Result<Plan> p = generate_plan(t, random_setting(space, s));
    if (!p.ok() || !seen.insert(plan_address(*p)).second) continue;
    plans.emplace_back("g" + std::to_string(++i), *p);
  }
  return plans;
}

using Work = std::vector<std::pair<const Task*, LabelledPlans>>;

// What the sweep (or the earlier sweeps it was rebuilt from) produced.
struct Sweep {
  std::vector<Row> rows;
  int stale_rows = 0;  // --from-measurements rows naming code the generator no longer writes
  bool out_of_budget = false;
  double ms = 0;
};

// Compiles every kernel of the work into the NVRTC cache, in parallel; the compile times, ms.
std::vector<double> precompile_work(const MeasureOptions& o, const CudaEvaluator& cuda, const Work& work,
                                    double* seconds, int* threads) {
  std::vector<std::pair<std::string, std::string>> kernels;
  for (const auto& [t, plans] : work)
    for (const auto& lp : plans)
      for (const auto& k : lp.second.kernels) kernels.emplace_back(k.name + ".cu", k.source);
  NvrtcOptions no;
  no.arch = cuda.arch();
  no.cache_dir = o.nvrtc_cache;
  NvrtcCompiler compiler(no);
  *threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Clock::time_point p0 = Clock::now();
  std::vector<double> compile = precompile(compiler, kernels, *threads);
  *seconds = ms_since(p0) / 1000;
  std::fprintf(stderr, "NVRTC: %zu kernels (%zu compiled) in %.1f s on %d threads\n", kernels.size(), compile.size(),
               *seconds, *threads);
  return compile;
}

// --from-measurements: the rows of earlier sweeps instead of a new one (the sim side, the
// calibration and the report are recomputed).
Status read_earlier_sweeps(const MeasureOptions& o, const TaskSuite& suite, SimEvaluator& sim,
                           const EvalRequest& sim_req, std::ostream& jsonl, Sweep* out) {
  for (const std::string& file : o.from_files) {
    Result<std::string> text = read_file(file, kMeasurementFile);
    if (!text.ok()) return failure("--from-measurements: " + text.status().message());
    std::istringstream in(*text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      std::string where = file + ":" + std::to_string(n);
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return failure(where + ": not a JSON object");
      try {
        Row row;
        row.task = suite.find(j.at("task").get<std::string>());
        if (!row.task) return failure(where + ": no task '" + j.at("task").get<std::string>() + "' in the suite");
        if (j.at("size").get<std::string>() != o.size)
          return failure(where + ": measured at size '" + j.at("size").get<std::string>() + "', this report is for '" +
                         o.size + "'");
        Result<Plan> p = plan_of_measurement(*row.task, j.at("knobs").get<std::map<std::string, std::string>>(),
                                             j.at("plan_address").get<std::string>());
        if (!p.ok()) {
          // Code this generator no longer writes (a later sweep re-measured what it writes now).
          std::fprintf(stderr, "harness measure: %s: skipped: %s\n", where.c_str(), p.status().message().c_str());
          ++out->stale_rows;
          continue;
        }
        row.plan = *p;
        row.label = j.at("label").get<std::string>();
        row.guaranteed = row.plan.guaranteed();
        row.family = plan_family(row.plan);
        const nlohmann::json& l = j.at("live");
        row.live.evaluator = o.device;
        row.live.device = j.value("device", std::string());
        row.live.plan = plan_address(row.plan);
        row.live.size = o.size;
        row.live.compiled = l.at("compiled").get<bool>();
        row.live.correct = l.at("correct").get<bool>();
        row.live.error = l.at("error").get<std::string>();
        row.live.flags = l.at("flags").get<std::vector<std::string>>();
        row.live.kernel_times_us = l.at("kernel_times_us").get<std::vector<double>>();
        row.live.reference_times_us = l.at("reference_times_us").get<std::vector<double>>();
        row.live.time_coverage = l.at("time_coverage").get<double>();
        row.live.finalize();
        row.wall_ms = j.at("wall_ms").get<double>();
        row.compile_ms = j.at("compile_ms").get<double>();
        row.eval_ms = j.at("eval_ms").get<double>();
        Result<EvalResult> pred = sim.evaluate(*row.task, row.plan, sim_req);
        if (!pred.ok()) return failure(where + " (sim): " + pred.status().to_string());
        row.sim = *pred;
        jsonl << row_json(row).dump() << "\n";
        out->rows.push_back(std::move(row));
      } catch (const nlohmann::json::exception& e) {
        return failure(where + ": " + e.what());
      }
    }
  }
  std::stable_sort(out->rows.begin(), out->rows.end(),
                   [](const Row& a, const Row& b) { return a.task->id < b.task->id; });
  for (const Row& r : out->rows) out->ms += r.wall_ms;  // the sweeps' own time, not this rebuild's
  return Status();
}

// Evaluates every plan of the work on the device and the sim, writing each row as it goes.
Status run_sweep(const MeasureOptions& o, const Work& work, Evaluator* ev, CudaEvaluator* cuda, SimEvaluator& sim,
                 const EvalRequest& req, const EvalRequest& sim_req, std::ostream& jsonl, Sweep* out) {
  Clock::time_point sweep0 = Clock::now();
  for (const auto& [t, plans] : work) {
    if (o.budget > 0 && ms_since(sweep0) > o.budget * 1000) {
      out->out_of_budget = true;
      break;
    }
    for (const auto& [label, plan] : plans) {
      Row row;
      row.task = t;
      row.plan = plan;
      row.label = label;
      row.guaranteed = plan.guaranteed();
      row.family = plan_family(plan);
      Clock::time_point t0 = Clock::now();
      Result<EvalResult> live = ev->evaluate(*t, plan, req);
      row.wall_ms = ms_since(t0);
      if (!live.ok()) return failure(t->id + " " + label + ": " + live.status().to_string());
      row.live = *live;
      if (cuda) {
        CudaEvaluatorStats st = cuda->stats();
        row.compile_ms = st.compile_ms;
        row.eval_ms = st.eval_ms;
      }
      Result<EvalResult> pred = sim.evaluate(*t, plan, sim_req);
      if (!pred.ok()) return failure(t->id + " " + label + " (sim): " + pred.status().to_string());
      row.sim = *pred;
      jsonl << row_json(row).dump() << "\n";
      jsonl.flush();
      std::fprintf(stderr, "%-7s %-8s %-13s %s %9.1f us  x%-6.3g sim x%-6.3g %s%s\n", t->id.c_str(), label.c_str(),
                   row.family.c_str(), row.live.correct ? "ok " : "BAD", row.live.kernel_us, row.live.speedup,
                   row.sim.speedup, row.guaranteed ? "" : "(risky) ", row.live.error.substr(0, 100).c_str());
      out->rows.push_back(std::move(row));
    }
  }
  out->ms = ms_since(sweep0);
  return Status();
}

// Timing quality: one kernel's median, evaluated 10 times in a row.
struct Spread {
  std::string task;
  std::vector<double> medians;
  double cv = 0;
};

Result<std::vector<Spread>> timing_spreads(int repeat, const std::vector<Row>& rows, Evaluator* ev,
                                           const EvalRequest& req) {
  std::vector<Spread> spreads;
  for (const Row& r : rows) {
    if ((int)spreads.size() >= repeat) break;
    if (r.label != "default" || !r.live.correct || r.live.kernel_us < 100) continue;
    Spread s;
    s.task = r.task->id;
    EvalRequest rr = req;
    rr.samples = 100;
    for (int i = 0; i < 10; ++i) {
      Result<EvalResult> e = ev->evaluate(*r.task, r.plan, rr);
      if (!e.ok()) return failure(r.task->id + " (repeat): " + e.status().to_string());
      s.medians.push_back(e->kernel_us);
    }
    double mean = 0, var = 0;
    for (double m : s.medians) mean += m;
    mean /= s.medians.size();
    for (double m : s.medians) var += (m - mean) * (m - mean);
    s.cv = std::sqrt(var / (s.medians.size() - 1)) / mean;
    spreads.push_back(s);
  }
  return spreads;
}

// Writes calibration.jsonl (the correct live plans) and, unless --no-calibrate, fitted_profile.toml;
// *fitted is the sim under the fitted profile, and the fit's report text is returned ("" without a fit).
Result<std::string> calibrate_rows(const MeasureOptions& o, const std::vector<Row>& rows, const DeviceProfile& profile,
                                   std::unique_ptr<SimEvaluator>* fitted) {
  std::ostringstream cal_lines;
  std::vector<CalibrationSample> cal;
  for (const Row& r : rows) {
    if (!r.live.correct || r.live.kernel_us <= 0) continue;
    cal_lines << nlohmann::json{{"task", r.task->id},
                                {"size", o.size},
                                {"plan", plan_to_json(r.plan)},
                                {"kernel_us", r.live.kernel_us},
                                {"reference_us", r.live.reference_us}}
                     .dump()
              << "\n";
    CalibrationSample s;
    s.task = r.task;
    s.sizes = r.task->size_map(o.size_name);
    s.plan = r.plan;
    s.measured_us = r.live.kernel_us;
    s.measured_reference_us = r.live.reference_us;
    cal.push_back(std::move(s));
  }
  Status w = write_file_atomic(o.out_dir + "/calibration.jsonl", cal_lines.str());
  if (!w.ok()) return failure(w.to_string());
  if (!o.calibrate || cal.size() < 3) return std::string();
  // The fit starts from the datasheet figures unless a profile was named: the default profile
  // is itself a fit, and a fit started from it would not be reproducible from the data alone.
  Result<DeviceProfile> start =
      o.profile_file.empty() ? load_device_profile(profile_path("h200_datasheet")) : Result<DeviceProfile>(profile);
  if (!start.ok()) return failure(start.status().to_string());
  Result<CalibrationReport> rep = calibrate(*start, cal);
  if (!rep.ok()) return failure("calibration: " + rep.status().to_string());
  w = write_file_atomic(o.out_dir + "/fitted_profile.toml", device_profile_to_toml(rep->fitted));
  if (!w.ok()) return failure(w.to_string());
  *fitted = std::make_unique<SimEvaluator>(rep->fitted);
  return calibration_report_text(*rep);
}

// The report's header: what was measured, or which sweeps it was rebuilt from.
void report_header(const MeasureOptions& o, const Sweep& sw, std::ostream& md) {
  std::string dev = sw.rows.empty() ? o.device : sw.rows.front().live.device;
  md << "# `harness measure` on " << dev << "\n\n";
  if (!o.from_files.empty()) {
    md << "Size `" << o.size << "`. Rebuilt from earlier sweeps (the plans, trials and samples they used apply):";
    for (const auto& f : o.from_files) md << " `" << f << "`";
    md << ".";
    if (sw.stale_rows)
      md << " " << sw.stale_rows << " row(s) skipped: their knobs no longer generate the plan they measured.";
    md << "\n\n";
  } else if (!o.again_files.empty()) {
    md << "Size `" << o.size << "`, the plans that the rows of earlier sweeps name, measured again"
       << (o.stale_only ? " where the generator no longer writes their code" : "") << ":";
    for (const auto& f : o.again_files) md << " `" << f << "`";
    md << "; " << o.trials << " trials, " << timing_words(o) << ", seed " << o.seed << ".\n\n";
  } else {
    md << "Size `" << o.size << "`, " << o.plans_per_task << " generated plans per task beside the default, "
       << o.trials << " trials, " << timing_words(o) << ", seed " << o.seed << ".\n\n";
  }
}

// Per level: the share of tasks whose default plan, best plan without library GEMMs
// (gemm.impl = library) and best plan is correct, no decoy, and faster than p.
void report_levels(const std::vector<Row>& rows, std::ostream& md) {
  const std::vector<double> shares_p = {1.0, 1.2, 1.5};
  struct LevelBest {
    int tasks = 0;
    std::array<std::vector<int>, 3> above{{std::vector<int>(3), std::vector<int>(3), std::vector<int>(3)}};
  };
  std::map<int, LevelBest> levels;
  for (size_t i = 0; i < rows.size();) {
    const Task* lt = rows[i].task;
    std::array<double, 3> best_of{{0, 0, 0}};
    size_t j = i;
    for (; j < rows.size() && rows[j].task == lt; ++j) {
      const Row& r = rows[j];
      // A decoy (no kernel of its own where the task's ops could have one) is no solution.
      bool decoy = std::any_of(r.live.flags.begin(), r.live.flags.end(),
                               [](const std::string& f) { return f.rfind("decoy", 0) == 0; });
      if (!r.live.correct || decoy) continue;
      auto impl = r.plan.knobs.find("gemm.impl");
      bool library_gemm = impl != r.plan.knobs.end() && impl->second == "library";
      if (r.label == "default") best_of[0] = std::max(best_of[0], r.live.speedup);
      if (!library_gemm) best_of[1] = std::max(best_of[1], r.live.speedup);
      best_of[2] = std::max(best_of[2], r.live.speedup);
    }
    LevelBest& lb = levels[lt->level];
    ++lb.tasks;
    for (size_t c = 0; c < 3; ++c)
      for (size_t k = 0; k < shares_p.size(); ++k) lb.above[c][k] += best_of[c] > shares_p[k];
    i = j;
  }
  md << "\n## Best plan per task, per level\n\n"
     << "Share of tasks whose plan is correct, not a decoy, and faster than the reference by more than p "
        "(KernelBench's strict `>`): the default plan; the best of every measured plan but library GEMMs "
        "(`gemm.impl = library`); the best of every measured plan.\n\n"
     << "| level | tasks | default >1.0 / >1.2 / >1.5 | without library GEMMs | all plans |\n|---|---:|---|---|---|\n";
  for (const auto& [level, lb] : levels) {
    md << "| " << level << " | " << lb.tasks;
    for (size_t c = 0; c < 3; ++c) {
      md << " |";
      for (size_t k = 0; k < shares_p.size(); ++k)
        md << (k ? " /" : "") << format_number(" %.1f%%", lb.tasks ? 100.0 * lb.above[c][k] / lb.tasks : 0);
    }
    md << " |\n";
  }
}

// Counts over every row, gathered with the per-task table.
struct Verdicts {
  int guaranteed_n = 0, guaranteed_ok = 0, risky_n = 0, risky_ok = 0, agree = 0, compared = 0;
  int sim_says_ok_live_bad = 0, sim_says_bad_live_ok = 0;
  std::map<std::string, std::vector<const Row*>> by_family;
};

// One line per task: reference time, default plan, best generated plan, correctness.
Verdicts report_tasks(const std::vector<Row>& rows, std::ostream& md) {
  Verdicts v;
  md << "| task | reference us | default us | default x | best generated x | correct / plans | guaranteed wrong |\n";
  md << "|---|---:|---:|---:|---:|---:|---|\n";
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    const Task* t = rows[i].task;
    double ref = 0, def_us = 0, def_x = 0, best = 0;
    bool def_ok = false;
    int ok = 0, n = 0;
    std::string bad;
    for (; j < rows.size() && rows[j].task == t; ++j) {
      const Row& r = rows[j];
      ++n;
      ok += r.live.correct;
      if (r.live.reference_us > 0) ref = r.live.reference_us;
      if (r.label == "default") {
        def_us = r.live.kernel_us;
        def_x = r.live.speedup;
        def_ok = r.live.correct;
      } else if (r.live.correct) {
        best = std::max(best, r.live.speedup);
      }
      if (r.guaranteed) {
        ++v.guaranteed_n;
        v.guaranteed_ok += r.live.correct;
        if (!r.live.correct) bad += (bad.empty() ? "" : "; ") + r.label + ": " + r.live.error.substr(0, 80);
      } else {
        ++v.risky_n;
        v.risky_ok += r.live.correct;
      }
      if (r.live.compiled) {
        ++v.compared;
        v.agree += r.live.correct == r.sim.correct;
        v.sim_says_ok_live_bad += r.sim.correct && !r.live.correct;
        v.sim_says_bad_live_ok += !r.sim.correct && r.live.correct;
      }
      v.by_family[r.family].push_back(&r);
    }
    md << "| " << t->id << " " << t->name << " | " << format_number("%.1f", ref) << " | "
       << (def_ok ? format_number("%.1f", def_us) : std::string("wrong")) << " | "
       << (def_ok ? format_number("%.3g", def_x) : "-") << " | " << (best > 0 ? format_number("%.3g", best) : "-")
       << " | " << ok << " / " << n << " | " << bad << " |\n";
    i = j;
  }
  return v;
}

// Sim against live: correctness agreement and Spearman per op family, before and after the fit.
void report_agreement(const Verdicts& v, SimEvaluator* fitted_sim, const EvalRequest& sim_req, std::ostream& md) {
  md << "## Sim vs live\n\n";
  md << "Correctness agreement (compiled plans): " << v.agree << " / " << v.compared
     << format_number(" (%.1f%%)", v.compared ? 100.0 * v.agree / v.compared : 0)
     << "; sim correct but live wrong: " << v.sim_says_ok_live_bad
     << "; sim wrong but live correct: " << v.sim_says_bad_live_ok << ".\n\n";
  md << "Spearman rank correlation of predicted vs measured speedup over plans correct live (pooled over the "
        "family's plans; and the mean over its tasks with >= 3 such plans):\n\n";
  md << "| family | plans | pooled (h200.toml) | per-task mean (h200.toml) | pooled (fitted) | per-task mean (fitted) "
        "|\n";
  md << "|---|---:|---:|---:|---:|---:|\n";
  auto fitted_speedup = [&](const Row& r) -> double {
    if (!fitted_sim) return std::nan("");
    Result<EvalResult> e = fitted_sim->evaluate(*r.task, r.plan, sim_req);
    return e.ok() && e->correct ? e->speedup : std::nan("");
  };
  for (const auto& [fam, list] : v.by_family) {
    FamilyCorrelation before =
        correlate(list, [](const Row& r) { return r.sim.correct ? r.sim.speedup : std::nan(""); });
    FamilyCorrelation after = correlate(list, fitted_speedup);
    md << "| " << fam << " | " << before.plans << " | " << format_number("%.3f", before.pooled) << " | "
       << format_number("%.3f", before.per_task_mean) << " (" << before.tasks << " tasks) | "
       << format_number("%.3f", after.pooled) << " | " << format_number("%.3f", after.per_task_mean) << " |\n";
  }
}

// What an evaluation cost: compile, wall and overhead per candidate, candidates per minute.
struct Cost {
  std::vector<double> compile;  // ms per kernel NVRTC compiled
  double prewarm_s = 0;
  int prewarm_threads = 0;
};

void report_cost(const Sweep& sw, Cost cost, const CudaEvaluator* cuda, std::ostream& md) {
  std::vector<double> overhead, wall, samples;
  for (const Row& r : sw.rows) {
    if (r.compile_ms > 0) cost.compile.push_back(r.compile_ms);
    if (!r.live.kernel_times_us.empty()) samples.push_back(static_cast<double>(r.live.kernel_times_us.size()));
    wall.push_back(r.wall_ms);
    double timed_ms = 0;
    for (double v : r.live.kernel_times_us) timed_ms += v / 1000;
    for (double v : r.live.reference_times_us) timed_ms += v / 1000;
    overhead.push_back(r.wall_ms - timed_ms);
  }
  md << "\n## Evaluator cost\n\n";
  md << "| measure | median | p90 |\n|---|---:|---:|\n";
  md << "| NVRTC compile per kernel, ms (cache misses) | " << format_number("%.1f", percentile(cost.compile, 0.5))
     << " | " << format_number("%.1f", percentile(cost.compile, 0.9)) << " |\n";
  md << "| wall time per candidate, ms | " << format_number("%.1f", percentile(wall, 0.5)) << " | "
     << format_number("%.1f", percentile(wall, 0.9)) << " |\n";
  md << "| timing samples per timed candidate, each of kernel and reference | "
     << format_number("%.0f", percentile(samples, 0.5)) << " | " << format_number("%.0f", percentile(samples, 0.9))
     << " |\n";
  md << "| overhead per candidate (wall minus the timed samples), ms | "
     << format_number("%.1f", percentile(overhead, 0.5)) << " | " << format_number("%.1f", percentile(overhead, 0.9))
     << " |\n";
  if (cost.prewarm_threads)
    md << "\nThe kernels were compiled before the sweep into the shared NVRTC cache, " << cost.prewarm_threads
       << " at a time: " << cost.compile.size() << " in " << format_number("%.1f", cost.prewarm_s)
       << " s (the worker then loads them from it).\n";
  if (sw.out_of_budget)
    md << "\n**The sweep stopped at its --budget: tasks after " << sw.rows.back().task->id << " were not measured.**\n";
  md << "\nCandidates evaluated: " << sw.rows.size() << " in " << format_number("%.1f", sw.ms / 1000)
     << " s: " << format_number("%.1f", sw.rows.size() / (sw.ms / 60000.0)) << " per minute.\n";
  if (cuda) {
    CudaEvaluatorStats st = cuda->stats();
    md << "Workers started: " << st.workers_started << ", lost: " << st.workers_lost << ".\n";
  }
}

void report_spreads(const std::vector<Spread>& spreads, std::ostream& md) {
  if (spreads.empty()) return;
  md << "\n## Timing quality: one kernel's median (100 samples), 10 evaluations in a row\n\n";
  md << "| task | mean of medians us | min | max | CV |\n|---|---:|---:|---:|---:|\n";
  for (const Spread& s : spreads) {
    double mean = 0;
    for (double m : s.medians) mean += m;
    mean /= s.medians.size();
    md << "| " << s.task << " | " << format_number("%.2f", mean) << " | "
       << format_number("%.2f", *std::min_element(s.medians.begin(), s.medians.end())) << " | "
       << format_number("%.2f", *std::max_element(s.medians.begin(), s.medians.end())) << " | "
       << format_number("%.3f%%", 100 * s.cv) << " |\n";
  }
}

}  // namespace

int cmd_measure(const std::vector<std::string>& args) {
  MeasureOptions o;
  if (std::optional<int> rc = parse_measure_options(args, &o)) return *rc;
  Result<TaskSuite> suite = load_task_suite(o.task_dir.empty() ? default_task_dir() : o.task_dir);
  if (!suite.ok()) return fail(suite.status().to_string());
  std::string prof_path = o.profile_file.empty() ? profile_path("h200") : o.profile_file;
  Result<DeviceProfile> profile = load_device_profile(prof_path);
  if (!profile.ok()) return fail(profile.status().to_string());
  SimEvaluator sim(*profile);
  std::unique_ptr<CudaEvaluator> cuda;
  Evaluator* ev = &sim;
  if (o.device == "cuda" && o.from_files.empty()) {
    CudaEvaluatorOptions co;
    co.task_dir = o.task_dir.empty() ? default_task_dir() : o.task_dir;
    co.timeout_s = o.timeout;
    co.nvrtc_cache_dir = o.nvrtc_cache;
    co.profile_path = o.profile_file;
    co.timing_budget_s = o.timing_budget;
    co.reference_precision = o.reference_precision;
    cuda = std::make_unique<CudaEvaluator>(co);
    Status st = cuda->start();
    if (!st.ok()) return fail(st.to_string());
    ev = cuda.get();
  }
  Status made = make_dirs(o.out_dir);
  if (!made.ok()) return fail(made.to_string());
  std::ofstream jsonl(o.out_dir + "/measurements.jsonl", std::ios::trunc);
  if (!jsonl) return fail("cannot write " + o.out_dir + "/measurements.jsonl");

  Result<std::vector<const Task*>> tasks = select_tasks(o, *suite);
  if (!tasks.ok()) return fail(tasks.status().message());
  EvalRequest req;
  req.size = o.size_name;
  req.seed = o.seed;
  req.trials = o.trials;
  req.samples = o.samples;
  EvalRequest sim_req = req;
  sim_req.samples = 1;
  req.adaptive = o.timing == "adaptive";
  req.adaptive_rule.rel_width = o.timing_width;
  req.adaptive_rule.max_samples = o.samples;

  // Every task's plans first, so their kernels can be compiled in parallel before the sweep.
  Work work;
  if (!o.again_files.empty()) {
    Result<std::map<std::string, LabelledPlans>> again = remeasure_plans(o, *suite, &*tasks);
    if (!again.ok()) return fail(again.status().message());
    for (const Task* t : *tasks) work.emplace_back(t, (*again)[t->id]);
  } else if (o.from_files.empty()) {
    Result<std::vector<std::map<std::string, std::string>>> variant_knobs = parse_variants(o.variants);
    if (!variant_knobs.ok()) return fail(variant_knobs.status().message());
    for (const Task* t : *tasks) {
      Result<LabelledPlans> plans = task_plans(o, *t, *variant_knobs);
      if (!plans.ok()) return fail(plans.status().message());
      work.emplace_back(t, std::move(*plans));
    }
  }
  Cost cost;
  if (cuda && !o.nvrtc_cache.empty())
    cost.compile = precompile_work(o, *cuda, work, &cost.prewarm_s, &cost.prewarm_threads);

  Sweep sw;
  Status st = o.from_files.empty() ? run_sweep(o, work, ev, cuda.get(), sim, req, sim_req, jsonl, &sw)
                                   : read_earlier_sweeps(o, *suite, sim, sim_req, jsonl, &sw);
  if (!st.ok()) return fail(st.message());
  Result<std::vector<Spread>> spreads = timing_spreads(o.repeat, sw.rows, ev, req);
  if (!spreads.ok()) return fail(spreads.status().message());
  std::unique_ptr<SimEvaluator> fitted_sim;
  Result<std::string> cal_text = calibrate_rows(o, sw.rows, *profile, &fitted_sim);
  if (!cal_text.ok()) return fail(cal_text.status().message());

  std::ostringstream md;
  report_header(o, sw, md);
  Verdicts v = report_tasks(sw.rows, md);
  report_levels(sw.rows, md);
  md << "\n**Guaranteed plans correct: " << v.guaranteed_ok << " / " << v.guaranteed_n << "**"
     << format_number(" (%.1f%%)", v.guaranteed_n ? 100.0 * v.guaranteed_ok / v.guaranteed_n : 0)
     << "; risky plans correct: " << v.risky_ok << " / " << v.risky_n << ".\n\n";
  report_agreement(v, fitted_sim.get(), sim_req, md);
  if (!cal_text->empty()) md << "\n### Calibration (fitted_profile.toml)\n\n```\n" << *cal_text << "```\n";
  report_cost(sw, std::move(cost), cuda.get(), md);
  report_spreads(*spreads, md);
  Status w = write_file_atomic(o.out_dir + "/report.md", md.str());
  if (!w.ok()) return fail(w.to_string());
  std::cout << md.str();
  return v.guaranteed_ok == v.guaranteed_n ? 0 : 1;
}

}  // namespace vinci
