#include "gpu/sim/sim_agreement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/ops.h"
#include "gpu/sim/sim_evaluator.h"

namespace vinci {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string percent(int num, int den) {
  if (den == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", 100.0 * num / den);
  return buf;
}

std::string fixed(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string threshold_name(double p) { return fixed(p, "%g"); }

// Which half a task falls in: one bit of a keyed hash of its id.
int half_of(const std::string& task_id, uint64_t seed) {
  Stream s(RngKey::root(seed).with("purpose", "calibration_split").with("task", task_id));
  return static_cast<int>(s.next_u64() & 1);
}

std::vector<CalibrationSample> samples_of(const std::vector<const MeasuredPlan*>& plans) {
  std::vector<CalibrationSample> out;
  for (const MeasuredPlan* p : plans) {
    if (!p->live_correct || !(p->live_kernel_us > 0)) continue;
    CalibrationSample s;
    s.task = p->task;
    s.sizes = p->task->size_map(p->size);
    s.plan = p->plan;
    s.measured_us = p->live_kernel_us;
    s.measured_reference_us = p->live_reference_us > 0 ? p->live_reference_us : 0;
    out.push_back(std::move(s));
  }
  return out;
}

// Verdict counts and log errors per family, pooled over the plans judged (both halves of a
// held-out judgement pool into one).
struct Pool {
  std::map<std::string, FamilyAgreement> rows;
  std::map<std::string, std::vector<double>> errors;
  std::vector<PlanVerdicts> plans;
};

Status judge(const DeviceProfile& profile, const std::vector<const MeasuredPlan*>& plans,
             const std::vector<double>& thresholds, Pool* pool) {
  SimEvaluator sim(profile);
  for (const MeasuredPlan* p : plans) {
    if (!p->live_compiled) continue;
    EvalRequest req;
    req.size = p->size;
    req.samples = 1;
    Result<EvalResult> r = sim.evaluate(*p->task, p->plan, req);
    if (!r.ok()) return Status(r.status().code(), p->source + " (sim): " + r.status().message());
    bool sim_correct = r->correct && r->compiled;
    pool->plans.push_back({p, sim_correct, r->decoy, r->speedup, r->kernel_us, r->reference_us, r->error});
    for (const std::string& family : {p->family, std::string("all")}) {
      FamilyAgreement& row = pool->rows[family];
      row.family = family;
      row.fast_p_agree.resize(thresholds.size());
      ++row.plans;
      if (sim_correct == p->live_correct) ++row.correct_agree;
      if (sim_correct && p->live_correct && r->speedup > 0 && p->live_speedup > 0) {
        ++row.timed;
        pool->errors[family].push_back(std::abs(std::log(r->speedup / p->live_speedup)));
      }
      for (size_t i = 0; i < thresholds.size(); ++i) {
        bool sim_fast = fast_p_verdict(sim_correct, r->decoy, r->speedup, thresholds[i]);
        bool live_fast = fast_p_verdict(p->live_correct, p->live_decoy, p->live_speedup, thresholds[i]);
        if (sim_fast == live_fast) ++row.fast_p_agree[i];
      }
    }
  }
  return Status();
}

AgreementTable table_of(Pool& pool, const std::vector<double>& thresholds) {
  AgreementTable t;
  t.thresholds = thresholds;
  t.plans = pool.plans;
  for (auto& [family, row] : pool.rows) {
    if (family == "all") continue;
    row.median_log_error = median_of(pool.errors[family]);
    t.rows.push_back(row);
  }
  if (pool.rows.count("all")) {
    FamilyAgreement all = pool.rows["all"];
    all.median_log_error = median_of(pool.errors["all"]);
    t.rows.push_back(all);
  }
  return t;
}

}  // namespace

namespace {

// One row per family and "all" under the columns named in `head` (family, count, timed, log error,
// correctness), then one fast_p column per threshold.
std::string table_markdown(const AgreementTable& t, const std::string& head) {
  std::string s = head;
  for (double p : t.thresholds) s += " | fast_" + threshold_name(p) + " agrees %";
  s += " |\n|---|---:|---:|---:|---:";
  for (size_t i = 0; i < t.thresholds.size(); ++i) s += "|---:";
  s += "|\n";
  for (const auto& r : t.rows) {
    s += "| " + r.family + " | " + std::to_string(r.plans) + " | " + std::to_string(r.timed) + " | " +
         fixed(r.median_log_error, "%.3f") + " | " + percent(r.correct_agree, r.plans);
    for (size_t i = 0; i < t.thresholds.size(); ++i) s += " | " + percent(r.fast_p_agree.at(i), r.plans);
    s += " |\n";
  }
  return s;
}

}  // namespace

std::string agreement_table_markdown(const AgreementTable& t) {
  return table_markdown(t, "| family | plans | timed | median abs ln(sim / measured speedup) | correctness agrees %");
}

AgreementTable live_repeatability(const std::vector<const MeasuredPlan*>& plans,
                                  const std::vector<double>& thresholds) {
  // A plan's identity: its task, size and address (two rows of one plan generate one address).
  std::map<std::tuple<std::string, int, std::string>, std::vector<const MeasuredPlan*>> measured;
  for (const MeasuredPlan* p : plans) {
    if (!p->live_compiled) continue;
    measured[{p->task->id, static_cast<int>(p->size), plan_address(p->plan).hex()}].push_back(p);
  }
  Pool pool;
  for (const auto& [key, rows] : measured) {
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t j = i + 1; j < rows.size(); ++j) {
        const MeasuredPlan& a = *rows[i];
        const MeasuredPlan& b = *rows[j];
        for (const std::string& family : {a.family, std::string("all")}) {
          FamilyAgreement& row = pool.rows[family];
          row.family = family;
          row.fast_p_agree.resize(thresholds.size());
          ++row.plans;
          if (a.live_correct == b.live_correct) ++row.correct_agree;
          if (a.live_correct && b.live_correct) {
            ++row.timed;
            pool.errors[family].push_back(std::abs(std::log(a.live_speedup / b.live_speedup)));
          }
          for (size_t t = 0; t < thresholds.size(); ++t)
            if (fast_p_verdict(a.live_correct, a.live_decoy, a.live_speedup, thresholds[t]) ==
                fast_p_verdict(b.live_correct, b.live_decoy, b.live_speedup, thresholds[t]))
              ++row.fast_p_agree[t];
        }
      }
    }
  }
  return table_of(pool, thresholds);
}

