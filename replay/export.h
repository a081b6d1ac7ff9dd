// A run's model calls with their rewards and advantages, as JSON lines a language-model trainer
// reads (docs/training_export.md). vinci computes the advantages (TRLOO, harness/rl.h) and records
// them; the weights are trained elsewhere, on this export.
//
// One line per model call (LlmReply record) of the phase asked for that an advantage matches, in
// log order. Every record named below is of that phase.
//
//   policy     the LlmReply at (step, task, scheme, rollout, turn) with role policy matches the
//              advantage record of role policy at the same (step, task, scheme, rollout, turn); its
//              reward is the turn reward (kind turn) at that position.
//   selection  the LlmReply of role selection whose sampleIndex is i (its scheme) matches the
//              advantage record of role selection with sampleIndex i at the same (step, task); its
//              reward is the scheme reward (kind scheme) with sampleIndex i at (step, task).
//   summary    the LlmReply of role summary with sampleIndex i matches the advantage record of
//              role summary with sampleIndex i at the same (step, task); its reward is the summary
//              reward (kind summary) with sampleIndex i at (step, task).
//
// A call no advantage matches is left out (options.all_calls writes it with null advantage fields:
// the eval, verify and tts phases record no advantages). An advantage no call matches (a sim
// run's, or a selection the loop did not ask the model for) is skipped. Two advantages or rewards
// for one key, or two calls matching one advantage, are a damaged log: an error naming the records.
//
// Objects are read through the store, which checks every object's address: a missing or corrupt
// request or reply object is an error naming the record that names it. A damaged log is an error
// (kCorruption) before any line is written.
#ifndef VINCI_REPLAY_EXPORT_H_
#define VINCI_REPLAY_EXPORT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/status.h"

namespace vinci {

struct ExportOptions {
  std::string phase = "train";  // train, eval, verify, coldstart or tts
  std::string role = "all";     // policy, selection, summary or all
  bool all_calls = false;       // also write the calls no advantage matches
};

// Ok when the options name a known phase and role.
Status check_export_options(const ExportOptions& options);

struct ExportSummary {
  uint64_t run_calls = 0;  // LlmReply records in the whole run, any phase and role
  uint64_t calls = 0;      // ... of the phase and role asked for
  uint64_t lines = 0;      // lines written
  std::map<std::string, uint64_t> lines_by_role;
  uint64_t failed = 0;                   // lines of calls that failed (no reply)
  uint64_t calls_without_advantage = 0;  // calls of the phase and role that no advantage matched
  uint64_t advantages_without_call = 0;  // advantages of the phase and role that no call matched
  bool run_completed = false;            // the manifest's completed flag
};

// Reads the run at run_dir and hands each line (one JSON object, no newline) to `line`, in log
// order. The log is scanned whole before the first line, so an error there writes nothing; an
// error of `line` stops the export and is returned.
Result<ExportSummary> export_run(const std::string& run_dir, const ExportOptions& options,
                                 const std::function<Status(const std::string&)>& line);

}  // namespace vinci

#endif  // VINCI_REPLAY_EXPORT_H_
