// `replay export RUN [--out FILE] [--role policy|selection|summary|all] [--phase train|...]
//                    [--all-calls] [--allow-empty]`
// A run's model calls with their rewards and advantages as JSON lines, for a language-model
// trainer (replay/export.h gives the matching rules, docs/training_export.md the format).
//
// Writes to stdout, or to FILE atomically (a temporary file renamed into place: FILE is the old
// file or the whole export, never a part). A run with no model calls (a sim backbone's) and an
// export with no line are errors (exit 2) unless --allow-empty. A damaged log or a corrupt object
// exits 1; every other error 2. A summary goes to stderr.
#include <boost/program_options.hpp>
#include <iostream>

#include "core/atomic_file.h"
#include "core/cli.h"
#include "replay/commands.h"
#include "replay/export.h"

namespace vinci {

int cmd_export(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: replay export RUN [options]");
  opts.add_options()("help,h", "show this help")(
      "out", po::value<std::string>(), "write to this file (atomically) instead of stdout")(
      "role", po::value<std::string>()->default_value("all"), "policy, selection, summary or all")(
      "phase", po::value<std::string>()->default_value("train"),
      "train, eval, verify, coldstart or tts (only train has advantages)")(
      "all-calls", "also write the calls no advantage matches, with null advantage fields")(
      "allow-empty", "an export with no line (a sim run's) is not an error");
  po::variables_map vm;
  if (auto stop = parse_options("replay export", args, opts, {{"run", 1}}, &vm)) return *stop;
  if (!vm.count("run")) {
    std::cerr << "replay export: expected a run folder\n" << opts;
    return 2;
  }
  const std::string run = vm["run"].as<std::string>();
  ExportOptions options;
  options.phase = vm["phase"].as<std::string>();
  options.role = vm["role"].as<std::string>();
  options.all_calls = vm.count("all-calls") > 0;
  const bool allow_empty = vm.count("allow-empty") > 0;
  if (Status st = check_export_options(options); !st.ok()) {
    std::cerr << "replay export: " << st.message() << "\n";
    return 2;
  }
  const bool to_file = vm.count("out") > 0;
  std::string buffer;
  auto summary = export_run(run, options, [&](const std::string& line) {
    if (to_file) {
      buffer += line;
      buffer += '\n';
    } else {
      std::cout << line << '\n';
      if (!std::cout) return io_error("cannot write to stdout");
    }
    return Status();
  });
  std::cout.flush();
  if (!summary.ok()) {
    std::cerr << "replay export: " << summary.status().to_string() << "\n";
    return summary.status().code() == StatusCode::kCorruption ? 1 : 2;
  }
  const ExportSummary& s = *summary;
  if (s.lines == 0 && !allow_empty) {
    if (s.run_calls == 0) {
      std::cerr << "replay export: " << run
                << " has no model calls (no llmReply records): it was not recorded with a "
                   "language-model backbone (backbone.kind = \"openai\"), so there is nothing to "
                   "train on; --allow-empty writes an empty export instead\n";
    } else {
      std::cerr << "replay export: no model call of phase " << options.phase << " (role "
                << options.role << ") has an advantage";
      if (s.calls == 0) std::cerr << "; the run has no such calls";
      if (options.phase != "train") {
        std::cerr << "; only the train phase records advantages (--all-calls writes the calls without)";
      }
      std::cerr << "; --allow-empty writes an empty export instead\n";
    }
    return 2;
  }
  if (to_file) {
    if (Status st = write_file_atomic(vm["out"].as<std::string>(), buffer); !st.ok()) {
      std::cerr << "replay export: " << st.to_string() << "\n";
      return 2;
    }
  }
  std::cerr << "replay export: " << s.lines << (s.lines == 1 ? " line" : " lines");
  if (!s.lines_by_role.empty()) {
    std::cerr << " (";
    const char* sep = "";
    for (const auto& [role, n] : s.lines_by_role) {
      std::cerr << sep << role << " " << n;
      sep = ", ";
    }
    std::cerr << ")";
  }
  std::cerr << " of phase " << options.phase;
  if (s.failed > 0) std::cerr << ", " << s.failed << " of failed calls (reply null)";
  if (to_file) std::cerr << ", to " << vm["out"].as<std::string>();
  std::cerr << "\n";
  if (s.calls_without_advantage > 0 && !options.all_calls) {
    std::cerr << "replay export: " << s.calls_without_advantage
              << " model calls without an advantage left out (--all-calls writes them)\n";
  }
  if (s.advantages_without_call > 0) {
    std::cerr << "replay export: " << s.advantages_without_call
              << " advantages without a model call skipped\n";
  }
  if (!s.run_completed) {
    std::cerr << "replay export: note: the run did not finish; its last step may be partial\n";
  }
  return 0;
}

}  // namespace vinci