std::string repeatability_table_markdown(const AgreementTable& t) {
  return table_markdown(t, "| family | pairs | both correct | median abs ln(speedup ratio) | correctness agrees %");
}

std::string plan_verdicts_jsonl(const std::vector<PlanVerdicts>& plans) {
  std::string out;
  for (const PlanVerdicts& v : plans) {
    const MeasuredPlan& m = *v.plan;
    nlohmann::json j = {{"source", m.source},
                        {"task", m.task->id},
                        {"size", m.size == SizeName::kFull ? "full" : "small"},
                        {"family", m.family},
                        {"knobs", m.plan.knobs},
                        {"live",
                         {{"correct", m.live_correct},
                          {"decoy", m.live_decoy},
                          {"speedup", m.live_speedup},
                          {"kernel_us", m.live_kernel_us},
                          {"reference_us", m.live_reference_us}}},
                        {"sim",
                         {{"correct", v.sim_correct},
                          {"decoy", v.sim_decoy},
                          {"speedup", v.sim_speedup},
                          {"kernel_us", v.sim_kernel_us},
                          {"reference_us", v.sim_reference_us}}}};
    if (!v.sim_error.empty()) j["sim"]["error"] = v.sim_error;
    if (m.live_correct && v.sim_correct && m.live_speedup > 0 && v.sim_speedup > 0)
      j["abs_ln_ratio"] = std::abs(std::log(v.sim_speedup / m.live_speedup));
    out += j.dump() + "\n";
  }
  return out;
}

std::string plan_family(const Plan& plan) {
  std::string best = "library";
  auto rank = [](const std::string& f) {
    return f == "gemm" ? 3 : f == "row_reduction" ? 2 : f == "elementwise" ? 1 : 0;
  };
  for (const auto& k : plan.kernels)
    if (rank(kernel_family_name(k.family)) > rank(best) || best == "library") best = kernel_family_name(k.family);
  // A library GEMM with a generated epilogue is a GEMM plan: the product dominates its time.
  for (const auto& s : plan.steps) {
    const OpInfo* info = s.kind == StepKind::kLibrary && !plan.library_only() ? find_op(s.op.op) : nullptr;
    if (info && info->kind == OpKind::kGemm) best = "gemm";
  }
  return best;
}

