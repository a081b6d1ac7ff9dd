// `harness`: runs experiments and the tools around them. main() wires concrete implementations
// together; each subcommand lives in its own cmd_*.cc.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "harness/commands.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

// Keep sorted by name.
const Subcommand kSubcommands[] = {
    {"config", "print the config reference, or a config's effective keys", vinci::cmd_config},
    {"env", "print the environment a run would record", vinci::cmd_env},
    {"eval", "evaluate one plan on one task and print its result record", vinci::cmd_eval},
    {"run", "run an experiment (or --resume a stopped one)", vinci::cmd_run},
    {"skills", "inspect a skill library (search: BM25 ranking of a query)", vinci::cmd_skills},
    {"tasks", "list the task suite (--level N), a task's knobs or default plan", vinci::cmd_tasks},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: harness <command> [options]\n\ncommands:\n");
  for (const auto& c : kSubcommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`harness <command> --help` describes a command's options.\n");
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
  std::fprintf(stderr, "harness: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
