#include "core/cli.h"

#include <cstdio>
#include <cstring>

namespace vinci {
namespace {

void usage(FILE* out, const char* program, const std::vector<Subcommand>& commands,
           const char* footer) {
  std::fprintf(out, "usage: %s <command> [options]\n\ncommands:\n", program);
  for (const auto& c : commands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n%s\n", footer);
}

}  // namespace

int run_subcommand(const char* program, const std::vector<Subcommand>& commands,
                   const char* footer, int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout, program, commands, footer);
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : commands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(args);
  }
  std::fprintf(stderr, "%s: unknown command '%s'\n\n", program, argv[1]);
  usage(stderr, program, commands, footer);
  return 2;
}

}  // namespace vinci