bool is_measured_plan(const Plan& p, const std::map<std::string, std::string>& knobs, const std::string& address_hex) {
  if (plan_address(p).hex() == address_hex) return true;
  // The knobs of today's space the row does not list: added since it was recorded.
  std::set<std::string> added;
  for (const auto& kv : p.knobs)
    if (!knobs.count(kv.first)) added.insert(kv.first);
  Plan as_recorded = p;
  auto cut = [&](std::map<std::string, std::string>* m) {
    for (const std::string& k : added) m->erase(k);
  };
  cut(&as_recorded.knobs);
  for (PlanKernel& k : as_recorded.kernels) cut(&k.knobs);
  return plan_address(as_recorded).hex() == address_hex;
}

Result<Plan> plan_of_measurement(const Task& task, const std::map<std::string, std::string>& knobs,
                                 const std::string& address_hex) {
  Result<Plan> made = generate_plan(task, knobs);
  if (!made.ok()) return invalid_argument(made.status().message());
  if (is_measured_plan(*made, knobs, address_hex)) return made;
  return failed_precondition("the knobs generate plan " + plan_address(*made).hex() + ", the row measured " +
                             address_hex + " (another code generator?)");
}

Result<MeasuredPlans> load_measured_plans(const std::string& path, const TaskSuite& suite) {
  MeasuredPlans out;
  VINCI_RETURN_IF_ERROR(
      read_json_lines(path, "measurements", [&](const std::string& where, const nlohmann::json& j) -> Status {
        MeasuredPlan m;
        m.source = where;
        std::string key;
        try {
          key = "task";
          std::string id = j.at(key).get<std::string>();
          m.task = suite.find(id);
          if (!m.task) return invalid_argument(where + ": key 'task': no task '" + id + "' in the suite");
          key = "size";
          Result<SizeName> size = parse_size_name(j.at(key).get<std::string>());
          if (!size.ok()) return invalid_argument(where + ": key 'size': " + size.status().message());
          m.size = *size;
          key = "knobs";
          std::map<std::string, std::string> knobs = j.at(key).get<std::map<std::string, std::string>>();
          key = "plan_address";
          Result<Plan> p = plan_of_measurement(*m.task, knobs, j.at(key).get<std::string>());
          if (!p.ok() && p.status().code() == StatusCode::kFailedPrecondition) {
            ++out.stale;
            return Status();
          }
          if (!p.ok()) return invalid_argument(where + ": key 'knobs': " + p.status().message());
          m.plan = std::move(*p);
          m.family = plan_family(m.plan);
          const nlohmann::json& l = j.at("live");
          key = "live.compiled";
          m.live_compiled = l.at("compiled").get<bool>();
          key = "live.correct";
          m.live_correct = l.at("correct").get<bool>();
          key = "live.kernel_us";
          m.live_kernel_us = l.at("kernel_us").get<double>();
          key = "live.reference_us";
          m.live_reference_us = l.at("reference_us").get<double>();
          key = "live.speedup";
          m.live_speedup = l.at("speedup").get<double>();
          key = "live.flags";
          if (l.contains("flags"))
            for (const auto& f : l.at("flags")) m.live_decoy |= f.get<std::string>().rfind("decoy", 0) == 0;
          // Whether a plan is a decoy depends on the plan alone, by the rule both evaluators share
          // (record_compile_verdict); rows measured before it covered every task did not flag all.
          m.live_decoy |= m.live_compiled && m.plan.library_only();
        } catch (const nlohmann::json::exception& e) {
          return invalid_argument(where + ": key '" + key + "': " + e.what());
        }
        if (m.live_correct && !(m.live_kernel_us > 0 && m.live_speedup > 0))
          return invalid_argument(where + ": key 'live': a correct plan needs kernel_us > 0 and speedup > 0");
        out.plans.push_back(std::move(m));
        return Status();
      }));
  if (out.plans.empty() && out.stale == 0) return invalid_argument(path + ": no measured plans");
  return out;
}

