// `replay verify RUN`: re-derives every record of a run and compares; exit 0 with the run digest
// when bit-exact, 1 at the first divergence (printed with both values), 2 on error, and 2 for an
// unfinished run whose log ends before its loop does (saying where, that the records it holds
// matched, and that `harness run --resume RUN` continues it). Numeric settings that differ from
// the run's are named, whichever way it ends.
#include <boost/program_options.hpp>
#include <iostream>

#include "core/cli.h"
#include "replay/commands.h"
#include "replay/verify.h"

namespace vinci {

int cmd_verify(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: replay verify RUN [--backbone run|recorded]");
  opts.add_options()("help,h", "show this help")(
      "force", "accepted for older scripts: verify always re-derives, whatever the settings")(
      "backbone", po::value<std::string>()->default_value("run"),
      "run: re-run the run's own backbone; recorded: answer backbone calls from the log");
  po::variables_map vm;
  if (auto stop = parse_options("replay verify", args, opts, {{"run", 1}}, &vm)) return *stop;
  if (!vm.count("run")) {
    std::cerr << "replay verify: expected a run folder\n" << opts;
    return 2;
  }
  std::string backbone = vm["backbone"].as<std::string>();
  if (backbone != "run" && backbone != "recorded") {
    std::cerr << "replay verify: --backbone: expected run or recorded, found '" << backbone << "'\n";
    return 2;
  }
  auto rep = verify_run(vm["run"].as<std::string>(), backbone == "recorded");
  if (!rep.ok()) {
    std::cerr << "replay verify: " << rep.status().to_string() << "\n";
    return rep.status().code() == StatusCode::kMismatch ? 1 : 2;
  }
  if (!rep->settings_differ.empty()) {
    std::cout << "note: the run was recorded under other numeric settings:\n";
    for (const auto& d : rep->settings_differ) std::cout << "  " << d << "\n";
    std::cout << "every record re-derived bit-exactly under the settings here: they did not move "
                 "its numbers\n";
  }
  std::cout << "verified " << rep->records << " records in " << rep->seconds << " s\n";
  if (rep->unfinished) {
    std::cout << "note: the run is unfinished (its manifest is not complete): its log holds every record of its "
                 "loop, but it stopped before its reports were written; `harness run --resume "
              << vm["run"].as<std::string>() << "` finishes it\n";
    if (!rep->damage.empty()) {
      std::cout << "note: its log then ends in a damaged frame (" << rep->damage << "), which the resume drops\n";
    }
  }
  if (rep->objects) std::cout << "read back " << rep->objects << " objects whole\n";
  if (rep->checkpoints) std::cout << "checked " << rep->checkpoints << " checkpoint objects\n";
  std::cout << "digest: " << rep->digest.hex() << "\n";
  return 0;
}

}  // namespace vinci
