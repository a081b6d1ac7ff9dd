// `replay`: reads, checks and compares recorded runs. main() wires concrete implementations
// together; each subcommand lives in its own cmd_*.cc.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "replay/commands.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

// Keep sorted by name.
const Subcommand kSubcommands[] = {
    {"cat", "print a run as JSON lines", vinci::cmd_cat},
    {"diff", "compare two runs: first divergence, fast_p deltas, skills", vinci::cmd_diff},
    {"score", "fast_p of a run from its log alone", vinci::cmd_score},
    {"verify", "re-derive every record of a run and compare", vinci::cmd_verify},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: replay <command> [options]\n\ncommands:\n");
  for (const auto& c : kSubcommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nexit codes: 0 ok or equal, 1 differ or damaged, 2 error\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : kSubcommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(args);
  }
  std::fprintf(stderr, "replay: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
