// Re-drives a recorded run from its manifest and log and checks every record.
#ifndef VINCI_REPLAY_VERIFY_H_
#define VINCI_REPLAY_VERIFY_H_

#include <string>
#include <vector>

#include "core/hash.h"
#include "core/status.h"

namespace vinci {

struct VerifyReport {
  uint64_t records = 0;
  uint64_t checkpoints = 0;  // checkpoint objects checked against their recorded digests
  uint64_t objects = 0;      // objects the records name, read back whole from the run's store
  Digest digest;
  double seconds = 0;
  // The run's numeric settings that differ from this process's ("key: recorded X, here Y"),
  // empty when they are the same. Verify re-derives under them all the same: a run that then
  // verifies shows that they did not move its numbers.
  std::vector<std::string> settings_differ;
  // The run's manifest is not complete, but its log holds every record of its loop (it stopped
  // after them, before its reports were written and it was marked complete).
  bool unfinished = false;
  std::string damage;  // an unfinished run's log ends then in this damaged frame (resume drops it)
};

// Rebuilds the run's world from its recorded config, runs the loop with every record compared
// against the log (rr-style: the first divergence stops it, with both values), and checks the
// final RunEnd record and the manifest's digest. Every object the re-derived run stores must be in
// the run's store and read back whole (kNotFound / kCorruption naming it). Every checkpoint object the log names is
// then read from the run's store and checked against its recorded parameter digest (harness/checkpoints.h): re-derived
// objects go to a scratch store, so this is what checks the stored ones. Numeric settings (harness/world.h) that differ
// from the manifest's do not stop it: the records decide. They are listed in the report when it verifies, and named in
// the mismatch when it does not, as the likely cause. With recorded_backbone, backbone calls are answered from the log
// (replay/recorded_backbone.h) instead of re-running the sim network: the way to replay a run whose backbone is
// external.
//
// A run whose manifest is not complete (stopped, or still running) is re-derived up to where its
// log ends: a language-model call its log does not hold is a failed call there, so the loop runs
// on to the log's end. When the loop then produces a record past that end, the run is unfinished:
// kFailedPrecondition saying so, where the log ends (records, step, the last record), that every
// record it holds matched, and that `harness run --resume RUN` continues it. A record that differs
// is a kMismatch, as in a completed run. Its log may end in a frame a kill cut short: the good
// frames before it are what it holds (resume drops the rest).
Result<VerifyReport> verify_run(const std::string& run_dir, bool recorded_backbone = false);

}  // namespace vinci

#endif  // VINCI_REPLAY_VERIFY_H_
