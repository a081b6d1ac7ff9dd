// `harness`: runs experiments and the tools around them. main() wires concrete implementations
// together; each subcommand lives in its own cmd_*.cc.
#include "core/cli.h"
#include "harness/cli/commands.h"

int main(int argc, char** argv) {
  // Keep sorted by name.
  const std::vector<vinci::Subcommand> commands = {
      {"calibrate", "refit the simulated device to measured sweeps; held-out agreement per plan family",
       vinci::cmd_calibrate},
      {"coldstart", "run an experiment's cold start stage alone (checkpoint and library objects)",
       vinci::cmd_coldstart},
      {"config", "print the config reference, or a config's effective keys", vinci::cmd_config},
      {"env", "print the environment a run would record", vinci::cmd_env},
      {"eval", "evaluate one plan on one task and print its result record", vinci::cmd_eval},
      {"lm", "train and serve vinci's tiny language model (chat completions and the trainer protocol)", vinci::cmd_lm},
      {"measure", "measure the task suite's plans on a device beside the simulator's predictions", vinci::cmd_measure},
      {"oracle", "the best plan of each held-out task's knob space in an experiment's sim world (fast_p ceiling)",
       vinci::cmd_oracle},
      {"queue", "an evaluation queue: status (requests waiting and in progress, workers alive)", vinci::cmd_queue},
      {"run", "run an experiment (or --resume a stopped one)", vinci::cmd_run},
      {"serve", "serve the OpenAI chat completions API from the sim backbone (for openai-backbone runs)",
       vinci::cmd_serve},
      {"skills", "inspect a skill library (search: BM25 ranking of a query)", vinci::cmd_skills},
      {"tasks", "list the task suite (--level N), a task's knobs or default plan", vinci::cmd_tasks},
      {"worker", "evaluate requests from a queue (device.queue) on the sim device or a GPU", vinci::cmd_worker},
      {"workers", "start one queue worker per GPU of this machine (or N sim workers)", vinci::cmd_workers},
  };
  return vinci::run_subcommand("harness", commands, "`harness <command> --help` describes a command's options.", argc,
                               argv);
}