Result<AgreementTable> sim_agreement(const DeviceProfile& profile, const std::vector<const MeasuredPlan*>& plans,
                                     const std::vector<double>& thresholds) {
  Pool pool;
  VINCI_RETURN_IF_ERROR(judge(profile, plans, thresholds, &pool));
  return table_of(pool, thresholds);
}

Result<HeldOutReport> held_out_calibration(const DeviceProfile& start, const std::vector<MeasuredPlan>& plans,
                                           const HeldOutOptions& options) {
  HeldOutReport report;
  const std::vector<double>& thresholds = options.goals.thresholds;
  std::vector<const MeasuredPlan*> all, half[2];
  std::set<std::string> tasks[2];
  for (const MeasuredPlan& p : plans) {
    all.push_back(&p);
    int h = half_of(p.task->id, options.split_seed);
    half[h].push_back(&p);
    tasks[h].insert(p.task->id);
  }
  report.halves[0] = static_cast<int>(tasks[0].size());
  report.halves[1] = static_cast<int>(tasks[1].size());
  report.tasks = report.halves[0] + report.halves[1];
  if (tasks[0].empty() || tasks[1].empty())
    return invalid_argument("calibration: the split left a half without tasks (" + std::to_string(report.tasks) +
                            " tasks in all): measure more tasks");
  VINCI_ASSIGN_OR_RETURN(report.before, sim_agreement(start, all, thresholds));
  Pool held;
  for (int h = 0; h < 2; ++h) {
    std::vector<CalibrationSample> train = samples_of(half[1 - h]);
    if (train.empty())
      return invalid_argument("calibration: no correct plan in half " + std::to_string(1 - h) + " to fit to");
    Result<CalibrationReport> fit = calibrate(start, train, options.fit);
    if (!fit.ok()) return fit.status();
    VINCI_RETURN_IF_ERROR(judge(fit->fitted, half[h], thresholds, &held));
  }
  report.held_out = table_of(held, thresholds);
  report.repeats = live_repeatability(all, thresholds);
  std::vector<CalibrationSample> every = samples_of(all);
  if (every.empty()) return invalid_argument("calibration: no correct plan to fit to");
  VINCI_ASSIGN_OR_RETURN(report.fit_all, calibrate(start, every, options.fit));
  report.fitted = report.fit_all.fitted;
  report.shortfalls = check_goals(report.held_out, options.goals, {}).missed;
  return report;
}

Result<std::vector<ShortfallAllowance>> parse_shortfall_allowances(const std::string& path, const std::string& text) {
  std::vector<ShortfallAllowance> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string where = path + ":" + std::to_string(n);
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream f(line);
    ShortfallAllowance a;
    std::string bound, extra;
    if (!(f >> a.family)) continue;  // blank
    if (!(f >> a.metric >> bound) || (f >> extra))
      return invalid_argument(where + ": expected 'FAMILY METRIC BOUND' (three fields), found '" + line + "'");
    bool pct = a.metric == "correct" || a.metric.rfind("fast_", 0) == 0;
    if (!pct && a.metric != "log_error")
      return invalid_argument(where + ": metric '" + a.metric + "': expected log_error, correct or fast_P");
    char* end = nullptr;
    a.bound = std::strtod(bound.c_str(), &end);
    if (end == bound.c_str() || *end != '\0' || !std::isfinite(a.bound) || a.bound < 0 || (pct && a.bound > 100))
      return invalid_argument(where + ": bound '" + bound + "': expected a number" + (pct ? " in [0, 100]" : " >= 0"));
    a.where = where;
    out.push_back(a);
  }
  return out;
}

