// `harness calibrate`: refits the simulated device's profile to measured sweeps and says, on
// tasks the fit never saw, how far the sim world's verdicts are from the GPU's.
//
//   harness calibrate [--data FILE] [--profile TOML] [--out TOML] [--report MD] [--plans JSONL] [--split-seed N]
//   [--judge] [--check [--expect FILE]]
//
// --data names the measurement sets (default data/measurements/calibration.toml): each [[set]] is
// `harness measure` measurements.jsonl files and the task folder they were measured with, paths
// relative to the data file. The tasks are halved by a keyed hash of their ids; the profile
// fitted to one half judges the other (gpu/sim/sim_agreement.h). Prints the before and held-out tables
// per plan family (Markdown; --report also writes them to a file); --out writes the profile fitted
// to every correct plan. With --check, exits 1 when a held-out goal is missed.
// Exit 0: done (and with --check, every goal met); 1: a goal missed under --check; 2: bad input.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <toml++/toml.h>
#include <boost/program_options.hpp>

#include "core/atomic_file.h"
#include "core/cli.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_agreement.h"
#include "gpu/task.h"
#include "harness/cli/commands.h"

namespace vinci {
namespace {

struct DataSet {
  std::string tasks;
  std::vector<std::string> files;
};

Result<std::vector<DataSet>> read_data_file(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  auto rel = [&](const std::string& p) { return std::filesystem::path(p).is_absolute() ? p : (dir / p).string(); };
  const toml::array* sets = t["set"].as_array();
  if (!sets || sets->empty()) return invalid_argument(path + ": expected one or more [[set]] tables");
  std::vector<DataSet> out;
  for (size_t i = 0; i < sets->size(); ++i) {
    std::string where = path + ": set " + std::to_string(i + 1);
    const toml::table* s = (*sets)[i].as_table();
    if (!s) return invalid_argument(where + ": expected a table");
    for (const auto& [k, v] : *s)
      if (k != "tasks" && k != "files" && k != "note")
        return invalid_argument(where + ": unknown key '" + std::string(k.str()) + "' (expected tasks, files, note)");
    DataSet d;
    std::optional<std::string> tasks = (*s)["tasks"].value<std::string>();
    if (!tasks) return invalid_argument(where + ": key 'tasks': expected the task folder (a string)");
    d.tasks = rel(*tasks);
    const toml::array* files = (*s)["files"].as_array();
    if (!files || files->empty()) return invalid_argument(where + ": key 'files': expected a non-empty list of paths");
    for (const auto& f : *files) {
      std::optional<std::string> p = f.value<std::string>();
      if (!p) return invalid_argument(where + ": key 'files': expected strings");
      d.files.push_back(rel(*p));
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  std::string data = default_task_dir() + "/../measurements/calibration.toml", profile_file, out, report_file,
              plans_file, expect_file;
  uint64_t split_seed = 0;
  std::string objective = "speedups";
  po::options_description opts(
      "usage: harness calibrate [--data FILE] [--profile TOML] [--out TOML] [--report MD] [--plans JSONL] "
      "[--split-seed N] [--judge] [--check [--expect FILE]]\n"
      "Refits the simulated device to measured sweeps; prints per plan family how the sim world's verdicts\n"
      "agree with the GPU's on tasks the fit never saw (each half of the tasks judged by the profile fitted\n"
      "to the other). Exit 1 under --check when a held-out goal is missed");
  opts.add_options()("help,h", "this text")("data", po::value<std::string>(&data),
                                            "measurement sets (default: data/measurements/calibration.toml)")(
      "profile", po::value<std::string>(&profile_file),
      "starting profile (default: h200_datasheet, the figures before any fit)")(
      "out", po::value<std::string>(&out), "write the profile fitted to every correct plan here")(
      "report", po::value<std::string>(&report_file), "also write the tables (Markdown) here")(
      "plans", po::value<std::string>(&plans_file),
      "write every plan's held-out verdicts in both worlds here (JSON lines)")(
      "split-seed", po::value<uint64_t>(&split_seed), "key of the hash that halves the tasks (default 0)")(
      "objective", po::value<std::string>(&objective), "what the fit compares: speedups (default) or times")(
      "judge", "fit nothing: print how the profile's verdicts agree with every measured plan")(
      "check", "exit 1 when a held-out goal is missed (and not allowed by --expect)")(
      "expect", po::value<std::string>(&expect_file),
      "goals the measurements are known to miss, each with the figure it must not fall below: "
      "lines 'FAMILY METRIC BOUND' (data/measurements/calibration_expected.txt)");
  po::variables_map vm;
  if (auto stop = parse_options("harness calibrate", args, opts, {}, &vm)) return *stop;
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "harness calibrate: %s\n", m.c_str());
    return 2;
  };
  Result<std::vector<DataSet>> sets = read_data_file(data);
  if (!sets.ok()) return fail(sets.status().to_string());
  Result<DeviceProfile> start =
      load_device_profile(profile_file.empty() ? profile_path("h200_datasheet") : profile_file);
  if (!start.ok()) return fail(start.status().to_string());

  // Each set's suite stays loaded: the measured plans point into it.
  std::vector<std::unique_ptr<TaskSuite>> suites;
  std::vector<MeasuredPlan> plans;
  int stale = 0;
  for (const DataSet& d : *sets) {
    Result<TaskSuite> suite = load_task_suite(d.tasks);
    if (!suite.ok()) return fail(suite.status().to_string());
    suites.push_back(std::make_unique<TaskSuite>(std::move(*suite)));
    for (const std::string& f : d.files) {
      Result<MeasuredPlans> m = load_measured_plans(f, *suites.back());
      if (!m.ok()) return fail(m.status().to_string());
      stale += m->stale;
      for (auto& p : m->plans) plans.push_back(std::move(p));
    }
  }
  if (vm.count("judge")) {
    std::vector<const MeasuredPlan*> every;
    for (const MeasuredPlan& p : plans) every.push_back(&p);
    AgreementGoals goals;
    Result<AgreementTable> t = sim_agreement(*start, every, goals.thresholds);
    if (!t.ok()) return fail(t.status().to_string());
    std::string md = "## " + start->name + " vs measured: " + std::to_string(plans.size()) + " plans from " + data +
                     "\n\n" + agreement_table_markdown(*t);
    std::fputs(md.c_str(), stdout);
    if (!plans_file.empty()) {
      Status st = write_file_atomic(plans_file, plan_verdicts_jsonl(t->plans));
      if (!st.ok()) return fail(st.to_string());
    }
    return 0;
  }
  HeldOutOptions options;
  options.split_seed = split_seed;
  if (objective != "speedups" && objective != "times")
    return fail("--objective: expected speedups or times, found '" + objective + "'");
  options.fit.objective =
      objective == "times" ? CalibrationOptions::Objective::kTimes : CalibrationOptions::Objective::kSpeedups;
  Result<HeldOutReport> rep = held_out_calibration(*start, plans, options);
  if (!rep.ok()) return fail(rep.status().to_string());
  std::string md = "## Sim vs measured: " + std::to_string(plans.size()) + " plans from " + data + "\n\n";
  if (stale > 0)
    md += std::to_string(stale) + " measured rows left out: their knobs no longer generate the plan they measured.\n\n";
  md += held_out_report_markdown(*rep, options.goals);
  std::fputs(md.c_str(), stdout);
  if (!report_file.empty()) {
    Status st = write_file_atomic(report_file, md);
    if (!st.ok()) return fail(st.to_string());
  }
  if (!plans_file.empty()) {
    Status st = write_file_atomic(plans_file, plan_verdicts_jsonl(rep->held_out.plans));
    if (!st.ok()) return fail(st.to_string());
  }
  if (!out.empty()) {
    Status st = write_file_atomic(out, device_profile_to_toml(rep->fitted));
    if (!st.ok()) return fail(st.to_string());
    std::fprintf(stderr, "harness calibrate: wrote %s\n", out.c_str());
  }
  if (vm.count("check")) {
    std::vector<ShortfallAllowance> allow;
    if (!expect_file.empty()) {
      Result<std::string> text = read_file(expect_file, kConfigFile);
      if (!text.ok()) return fail("--expect: " + text.status().to_string());
      Result<std::vector<ShortfallAllowance>> a = parse_shortfall_allowances(expect_file, *text);
      if (!a.ok()) return fail(a.status().to_string());
      allow = std::move(*a);
    }
    GoalCheck c = check_goals(rep->held_out, options.goals, allow);
    for (const auto& m : c.now_met) std::fprintf(stderr, "harness calibrate: %s: the allowance can go\n", m.c_str());
    for (const auto& m : c.allowed) std::fprintf(stderr, "harness calibrate: known shortfall: %s\n", m.c_str());
    for (const auto& m : c.missed) std::fprintf(stderr, "harness calibrate: MISSED: %s\n", m.c_str());
    if (!c.missed.empty()) {
      std::fprintf(stderr, "harness calibrate: %zu held-out goals missed\n", c.missed.size());
      return 1;
    }
  }
  return 0;
}

}  // namespace vinci
