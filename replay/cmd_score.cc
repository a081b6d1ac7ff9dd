// `replay score RUN [--thresholds 1,1.2,1.5,2] [--turn last|best] [--format md|csv|json]
//                   [--step N] [--phase eval|tts] [--fast-p-inclusive]
//                   [--tasks all|kernelbench|unflagged]`
// fast_p of a run's held-out evaluation, from its log alone. With the defaults it prints the
// tables of the run's final evaluation as summary.md has them, after a line saying which task set
// it scored (KernelBench problems, flagged ones, vinci's own) and which comparison fast_p used:
// speedup > p (KernelBench's definition) unless --fast-p-inclusive asks for speedup >= p. A run
// whose manifest is not complete (stopped, or still running) is scored too, with a first line
// (Markdown) and a line on stderr saying it is unfinished and which evaluation was scored.
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "core/cli.h"
#include "gpu/task.h"
#include "harness/experiment.h"
#include "harness/report.h"
#include "replay/commands.h"
#include "replay/run_data.h"

namespace vinci {

namespace {

// --thresholds (comma-separated numbers in eval.thresholds' range), else the run's own.
Result<std::vector<double>> thresholds_to_score(const boost::program_options::variables_map& vm,
                                                const ManifestInfo& manifest) {
  if (!vm.count("thresholds")) {
    auto exp = experiment_from_text(manifest.config_text, "the run's config");
    if (!exp.ok()) return invalid_argument(exp.status().to_string());
    return exp->thresholds;
  }
  std::vector<double> thresholds;
  std::stringstream ss(vm["thresholds"].as<std::string>());
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto p = parse_number_option("--thresholds", item, 0, 1e6);
    if (!p.ok()) return invalid_argument(p.status().message() + " (thresholds are numbers separated by commas)");
    thresholds.push_back(*p);
  }
  if (thresholds.empty()) return invalid_argument("--thresholds: expected numbers separated by commas, found none");
  return thresholds;
}

// The held-out tasks of the set (all, kernelbench, unflagged) and, in `sets`, each one's set
// (Task::set_name), which the run's task suite says.
Result<std::vector<TaskTurns>> tasks_to_score(const std::vector<TaskTurns>& tasks, const std::string& set,
                                              const ManifestInfo& manifest, std::vector<std::string>* sets) {
  auto exp = experiment_from_text(manifest.config_text, "the run's config");
  std::string task_dir = exp.ok() && !exp->task_dir.empty() ? exp->task_dir : default_task_dir();
  Result<TaskSuite> suite = load_task_suite(task_dir);
  if (!suite.ok()) return invalid_argument(suite.status().to_string());
  std::vector<TaskTurns> scored;
  for (const TaskTurns& t : tasks) {
    const Task* task = suite->find(t.task);
    std::string s = task ? task->set_name() : "not in the suite";
    bool keep = set == "all" || (set == "kernelbench" && s.rfind("kernelbench", 0) == 0) ||
                (set == "unflagged" && s == "kernelbench");
    if (!keep) continue;
    sets->push_back(s);
    scored.push_back(t);
  }
  if (scored.empty()) return invalid_argument("--tasks " + set + ": no held-out task of the run is in that set");
  return scored;
}

}  // namespace

