// `harness oracle CONFIG`: the ceiling of an experiment's sim world. For every held-out task it
// searches the task's whole knob space (the plans the policy can write) with the experiment's
// evaluator and keeps the best correct plan, so a report can show how far each method is from
// the best its action space allows.
//
// Search (deterministic, keyed by run.seed and the task): a space of at most --budget settings
// is enumerated whole; a larger one gets the default setting and (budget / 2) keyed random
// settings, then coordinate ascent (each knob's every choice in turn, moving to a strictly better
// one, until a full pass improves nothing) from each of those, best first, until the budget of
// distinct settings is spent. Every plan is
// evaluated as the run's final evaluation would evaluate it (size, trials, samples; the seed of
// a task's evaluations is keyed by "oracle" and the task), and a plan scores its speedup when
// correct, 0 otherwise.
#include <boost/program_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/cli.h"
#include "core/rng.h"
#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/codegen/knobs.h"
#include "harness/cli/commands.h"
#include "harness/experiment.h"
#include "harness/loop_parts.h"
#include "harness/trainer.h"
#include "harness/world.h"

namespace vinci {

namespace {

struct OracleTask {
  std::string id;
  int level = 0;
  double cardinality = 0;
  bool exhaustive = false;
  int64_t evaluated = 0;
  double speedup = 0;  // the best correct plan's; 0 when none was correct
  Digest plan;
  std::map<std::string, std::string> knobs;
};

class TaskSearch {
 public:
  TaskSearch(const Experiment& exp, const Task& task, Evaluator& evaluator, int64_t budget)
      : task_(task), evaluator_(evaluator), budget_(budget), space_(knob_space(task)) {
    request_.size = exp.size;
    request_.trials = exp.trials;
    request_.samples = exp.timing_samples;
    set_timing(exp, &request_);
    key_ = RngKey::root(exp.seed).with("phase", "oracle").with("task", task.id);
    request_.seed = loop::eval_seed(key_);
  }

  Result<OracleTask> run() {
    OracleTask out;
    out.id = task_.id;
    out.level = task_.level;
    out.cardinality = space_.cardinality();
    out.exhaustive = out.cardinality <= static_cast<double>(budget_);
    if (out.exhaustive) {
      KnobSetting s(space_.knobs.size(), 0);
      for (;;) {
        VINCI_RETURN_IF_ERROR(score(s).status());
        size_t k = 0;
        while (k < s.size() && ++s[k] == static_cast<int32_t>(space_.knobs[k].choices.size())) s[k++] = 0;
        if (k == s.size()) break;
      }
    } else {
      // Keyed random settings (and the default), then coordinate ascent from each of them, best
      // first, while the budget lasts.
      std::vector<std::pair<double, KnobSetting>> starts;
      auto sample = [&](const KnobSetting& s) -> Status {
        VINCI_ASSIGN_OR_RETURN(std::optional<double> v, score(s));
        if (v) starts.emplace_back(*v, s);
        return Status();
      };
      VINCI_RETURN_IF_ERROR(sample(default_setting(space_)));
      Stream rng(key_.with("purpose", "random-settings"));
      for (int64_t i = 0; i < budget_ / 2 && !spent(); ++i) VINCI_RETURN_IF_ERROR(sample(random_setting(space_, rng)));
      std::stable_sort(starts.begin(), starts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t i = 0; i < starts.size() && !spent(); ++i) {
        KnobSetting at = starts[i].second;
        double value = starts[i].first;
        for (bool improved = true; improved && !spent();) {
          improved = false;
          for (size_t k = 0; k < space_.knobs.size() && !spent(); ++k) {
            for (int32_t c = 0; c < static_cast<int32_t>(space_.knobs[k].choices.size()) && !spent(); ++c) {
              KnobSetting s = at;
              s[k] = c;
              VINCI_ASSIGN_OR_RETURN(std::optional<double> v, score(s));
              if (v && *v > value) {
                at = s;
                value = *v;
                improved = true;
              }
            }
          }
        }
      }
    }
    out.evaluated = static_cast<int64_t>(seen_.size());
    out.speedup = best_value_;
    if (!best_.empty()) {
      out.knobs = knob_values(space_, best_);
      out.plan = best_plan_;
    }
    return out;
  }

 private:
  bool spent() const { return static_cast<int64_t>(seen_.size()) >= budget_; }

  // Evaluates a setting not seen before and returns its score (nullopt when seen before); keeps
  // the best (strictly: ties keep the earlier, so the result depends on nothing but the order of
  // the search).
  Result<std::optional<double>> score(const KnobSetting& s) {
    if (!seen_.insert(s).second) return std::optional<double>();
    double v = 0;
    Result<Plan> plan = generate_plan(task_, s);
    if (plan.ok()) {  // a setting the generator refuses is no plan: 0
      VINCI_ASSIGN_OR_RETURN(EvalResult r, evaluator_.evaluate(task_, *plan, request_));
      v = r.correct && std::isfinite(r.speedup) ? r.speedup : 0;
    }
    if (best_.empty() || v > best_value_) {
      best_ = s;
      best_value_ = v;
      best_plan_ = plan.ok() ? plan_address(*plan) : Digest();
    }
    return std::optional<double>(v);
  }

