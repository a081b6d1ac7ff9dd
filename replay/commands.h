// The `replay` CLI's subcommands. Each takes the arguments after its name and returns the exit
// code: 0 success (runs equal, run verified), 1 a negative result (runs differ, damage found),
// 2 bad usage or an error — as diff(1), so CI can gate on it.
#ifndef VINCI_REPLAY_COMMANDS_H_
#define VINCI_REPLAY_COMMANDS_H_

#include <string>
#include <vector>

namespace vinci {

int cmd_cat(const std::vector<std::string>& args);
int cmd_diff(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_rescore(const std::vector<std::string>& args);
int cmd_score(const std::vector<std::string>& args);
int cmd_verify(const std::vector<std::string>& args);

}  // namespace vinci

#endif  // VINCI_REPLAY_COMMANDS_H_