int cmd_score(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: replay score RUN [options]");
  opts.add_options()("help,h", "show this help")("thresholds", po::value<std::string>(),
                                                 "comma-separated p values (default: the run's)")(
      "turn", po::value<std::string>(), "last or best (default: both)")(
      "format", po::value<std::string>()->default_value("md"), "md, csv or json")(
      "step", po::value<int>(), "the evaluation before this step (default: the final one)")(
      "phase", po::value<std::string>()->default_value("eval"),
      "eval (the held-out evaluations) or tts (the test-time-scaling pass after the final one;\n"
      "best turn: the best of all its turns)")("fast-p-inclusive",
                                               "count speedup >= p instead of KernelBench's speedup > p")(
      "strict", "count speedup > p (KernelBench's definition; the default, kept for scripts)")(
      "tasks", po::value<std::string>()->default_value("all"),
      "which held-out tasks to score: all, kernelbench (KernelBench problems, flagged ones included) or\n"
      "unflagged (KernelBench problems that KernelBench does not flag and that are not degenerate)");
  po::variables_map vm;
  if (auto stop = parse_options("replay score", args, opts, {{"run", 1}}, &vm)) return *stop;
  if (!vm.count("run")) {
    std::cerr << "replay score: expected a run folder\n" << opts;
    return 2;
  }
  TableFormat format;
  std::string f = vm["format"].as<std::string>();
  if (f == "md")
    format = TableFormat::kMarkdown;
  else if (f == "csv")
    format = TableFormat::kCsv;
  else if (f == "json")
    format = TableFormat::kJson;
  else {
    std::cerr << "replay score: --format: expected md, csv or json, found '" << f << "'\n";
    return 2;
  }
  auto data = read_run_data(vm["run"].as<std::string>());
  if (!data.ok()) {
    std::cerr << "replay score: " << data.status().to_string() << "\n";
    return 2;
  }
  Result<std::vector<double>> thresholds = thresholds_to_score(vm, data->manifest);
  if (!thresholds.ok()) {
    std::cerr << "replay score: " << thresholds.status().message() << "\n";
    return 2;
  }
  std::string phase = vm["phase"].as<std::string>();
  if (phase != "eval" && phase != "tts") {
    std::cerr << "replay score: --phase: expected eval or tts, found '" << phase << "'\n";
    return 2;
  }
  if (phase == "tts") {
    if (data->tts.empty()) {
      std::cerr << "replay score: the run holds no test-time scaling (tts.enabled)\n";
      return 2;
    }
    if (vm.count("step")) {
      std::cerr << "replay score: --step: test-time scaling runs once, after the final evaluation\n";
      return 2;
    }
    // Scored like an evaluation: its outcomes under the final evaluation's step.
    int32_t final_step = data->eval.empty() ? 0 : data->eval.rbegin()->first;
    data->eval = {{final_step, data->tts}};
  }
  if (data->eval.empty()) {
    std::cerr << "replay score: the run holds no evaluation\n";
    return 2;
  }
  int step = vm.count("step") ? vm["step"].as<int>() : data->eval.rbegin()->first;
  auto it = data->eval.find(step);
  if (it == data->eval.end()) {
    std::string steps;
    for (const auto& [s, _] : data->eval) steps += " " + std::to_string(s);
    std::cerr << "replay score: no evaluation before step " << step << " (there are:" << steps << ")\n";
    return 2;
  }
  if (vm.count("strict") && vm.count("fast-p-inclusive")) {
    std::cerr << "replay score: --strict and --fast-p-inclusive contradict each other\n";
    return 2;
  }
  FastPCompare compare = vm.count("fast-p-inclusive") ? FastPCompare::kInclusive : FastPCompare::kStrict;
  // A stopped (or still running) run's tables look like a finished run's: say which they are.
  std::string unfinished;
  if (!data->manifest.completed) {
    unfinished =
        "unfinished run (its manifest is not complete: stopped, or still running): scored the evaluation "
        "before step " +
        std::to_string(step) + (vm.count("step") ? "" : ", the last one it recorded") +
        "; a finished run's final evaluation may differ";
    std::cerr << "replay score: " << vm["run"].as<std::string>() << ": " << unfinished << "\n";
  }
  auto header = [&] {
    if (format != TableFormat::kMarkdown) return;
    if (!unfinished.empty()) std::cout << "**Unfinished run**: " << unfinished << ".\n\n";
  };
  std::string set = vm["tasks"].as<std::string>();
  if (set != "all" && set != "kernelbench" && set != "unflagged") {
    std::cerr << "replay score: --tasks: expected all, kernelbench or unflagged, found '" << set << "'\n";
    return 2;
  }
  std::vector<std::string> sets;
  Result<std::vector<TaskTurns>> scored = tasks_to_score(it->second, set, data->manifest, &sets);
  if (!scored.ok()) {
    std::cerr << "replay score: " << scored.status().message() << "\n";
    return 2;
  }
  EvalPoint point;
  point.step = step;
  for (TurnMode m : {TurnMode::kLast, TurnMode::kBest}) {
    for (Denominator d : {Denominator::kAll, Denominator::kCorrect}) {
      for (const FastP& fp : fast_p(*scored, *thresholds, m, d, compare)) point.fast_p.push_back(fp);
    }
  }
  if (vm.count("turn")) {
    std::string t = vm["turn"].as<std::string>();
    if (t != "last" && t != "best") {
      std::cerr << "replay score: --turn: expected last or best, found '" << t << "'\n";
      return 2;
    }
    TurnMode m = t == "last" ? TurnMode::kLast : TurnMode::kBest;
    header();
    if (format == TableFormat::kMarkdown) std::cout << scored_set_line(sets, set, compare);
    for (Denominator d : {Denominator::kAll, Denominator::kCorrect}) {
      std::cout << fast_p_table(point.fast_p, m, d, format);
      if (format == TableFormat::kJson) std::cout << "\n";
    }
    return 0;
  }
  header();
  if (format == TableFormat::kMarkdown) std::cout << scored_set_line(sets, set, compare);
  std::cout << fast_p_report(point, format);
  return 0;
}

}  // namespace vinci
