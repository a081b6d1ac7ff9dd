// A program made of subcommands (`harness run ...`, `replay verify ...`): the table and the
// dispatch both CLIs share. Each subcommand takes the arguments after its name and returns the
// exit code.
#ifndef VINCI_CORE_CLI_H_
#define VINCI_CORE_CLI_H_

#include <string>
#include <vector>

namespace vinci {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

// Runs the subcommand argv[1] names with the arguments after it. No subcommand prints the usage
// to stderr and returns 2; --help or -h prints it to stdout and returns 0; an unknown one is an
// error naming it (2). `footer` is printed after the command list.
int run_subcommand(const char* program, const std::vector<Subcommand>& commands,
                   const char* footer, int argc, char** argv);

}  // namespace vinci

#endif  // VINCI_CORE_CLI_H_
