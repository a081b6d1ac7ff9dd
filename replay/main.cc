// `replay`: reads, checks and compares recorded runs. main() wires concrete implementations
// together; each subcommand lives in its own cmd_*.cc.
#include "core/cli.h"
#include "replay/commands.h"

int main(int argc, char** argv) {
  // Keep sorted by name.
  const std::vector<vinci::Subcommand> commands = {
      {"cat", "print a run as JSON lines", vinci::cmd_cat},
      {"diff", "compare two runs: first divergence, fast_p deltas, skills", vinci::cmd_diff},
      {"export", "a run's model calls with rewards and advantages, as JSON lines for a trainer", vinci::cmd_export},
      {"rescore", "re-measure a run's kernels (live GPU or another sim profile) into a new run, with drift",
       vinci::cmd_rescore},
      {"score", "fast_p of a run from its log alone", vinci::cmd_score},
      {"verify", "re-derive every record of a run and compare", vinci::cmd_verify},
  };
  return vinci::run_subcommand("replay", commands, "exit codes: 0 ok or equal, 1 differ or damaged, 2 error", argc,
                               argv);
}
