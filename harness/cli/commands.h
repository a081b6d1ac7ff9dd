// The `harness` CLI's subcommands. Each takes the arguments after its name and returns the
// process exit code: 0 success, 1 a failed result (where a command has one), 2 bad usage or error.
#ifndef VINCI_HARNESS_CLI_COMMANDS_H_
#define VINCI_HARNESS_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace vinci {

int cmd_calibrate(const std::vector<std::string>& args);
int cmd_coldstart(const std::vector<std::string>& args);
int cmd_config(const std::vector<std::string>& args);
int cmd_env(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_lm(const std::vector<std::string>& args);
int cmd_measure(const std::vector<std::string>& args);
int cmd_oracle(const std::vector<std::string>& args);
int cmd_queue(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_skills(const std::vector<std::string>& args);
int cmd_tasks(const std::vector<std::string>& args);
int cmd_worker(const std::vector<std::string>& args);
int cmd_workers(const std::vector<std::string>& args);

}  // namespace vinci

#endif  // VINCI_HARNESS_CLI_COMMANDS_H_
