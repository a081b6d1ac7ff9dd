// `replay diff RUN_A RUN_B`: exit 0 when the runs hold the same records, 1 when they differ, 2 on
// error (as diff(1)). Prints the first divergence, the final evaluation's fast_p deltas per level
// and threshold with paired bootstrap 95% intervals over the held-out tasks (when both runs
// evaluated the same tasks; replay/paired_bootstrap.h), the tasks whose speedup changed most, and
// the skills in one final library and not the other. Works between runs of different configs;
// when the configs differ in more than one factor (a key other than those non_factor_keys()
// names: run name, seed, output folder, threads, the report-only fast_p comparison), it says so:
// an effect it shows is then not attributable to any one setting. fast_p counts speedup > p
// (KernelBench's definition) unless --fast-p-inclusive asks for speedup >= p.
#include <capnp/message.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "core/cli.h"
#include "core/rng.h"
#include "harness/experiment.h"
#include "harness/record_sink.h"
#include "harness/report.h"
#include "recorder/record_json.h"
#include "replay/commands.h"
#include "replay/paired_bootstrap.h"
#include "replay/run_data.h"

namespace vinci {
namespace {

std::string clip(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

double share(const std::vector<TaskTurns>& tasks, const std::vector<size_t>& pick, int level, double p,
             FastPCompare compare) {
  uint32_t num = 0, count = 0;
  for (size_t i : pick) {
    const TaskTurns& t = tasks[i];
    if (level != 0 && t.level != level) continue;
    ++count;
    TurnOutcome o = pick_turn(t.turns, TurnMode::kLast);
    if (fast_p_passes(o, p, compare)) ++num;
  }
  return count ? static_cast<double>(num) / count : 0.0;
}

double best_of(const TaskTurns& t) {
  TurnOutcome o = pick_turn(t.turns, TurnMode::kBest);
  return o.compiled && o.correct && !o.decoy ? o.speedup : 0.0;
}

// How two runs' configs differ: "key: A v, B w" lines (the seed first), and the factor keys among
// them (every differing key but non_factor_keys()).
struct ConfigDiff {
  std::vector<std::string> lines;
  std::vector<std::string> factors;
};

ConfigDiff config_differences(const ManifestInfo& ma, const ManifestInfo& mb) {
  ConfigDiff d;
  if (ma.seed != mb.seed) {
    d.lines.push_back("run.seed: A " + std::to_string(ma.seed) + ", B " + std::to_string(mb.seed));
  }
  auto ca = effective_settings(ma.config_text), cb = effective_settings(mb.config_text);
  // A key one run's config lacks (recorded before the key existed) has its default there.
  auto defaults = Config::parse(experiment_schema(), "", "defaults");
  std::map<std::string, std::string> dflt;
  if (defaults.ok()) dflt = effective_settings(defaults->effective_toml());
  std::set<std::string> keys;
  for (const auto* c : {&ca, &cb})
    for (const auto& [k, v] : *c) keys.insert(k);
  auto value = [&](const std::map<std::string, std::string>& c, const std::string& k) {
    auto it = c.find(k);
    if (it != c.end()) return it->second;
    auto f = dflt.find(k);
    return f == dflt.end() ? std::string("(unset)") : f->second;
  };
  for (const auto& k : keys) {
    if (is_non_factor_key(k)) continue;
    std::string v = value(ca, k), w = value(cb, k);
    if (w == v) continue;
    d.lines.push_back(k + ": A " + v + ", B " + w);
    d.factors.push_back(k);
  }
  return d;
}

// The record `first` of each log, described and as JSON.
void print_divergence(const std::vector<std::string>& a, const std::vector<std::string>& b, size_t first) {
  std::cout << "first divergence at record " << first << ":\n";
  auto show = [&](const char* label, const std::vector<std::string>& p) {
    if (first >= p.size()) {
      std::cout << "  " << label << ": (the log ends after " << p.size() << " records)\n";
      return;
    }
    RecordView v;
    if (!v.parse(p[first]).ok()) {
      std::cout << "  " << label << ": (unreadable record)\n";
      return;
    }
    std::cout << "  " << label << ": " << describe_record(v.message().getRoot<schema::Record>()) << "\n    "
              << clip(record_to_json(v, nullptr), 600) << "\n";
  };
  show("A", a);
  show("B", b);
  std::cout << "records: A " << a.size() << ", B " << b.size() << "\n";
}

// The final evaluations' tasks paired by task id (index in A, index in B), in task id order; empty,
// with `why`, when the two runs did not evaluate the same held-out tasks.
struct TaskPairs {
  std::vector<std::pair<size_t, size_t>> pairs;
  std::string why;
};

TaskPairs pair_tasks(const std::vector<TaskTurns>& ea, const std::vector<TaskTurns>& eb) {
  std::map<std::string, size_t> ia, ib;
  for (size_t i = 0; i < ea.size(); ++i) ia.emplace(ea[i].task, i);
  for (size_t i = 0; i < eb.size(); ++i) ib.emplace(eb[i].task, i);
  TaskPairs t;
  if (ia.size() != ea.size() || ib.size() != eb.size()) {
    t.why = "a run's final evaluation lists a task twice";
    return t;
  }
  size_t common = 0;
  for (const auto& [task, i] : ia) common += ib.count(task);
  if (common != ia.size() || common != ib.size() || common == 0) {
    t.why = "the runs' held-out task sets differ (A " + std::to_string(ia.size()) + " tasks, B " +
            std::to_string(ib.size()) + ", " + std::to_string(common) +
            " in common), and a paired interval resamples tasks that both runs evaluated";
    return t;
  }
  for (const auto& [task, i] : ia) t.pairs.emplace_back(i, ib.at(task));
  return t;
}

// fast_p of the final evaluations per level and threshold, B - A, with a paired bootstrap interval
// over the held-out tasks when both runs evaluated the same ones (keyed resampling: the same
// intervals every time).
void print_fast_p_deltas(const std::vector<TaskTurns>& ea, const std::vector<TaskTurns>& eb,
                         const std::vector<double>& thresholds, int resamples, FastPCompare compare,
                         const std::string& not_attributable) {
  std::set<int> levels;
  for (const auto& t : ea) levels.insert(t.level);
  for (const auto& t : eb) levels.insert(t.level);
  std::vector<int> order(levels.begin(), levels.end());
  order.push_back(0);
  TaskPairs tasks = pair_tasks(ea, eb);
  std::cout << "\nfinal evaluation, fast_p (last turn, all tasks, %): B - A per level and threshold";
  if (tasks.pairs.empty()) {
    std::cout << "; no intervals: " << tasks.why << ".\n";
  } else {
    std::cout << ", with a paired bootstrap 95% interval: the held-out tasks, which both runs evaluated, are "
                 "resampled with replacement ("
              << resamples
              << " keyed resamples, the same tasks in A and B), each task scoring 1 where its last turn "
                 "counts at p and 0 where not; \"no effect detected\" where the interval covers 0.\n";
  }
  std::cout << fast_p_compare_line(compare) << ".\n";
  if (!not_attributable.empty()) std::cout << "Warning: " << not_attributable << ".\n";
  std::cout << "\n| level | tasks | p | A | B | B - A | 95% interval | verdict |\n|---|---|---|---|---|---|---|---|\n";
  std::vector<size_t> ia(ea.size()), ib(eb.size());
  for (size_t i = 0; i < ia.size(); ++i) ia[i] = i;
  for (size_t i = 0; i < ib.size(); ++i) ib[i] = i;
  for (int level : order) {
    std::vector<std::pair<size_t, size_t>> at_level;
    for (const auto& pr : tasks.pairs)
      if (level == 0 || ea[pr.first].level == level) at_level.push_back(pr);
    for (double p : thresholds) {
      double va = share(ea, ia, level, p, compare), vb = share(eb, ib, level, p, compare);
      std::string interval = "-", verdict = "-", count = "-";
      if (!at_level.empty()) {
        std::vector<double> xa, xb;
        for (const auto& [i, j] : at_level) {
          xa.push_back(fast_p_passes(pick_turn(ea[i].turns, TurnMode::kLast), p, compare) ? 1 : 0);
          xb.push_back(fast_p_passes(pick_turn(eb[j].turns, TurnMode::kLast), p, compare) ? 1 : 0);
        }
        RngKey key =
            RngKey::root(0).with("paired_bootstrap", level).with("p", static_cast<int64_t>(std::llround(p * 1000)));
        PairedInterval pi = paired_bootstrap(xa, xb, resamples, 0.95, key);
        char text[80];
        std::snprintf(text, sizeof text, "[%+.1f, %+.1f]", 100 * pi.lo, 100 * pi.hi);
        interval = text;
        verdict = pi.covers_zero() ? "no effect detected" : "effect detected";
        count = std::to_string(at_level.size());
      }
      char line[300];
      std::snprintf(line, sizeof line, "| %s | %s | %g | %.1f | %.1f | %+.1f | %s | %s |\n",
                    level == 0 ? "all" : ("L" + std::to_string(level)).c_str(), count.c_str(), p, 100 * va, 100 * vb,
                    100 * (vb - va), interval.c_str(), verdict.c_str());
      std::cout << line;
    }
  }
}

// The (at most 8) tasks whose best-turn speedup changed most, by |ln ratio|.
void print_biggest_changes(const std::vector<TaskTurns>& ea, const std::vector<TaskTurns>& eb) {
  std::vector<std::tuple<double, std::string, double, double>> changes;
  for (const auto& ta : ea) {
    for (const auto& tb : eb) {
      if (ta.task != tb.task) continue;
      double sa = best_of(ta), sb = best_of(tb);
      changes.emplace_back(std::fabs(std::log((sb + 0.01) / (sa + 0.01))), ta.task, sa, sb);
    }
  }
  std::sort(changes.begin(), changes.end(), [](const auto& x, const auto& y) {
    return std::get<0>(x) != std::get<0>(y) ? std::get<0>(x) > std::get<0>(y) : std::get<1>(x) < std::get<1>(y);
  });
  std::cout << "\ntasks whose best-turn speedup changed most (0 = no correct turn):\n";
  for (size_t i = 0; i < changes.size() && i < 8; ++i) {
    if (std::get<0>(changes[i]) == 0) break;
    char line[160];
    std::snprintf(line, sizeof line, "  %-10s A %.3gx  B %.3gx\n", std::get<1>(changes[i]).c_str(),
                  std::get<2>(changes[i]), std::get<3>(changes[i]));
    std::cout << line;
  }
}

// Skills in one final library and not the other (at most 10 of each named).
void print_skill_differences(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::set<std::string> sa(a.begin(), a.end()), sb(b.begin(), b.end());
  std::vector<std::string> only_a, only_b;
  std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(only_a));
  std::set_difference(sb.begin(), sb.end(), sa.begin(), sa.end(), std::back_inserter(only_b));
  std::cout << "\nskills: A " << sa.size() << ", B " << sb.size() << "; only in A " << only_a.size() << ", only in B "
            << only_b.size() << "\n";
  for (size_t i = 0; i < only_a.size() && i < 10; ++i) std::cout << "  A only: " << only_a[i] << "\n";
  for (size_t i = 0; i < only_b.size() && i < 10; ++i) std::cout << "  B only: " << only_b[i] << "\n";
}

}  // namespace

int cmd_diff(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: replay diff RUN_A RUN_B");
  opts.add_options()("help,h", "show this help")("resamples", po::value<std::string>()->default_value("2000"),
                                                 "bootstrap resamples (1 to 1000000)")(
      "fast-p-inclusive", "count speedup >= p instead of KernelBench's speedup > p");
  po::variables_map vm;
  if (auto stop = parse_options("replay diff", args, opts, {{"runs", 2}}, &vm)) return *stop;
  if (!vm.count("runs") || vm["runs"].as<std::vector<std::string>>().size() != 2) {
    std::cerr << "replay diff: expected two run folders\n" << opts;
    return 2;
  }
  auto runs = vm["runs"].as<std::vector<std::string>>();
  auto resamples_value = parse_int_option("--resamples", vm["resamples"].as<std::string>(), 1, 1000000);
  if (!resamples_value.ok()) {
    std::cerr << "replay diff: " << resamples_value.status().message() << "\n";
    return 2;
  }
  FastPCompare compare = vm.count("fast-p-inclusive") ? FastPCompare::kInclusive : FastPCompare::kStrict;
  auto a = read_payloads(runs[0], false);
  auto b = read_payloads(runs[1], false);
  for (const auto* r : {&a, &b}) {
    if (!r->ok()) {
      std::cerr << "replay diff: " << r->status().to_string() << "\n";
      return 2;
    }
  }
  auto da = read_run_data(runs[0]);
  auto db = read_run_data(runs[1]);
  for (const auto* r : {&da, &db}) {
    if (!r->ok()) {
      std::cerr << "replay diff: " << r->status().to_string() << "\n";
      return 2;
    }
  }
  // 1. The configs, and the first divergence of the logs.
  size_t n = std::min(a->size(), b->size());
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if ((*a)[i] != (*b)[i]) {
      first = i;
      break;
    }
  }
  // Two runs of different configs are different runs even where their records happen to agree.
  ConfigDiff configs = config_differences(da->manifest, db->manifest);
  std::string not_attributable;
  if (configs.factors.size() > 1) {
    std::string list;
    for (const auto& f : configs.factors) list += (list.empty() ? "" : ", ") + f;
    not_attributable = "these runs differ in " + std::to_string(configs.factors.size()) + " settings: " + list +
                       "; an effect below is not attributable to one of them";
  }
  bool equal = first == n && a->size() == b->size() && configs.lines.empty();
  if (!configs.lines.empty()) {
    std::cout << "configs differ:\n";
    for (const auto& d : configs.lines) std::cout << "  " << d << "\n";
    if (!not_attributable.empty()) {
      std::cout << not_attributable
                << " (compare runs whose configs differ in one factor: "
                   "`base = \"main.toml\"` plus that factor)\n";
    } else if (configs.factors.size() == 1) {
      std::cout << "these runs differ in one setting: " << configs.factors[0] << "\n";
    }
  }
  if (equal) {
    std::cout << "runs are equal: " << a->size() << " records, digest " << da->manifest.run_digest.hex() << "\n";
    return 0;
  }
  if (first == n && a->size() == b->size()) {
    std::cout << "records are equal (" << a->size() << ")\n";
  } else {
    print_divergence(*a, *b, first);
  }

  // 2. fast_p deltas of the final evaluations; 3. the tasks that changed most.
  if (!da->eval.empty() && !db->eval.empty()) {
    const auto& ea = da->eval.rbegin()->second;
    const auto& eb = db->eval.rbegin()->second;
    auto exp = experiment_from_text(da->manifest.config_text, runs[0]);
    std::vector<double> thresholds = exp.ok() ? exp->thresholds : std::vector<double>{1, 1.2, 1.5, 2};
    print_fast_p_deltas(ea, eb, thresholds, static_cast<int>(*resamples_value), compare, not_attributable);
    print_biggest_changes(ea, eb);
  }
  // 4. Skills in one library and not the other.
  print_skill_differences(da->final_skills, db->final_skills);
  return 1;
}

}  // namespace vinci
