// `replay export RUN [--out FILE] [--role policy|selection|summary|all] [--phase train|...]
//                    [--all-calls] [--allow-empty]`
// `replay export RUN --format parquet|jsonl|tensorboard --out DIR`
// A run's model calls with their rewards and advantages as JSON lines, for a language-model
// trainer (replay/export.h gives the matching rules, docs/training_export.md the format).
//
// Writes to stdout, or to FILE atomically (a temporary file renamed into place: FILE is the old
// file or the whole export, never a part). A run with no model calls (a sim backbone's) and an
// export with no line are errors (exit 2) unless --allow-empty. A damaged log or a corrupt object
// exits 1; every other error 2. A summary goes to stderr.
//
// --format parquet, jsonl and tensorboard write the run's tables (docs/python.md) with vinci's
// Python package, `python3 -m vinci export|tensorboard`: one implementation of the tables, so
// the Parquet, JSON lines and DataFrame views of a run cannot disagree, and Parquet needs Apache
// Arrow, which Debian bookworm does not package for C++. The package is taken from the source
// tree this binary was built from (VINCI_PYTHON_DIR) when it is there, else from the installed
// ones; VINCI_PYTHON names the interpreter (default python3).
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "core/atomic_file.h"
#include "core/cli.h"
#include "replay/commands.h"
#include "replay/export.h"

namespace vinci {
namespace {

// Runs argv (argv[0] looked up on PATH) and returns its exit code, or -1 when it could not start
// or died of a signal.
int run_child(const std::vector<std::string>& args, bool quiet) {
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      FILE* null = std::freopen("/dev/null", "w", stderr);
      (void)null;
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// `python3 -m vinci export RUN --format F --out DIR`, or `... tensorboard RUN --out DIR`.
int export_tables(const std::string& run, const std::string& format, const std::string& out) {
  const char* env_python = std::getenv("VINCI_PYTHON");
  std::string python = env_python && *env_python ? env_python : "python3";
  std::string dir = VINCI_PYTHON_DIR;
  if (std::filesystem::exists(dir + "/vinci/__init__.py")) {
    const char* old = std::getenv("PYTHONPATH");
    std::string path = old && *old ? dir + ":" + old : dir;
    ::setenv("PYTHONPATH", path.c_str(), 1);
  }
  const std::string module = format == "tensorboard" ? "vinci.tensorboard" : "vinci.export";
  // The imports the format needs: pandas (with vinci), pyarrow for Parquet, tensorboardX.
  const std::string needs = format == "tensorboard" ? ", tensorboardX" : format == "parquet" ? ", pyarrow" : "";
  const std::string probe = "import " + module + needs;
  if (run_child({python, "-c", probe}, true) != 0) {
    std::cerr << "replay export: --format " << format << " is written by vinci's Python package (" << module
              << "), which " << python << " cannot import" << (needs.empty() ? "" : " (with" + needs.substr(1) + ")")
              << ": install it with `pip install ./python` from the vinci repository"
              << (format == "tensorboard" ? " and `pip install tensorboardX`" : "")
              << " (docs/python.md), or set VINCI_PYTHON to an interpreter that has it\n";
    return 2;
  }
  std::vector<std::string> argv = {python, "-m", "vinci"};
  if (format == "tensorboard") {
    argv.insert(argv.end(), {"tensorboard", run, "--out", out});
  } else {
    argv.insert(argv.end(), {"export", run, "--format", format, "--out", out});
  }
  int rc = run_child(argv, false);
  if (rc < 0) {
    std::cerr << "replay export: " << python << " -m vinci did not finish (killed by a signal)\n";
    return 2;
  }
  return rc;
}

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: replay export RUN [options]");
  opts.add_options()("help,h", "show this help")(
      "out", po::value<std::string>(),
      "write to this file (atomically) instead of stdout; with --format parquet, jsonl or "
      "tensorboard: the folder to write")("role", po::value<std::string>()->default_value("all"),
                                          "policy, selection, summary or all")(
      "phase", po::value<std::string>()->default_value("train"),
      "train, eval, verify, coldstart or tts (only train has advantages)")(
      "all-calls", "also write the calls no advantage matches, with null advantage fields")(
      "allow-empty", "an export with no line (a sim run's) is not an error")(
      "format", po::value<std::string>()->default_value("calls"),
      "calls (model calls as JSON lines, above), or the run's tables: parquet, jsonl "
      "(--out DIR: one file per table) or tensorboard (--out DIR: scalars in DIR/<run name>); "
      "those three run vinci's Python package (docs/python.md)");
  po::variables_map vm;
  if (auto stop = parse_options("replay export", args, opts, {{"run", 1}}, &vm)) return *stop;
  if (!vm.count("run")) {
    std::cerr << "replay export: expected a run folder\n" << opts;
    return 2;
  }
  const std::string run = vm["run"].as<std::string>();
  const std::string format = vm["format"].as<std::string>();
  if (vm.count("out") && vm["out"].as<std::string>().empty()) {
    std::cerr << "replay export: --out: expected " << (format == "calls" ? "a file" : "a folder")
              << ", found an empty string\n";
    return 2;
  }
  if (format != "calls") {
    if (format != "parquet" && format != "jsonl" && format != "tensorboard") {
      std::cerr << "replay export: --format: expected calls, parquet, jsonl or tensorboard, found '" << format << "'\n";
      return 2;
    }
    for (const char* o : {"role", "phase"}) {
      if (!vm[o].defaulted()) {
        std::cerr << "replay export: --" << o << " selects model calls: it applies to --format calls only\n";
        return 2;
      }
    }
    for (const char* o : {"all-calls", "allow-empty"}) {
      if (vm.count(o)) {
        std::cerr << "replay export: --" << o << " applies to --format calls only\n";
        return 2;
      }
    }
    if (!vm.count("out")) {
      std::cerr << "replay export: --format " << format << " writes a folder: --out DIR is required\n";
      return 2;
    }
    return export_tables(run, format, vm["out"].as<std::string>());
  }
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
      std::cerr << "replay export: no model call of phase " << options.phase << " (role " << options.role
                << ") has an advantage";
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
    std::cerr << "replay export: " << s.advantages_without_call << " advantages without a model call skipped\n";
  }
  if (!s.run_completed) {
    std::cerr << "replay export: note: the run did not finish; its last step may be partial\n";
  }
  return 0;
}

}  // namespace vinci