  const Task& task_;
  Evaluator& evaluator_;
  int64_t budget_;
  KnobSpace space_;
  EvalRequest request_;
  RngKey key_ = RngKey::root(0);
  std::set<KnobSetting> seen_;
  KnobSetting best_;
  double best_value_ = 0;
  Digest best_plan_;
};

}  // namespace

int cmd_oracle(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  std::string format = "text";
  int64_t budget = 4000;
  po::options_description opts(
      "usage: harness oracle CONFIG [--set key=value]... [--budget N] [--format text|json] [--fast-p-inclusive]\n"
      "The best plan of each held-out task's knob space in CONFIG's sim world, and the fast_p it reaches");
  opts.add_options()("help,h", "show this help")("set", po::value<std::vector<std::string>>()->composing(),
                                                 "override a config key: key=value")(
      "budget", po::value<int64_t>(&budget),
      "evaluations per task (default 4000): a knob space this small or smaller is searched whole")(
      "format", po::value<std::string>(&format), "text (default) or json (one object)")(
      "fast-p-inclusive", "count speedup >= p (default: speedup > p, KernelBench's definition)");
  po::variables_map vm;
  if (auto stop = parse_options("harness oracle", args, opts, {{"config", 1}}, &vm)) return *stop;
  auto fail = [](const std::string& m) {
    std::cerr << "harness oracle: " << m << "\n";
    return 2;
  };
  if (!vm.count("config")) return fail("expected an experiment config (harness oracle CONFIG)");
  if (budget < 1 || budget > 100000000)
    return fail("--budget: expected 1 to 100000000, found " + std::to_string(budget));
  if (format != "text" && format != "json") return fail("--format: expected text or json, found '" + format + "'");
  bool inclusive = vm.count("fast-p-inclusive") > 0;
  std::vector<std::string> overrides;
  if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
  Result<Experiment> exp = load_experiment(vm["config"].as<std::string>(), overrides);
  if (!exp.ok()) return fail(exp.status().message());
  if (exp->device != DeviceKind::kSim)
    return fail(std::string("device.kind: the oracle searches the sim world, found '") +
                kDeviceKinds.name(exp->device) + "'");
  pin_numeric_settings();
  Result<World> world = build_world(*exp);
  if (!world.ok()) return fail(world.status().message());
  TaskSplit split = split_tasks(world->suite, *exp);

  std::vector<OracleTask> rows;
  for (const Task* t : split.eval) {
    TaskSearch search(*exp, *t, *world->evaluator, budget);
    Result<OracleTask> r = search.run();
    if (!r.ok()) return fail(t->id + ": " + r.status().message());
    rows.push_back(*r);
    std::fprintf(stderr, "oracle: %s %.3fx after %lld plans%s\n", t->id.c_str(), r->speedup,
                 static_cast<long long>(r->evaluated), r->exhaustive ? " (whole space)" : "");
  }
  // fast_p per level and over all held-out tasks.
  std::map<std::string, std::pair<int, int>> counts;  // key: "L<level>_F<p>" or "all_F<p>"
  auto pass = [&](double s, double p) { return inclusive ? s >= p : s > p; };
  nlohmann::json fast = nlohmann::json::object();
  for (double p : exp->thresholds) {
    std::string ps = format_number("%g", p);
    std::map<int, std::pair<int, int>> by_level;
    int all_pass = 0;
    for (const auto& r : rows) {
      auto& c = by_level[r.level];
      c.second++;
      if (pass(r.speedup, p)) {
        c.first++;
        all_pass++;
      }
    }
    for (const auto& [level, c] : by_level)
      fast["L" + std::to_string(level) + "_F" + ps] = 100.0 * c.first / std::max(1, c.second);
    fast["all_F" + ps] = rows.empty() ? 0.0 : 100.0 * all_pass / static_cast<double>(rows.size());
  }
  if (format == "json") {
    nlohmann::json j = {{"config", vm["config"].as<std::string>()},
                        {"seed", exp->seed},
                        {"budget", budget},
                        {"fast_p", fast},
                        {"fast_p_definition", inclusive ? "speedup >= p" : "speedup > p"}};
    nlohmann::json tasks = nlohmann::json::array();
    for (const auto& r : rows)
      tasks.push_back({{"task", r.id},
                       {"level", r.level},
                       {"speedup", r.speedup},
                       {"plan", r.plan.hex()},
                       {"knobs", r.knobs},
                       {"evaluated", r.evaluated},
                       {"settings", r.cardinality},
                       {"exhaustive", r.exhaustive}});
    j["tasks"] = tasks;
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::printf("oracle of %s (seed %llu): the best plan of each held-out task's knob space; fast_p counts %s\n",
              vm["config"].as<std::string>().c_str(), static_cast<unsigned long long>(exp->seed),
              inclusive ? "speedup >= p" : "speedup > p");
  std::printf("%-8s %9s %10s %12s  %s\n", "task", "speedup", "evaluated", "settings", "plan");
  for (const auto& r : rows)
    std::printf("%-8s %8.3fx %10lld %12.0f  %s%s\n", r.id.c_str(), r.speedup, static_cast<long long>(r.evaluated),
                r.cardinality, r.plan.hex().substr(0, 12).c_str(), r.exhaustive ? " (whole space)" : "");
  for (const auto& [k, v] : fast.items()) std::printf("fast_p %-10s %5.1f%%\n", k.c_str(), v.get<double>());
  return 0;
}

}  // namespace vinci
