// A program made of subcommands (`harness run ...`, `replay verify ...`): the table and the
// dispatch both CLIs share. Each subcommand takes the arguments after its name and returns the
// exit code.
#ifndef VINCI_CORE_CLI_H_
#define VINCI_CORE_CLI_H_

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace vinci {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

// Runs the subcommand argv[1] names with the arguments after it. No subcommand prints the usage
// to stderr and returns 2; --help or -h prints it to stdout and returns 0; an unknown one is an
// error naming it (2). `footer` is printed after the command list.
int run_subcommand(const char* program, const std::vector<Subcommand>& commands, const char* footer, int argc,
                   char** argv);

// Parses one subcommand's arguments. `named` holds its options (its caption is the usage line
// --help and errors print); each (name, count) of `positional` takes the next bare arguments: one
// string for count 1, else a list of at most count strings. Returns the exit code to stop with
// (0 after --help, 2 after a malformed command line, both with the usage printed), or nullopt to
// go on with *vm filled. `what` prefixes messages ("replay cat"). An empty positional argument
// (but a "query") is refused (2), naming it: "replay verify: RUN: expected a run folder, found an
// empty string".
std::optional<int> parse_options(const std::string& what, const std::vector<std::string>& args,
                                 const boost::program_options::options_description& named,
                                 const std::vector<std::pair<std::string, int>>& positional,
                                 boost::program_options::variables_map* vm);

// Reads an option's value as a decimal integer in [lo, hi]. Options are read as text and checked
// here: an unsigned option would read "-1" as 2^64 - 1, and a large count would be taken at its
// word. The error names the option, the range and what was found ("--top: expected an integer
// from 1 to 1000000, found '-1'").
Result<int64_t> parse_int_option(const std::string& option, const std::string& text, int64_t lo, int64_t hi);
// Reads a finite number in [lo, hi] (never nan or inf); the error names the option likewise.
Result<double> parse_number_option(const std::string& option, const std::string& text, double lo, double hi);

}  // namespace vinci

#endif  // VINCI_CORE_CLI_H_