GoalCheck check_goals(const AgreementTable& t, const AgreementGoals& g, const std::vector<ShortfallAllowance>& allow) {
  GoalCheck out;
  auto allowance = [&](const std::string& family, const std::string& metric) -> const ShortfallAllowance* {
    for (const auto& a : allow)
      if (a.family == family && a.metric == metric) return &a;
    return nullptr;
  };
  // One figure against its goal; lower_is_better for the log error.
  auto judge = [&](const std::string& family, const std::string& metric, double value, double goal,
                   bool lower_is_better, const std::string& text) {
    bool met = lower_is_better ? value <= goal : value >= goal;
    const ShortfallAllowance* a = allowance(family, metric);
    if (met) {
      if (a) out.now_met.push_back(a->where + ": " + family + " " + metric + " now meets its goal");
      return;
    }
    if (a && (lower_is_better ? value <= a->bound : value >= a->bound)) {
      out.allowed.push_back(text + " (allowed down to " + fixed(a->bound, lower_is_better ? "%.3f" : "%.1f") + ", " +
                            a->where + ")");
      return;
    }
    out.missed.push_back(text + (a ? " (worse than the " + fixed(a->bound, lower_is_better ? "%.3f" : "%.1f") +
                                         " allowed at " + a->where + ")"
                                   : ""));
  };
  auto pct = [](int num, int den) { return std::round(1000.0 * num / den) / 10; };
  for (const auto& r : t.rows) {
    if (r.plans == 0) continue;
    if (r.timed > 0) {
      double le = std::round(1000 * r.median_log_error) / 1000;
      judge(
          r.family, "log_error", le, g.median_log_error, true,
          r.family + ": median abs ln(speedup ratio) " + fixed(le, "%.3f") + " > " + fixed(g.median_log_error, "%.2f"));
    }
    double c = pct(r.correct_agree, r.plans);
    judge(r.family, "correct", c, 100 * g.correct_agreement, false,
          r.family + ": correctness agrees on " + fixed(c, "%.1f") + "% < " + fixed(100 * g.correct_agreement, "%.0f") +
              "%");
    for (size_t i = 0; i < t.thresholds.size(); ++i) {
      double f = pct(r.fast_p_agree[i], r.plans);
      std::string name = "fast_" + threshold_name(t.thresholds[i]);
      judge(r.family, name, f, 100 * g.fast_p_agreement, false,
            r.family + ": " + name + " agrees on " + fixed(f, "%.1f") + "% < " +
                fixed(100 * g.fast_p_agreement, "%.0f") + "%");
    }
  }
  return out;
}

std::string held_out_report_markdown(const HeldOutReport& r, const AgreementGoals& g) {
  std::ostringstream os;
  os << "fast_p counts correct plans that are not decoys with speedup > p (KernelBench's definition: strictly "
        "greater). Tasks: "
     << r.tasks << ", halved by a "
     << "keyed hash of their ids (" << r.halves[0] << " and " << r.halves[1] << ").\n\n";
  os << "### Before: the starting profile on every plan\n\n" << agreement_table_markdown(r.before) << "\n";
  os << "### Held out: each half judged by the profile fitted to the other half's correct plans\n\n"
     << agreement_table_markdown(r.held_out) << "\n";
  os << "Goals on held-out plans, per family: median abs ln <= " << fixed(g.median_log_error, "%.2f")
     << ", correctness agrees >= " << fixed(100 * g.correct_agreement, "%.0f")
     << "%, fast_p agrees >= " << fixed(100 * g.fast_p_agreement, "%.0f") << "%.\n";
  if (r.shortfalls.empty()) {
    os << "**Every goal met.**\n";
  } else {
    os << "**Missed (" << r.shortfalls.size() << "):**\n\n";
    for (const auto& s : r.shortfalls) os << "- " << s << "\n";
  }
  if (!r.repeats.rows.empty()) {
    os << "\n### The GPU against itself: plans measured more than once\n\n"
       << "Every pair of measurements of one plan (the same task, size and generated plan, in one sweep or in "
          "several), compared as the sim is compared above. Where the GPU's own verdicts part, no model can agree "
          "with both: a goal above the GPU's own agreement is a goal for the measurement.\n\n"
       << repeatability_table_markdown(r.repeats);
  }
  os << "\nThe profile fitted to every correct plan: mean squared log error " << fixed(r.fit_all.loss_before, "%.4f")
     << " -> " << fixed(r.fit_all.loss_after, "%.4f") << " (" << r.fit_all.rounds << " rounds, "
     << r.fit_all.evaluations << " loss evaluations).\n";
  return os.str();
}

}  // namespace vinci
